"""Hugging Face format: the key maps between our parameter names and HF's for BERT, ALBERT, RoBERTa,
ELECTRA, RoFormer, ModernBERT and GPT-1 (also as GPT-2 and, with rotary positions, GPT-NeoX), and
checkpoint I/O.

A checkpoint directory holds `config.json`, `model.safetensors` and the tokenizer files, exactly as
`transformers` writes them, so that models move both ways. Weights are read with safetensors (or,
for old `pytorch_model.bin` files, `torch.load(weights_only=True)`): loading never runs code.
"""

from __future__ import annotations

import dataclasses
import importlib
import os

import torch
from torch import nn

from ..atomic import atomic_directory
from ..checkpoint import read_config
from ..config import GPT_TYPES, BertConfig, GPTConfig, ModernBertConfig
from ..config.base import _read_json
from ..families import family_of
from ..errors import BertforgeError
from ..models import ENCODERS, encoder
from ..models.rotary import rotary_tables
from ..paths import inside
from . import native
from .tensors import check_finite, load_state, read_pickled, read_safetensors

# (ours, HF) names. `{}` stands for the layer index. HF's names are relative to the encoder
# (`BertModel`, `AlbertModel`, ...); the task and pretraining classes put it under the family's
# prefix (`bert.`, `albert.`, ...) and their heads beside it.
FAMILY_CLASS = {"bert": "Bert", "albert": "Albert", "roberta": "Roberta", "electra": "Electra", "roformer": "RoFormer",
                "modernbert": "ModernBert", "openai-gpt": "OpenAIGPT", "gpt2": "GPT2",
                "gpt_neox": "GPTNeoX"}
# The attribute holding the encoder in HF's task classes: the model_type, except in these.
ENCODER_PREFIX = {"modernbert": "model", "openai-gpt": "transformer", "gpt2": "transformer"}

EMBEDDING_KEYS = [
    ("embeddings.word.weight", "embeddings.word_embeddings.weight"),
    ("embeddings.position.weight", "embeddings.position_embeddings.weight"),
    ("embeddings.segment.weight", "embeddings.token_type_embeddings.weight"),
    ("embeddings.norm.weight", "embeddings.LayerNorm.weight"),
    ("embeddings.norm.bias", "embeddings.LayerNorm.bias"),
]
# BERT, RoBERTa and ELECTRA name a layer alike; ALBERT names its shared layer groups.
LAYER_KEYS = {
    "bert": [
        ("layers.{}.attention.out.weight", "encoder.layer.{}.attention.output.dense.weight"),
        ("layers.{}.attention.out.bias", "encoder.layer.{}.attention.output.dense.bias"),
        ("layers.{}.attention_norm.weight", "encoder.layer.{}.attention.output.LayerNorm.weight"),
        ("layers.{}.attention_norm.bias", "encoder.layer.{}.attention.output.LayerNorm.bias"),
        ("layers.{}.ffn_in.weight", "encoder.layer.{}.intermediate.dense.weight"),
        ("layers.{}.ffn_in.bias", "encoder.layer.{}.intermediate.dense.bias"),
        ("layers.{}.ffn_out.weight", "encoder.layer.{}.output.dense.weight"),
        ("layers.{}.ffn_out.bias", "encoder.layer.{}.output.dense.bias"),
        ("layers.{}.ffn_norm.weight", "encoder.layer.{}.output.LayerNorm.weight"),
        ("layers.{}.ffn_norm.bias", "encoder.layer.{}.output.LayerNorm.bias"),
    ],
    "albert": [
        ("layers.{}.attention.out.weight", "encoder.albert_layer_groups.{}.albert_layers.0.attention.dense.weight"),
        ("layers.{}.attention.out.bias", "encoder.albert_layer_groups.{}.albert_layers.0.attention.dense.bias"),
        ("layers.{}.attention_norm.weight", "encoder.albert_layer_groups.{}.albert_layers.0.attention.LayerNorm.weight"),
        ("layers.{}.attention_norm.bias", "encoder.albert_layer_groups.{}.albert_layers.0.attention.LayerNorm.bias"),
        ("layers.{}.ffn_in.weight", "encoder.albert_layer_groups.{}.albert_layers.0.ffn.weight"),
        ("layers.{}.ffn_in.bias", "encoder.albert_layer_groups.{}.albert_layers.0.ffn.bias"),
        ("layers.{}.ffn_out.weight", "encoder.albert_layer_groups.{}.albert_layers.0.ffn_output.weight"),
        ("layers.{}.ffn_out.bias", "encoder.albert_layer_groups.{}.albert_layers.0.ffn_output.bias"),
        ("layers.{}.ffn_norm.weight", "encoder.albert_layer_groups.{}.albert_layers.0.full_layer_layer_norm.weight"),
        ("layers.{}.ffn_norm.bias", "encoder.albert_layer_groups.{}.albert_layers.0.full_layer_layer_norm.bias"),
    ],
}
# Exception 1: our attention has one fused projection; HF has three. Ours = cat(query, key, value)
# along the output dimension, for both weight and bias.
QKV_OURS = "layers.{}.attention.qkv.{}"
QKV_HF = {"bert": "encoder.layer.{}.attention.self.{}.{}",
          "albert": "encoder.albert_layer_groups.{}.albert_layers.0.attention.{}.{}"}
QKV_PARTS = ("query", "key", "value")
# The projection from embedding width to hidden width (ALBERT, ELECTRA)
PROJECTION_KEYS = {"albert": "encoder.embedding_hidden_mapping_in", "electra": "embeddings_project",
                   "roformer": "embeddings_project"}
# Where the pooler lives. ELECTRA and RoFormer have none; RoBERTa's, ELECTRA's and RoFormer's
# sentence classifiers hold our pooler as their first layer (see `head_keys`). RoFormer pretrained
# with NSP keeps its pooler in our heads file.
POOLER_KEYS = {"bert": "pooler.dense", "roberta": "pooler.dense", "albert": "pooler"}

# Heads, by the attribute name a composite model gives them (ours relative to the head module),
# per family.
_MLM = {
    "bert": ("cls.predictions.transform.dense", "cls.predictions.transform.LayerNorm", "cls.predictions.bias"),
    "albert": ("predictions.dense", "predictions.LayerNorm", "predictions.bias"),
    "roberta": ("lm_head.dense", "lm_head.layer_norm", "lm_head.bias"),
    "electra": ("generator_predictions.dense", "generator_predictions.LayerNorm", "generator_lm_head.bias"),
    "roformer": ("cls.predictions.transform.dense", "cls.predictions.transform.LayerNorm", "cls.predictions.bias"),
}
# NSP; ALBERT's SOP; RoFormer's NSP is ours alone (HF's RoFormerForMaskedLM has no sentence head).
_SENTENCE = {"bert": "cls.seq_relationship", "albert": "sop_classifier.classifier", "roformer": "bertforge_nsp"}
# RoFormer's sinusoidal table: HF stores it, though it is a function of the config (see `rotary_table_hf`).
ROTARY_TABLE = "encoder.embed_positions.weight"
# Classes HF lacks, saved as the nearest it has (the missing heads go in our heads file). GPT-1's
# multiple-choice head is the one of HF's double-heads model (LM and choice); HF has no GPT token
# tagger or span extractor, so those are its bare decoder with our head beside it. HF's
# RoFormerForMultipleChoice scores the last position (padding, in a padded batch) with no pooler,
# which our [CLS] pooler and scorer are not: such a model is its encoder, our heads beside it.
NEAREST_CLASS = {"RoFormerForPreTraining": "RoFormerForMaskedLM", "OpenAIGPTForMultipleChoice": "OpenAIGPTDoubleHeadsModel",
                 "OpenAIGPTForTokenClassification": "OpenAIGPTModel", "OpenAIGPTForQuestionAnswering": "OpenAIGPTModel",
                 "RoFormerForMultipleChoice": "RoFormerModel", "GPT2ForMultipleChoice": "GPT2DoubleHeadsModel",
                 # HF's GPT-2 tagger and span extractor exist, but as heads unlike ours: the same as GPT-1's
                 "GPT2ForTokenClassification": "GPT2Model", "GPT2ForQuestionAnswering": "GPT2Model",
                 # GPT-NeoX has no multiple-choice class: its decoder, our head beside it
                 "GPTNeoXForMultipleChoice": "GPTNeoXModel", "GPTNeoXForTokenClassification": "GPTNeoXModel",
                 "GPTNeoXForQuestionAnswering": "GPTNeoXModel"}

# ModernBERT and GPT-1: our names -> HF's, by prefix (their fused QKV projections are ours as they
# are). Which biases exist depends on the config, so the pairs are made from the model's own
# parameter names.
RENAMES = {}
RENAMES["modernbert"] = [
    ("embeddings.word.", "embeddings.tok_embeddings."),
    ("embeddings.norm.", "embeddings.norm."),
    ("layers.{}.attention_norm.", "layers.{}.attn_norm."),
    ("layers.{}.attention.qkv.", "layers.{}.attn.Wqkv."),
    ("layers.{}.attention.out.", "layers.{}.attn.Wo."),
    ("layers.{}.ffn_norm.", "layers.{}.mlp_norm."),
    ("layers.{}.ffn_in.", "layers.{}.mlp.Wi."),
    ("layers.{}.ffn_out.", "layers.{}.mlp.Wo."),
    ("final_norm.", "final_norm."),
    ("pooler.", "head."),  # the task classes' dense -> act -> LayerNorm over [CLS] (see models.modernbert)
]
RENAMES["openai-gpt"] = [
    ("embeddings.word.", "tokens_embed."),
    ("embeddings.position.", "positions_embed."),
    ("layers.{}.attention.qkv.", "h.{}.attn.c_attn."),
    ("layers.{}.attention.out.", "h.{}.attn.c_proj."),
    ("layers.{}.attention_norm.", "h.{}.ln_1."),
    ("layers.{}.ffn_in.", "h.{}.mlp.c_fc."),
    ("layers.{}.ffn_out.", "h.{}.mlp.c_proj."),
    ("layers.{}.ffn_norm.", "h.{}.ln_2."),
]
# GPT-2's order: the same modules (ln_1 now before attention, ln_2 before the FFN), another name for
# the embeddings, and the LayerNorm after the last block.
RENAMES["gpt2"] = [("embeddings.word.", "wte."), ("embeddings.position.", "wpe."),
                   *RENAMES["openai-gpt"][2:], ("final_norm.", "ln_f.")]
# GPT-2's order with rotary positions: GPT-NeoX's names (its `input_layernorm` is before attention,
# `post_attention_layernorm` before the FFN); no position table.
RENAMES["gpt_neox"] = [
    ("embeddings.word.", "embed_in."),
    ("layers.{}.attention.qkv.", "layers.{}.attention.query_key_value."),
    ("layers.{}.attention.out.", "layers.{}.attention.dense."),
    ("layers.{}.attention_norm.", "layers.{}.input_layernorm."),
    ("layers.{}.ffn_in.", "layers.{}.mlp.dense_h_to_4h."),
    ("layers.{}.ffn_out.", "layers.{}.mlp.dense_4h_to_h."),
    ("layers.{}.ffn_norm.", "layers.{}.post_attention_layernorm."),
    ("final_norm.", "final_layer_norm."),
]
# Exception: GPT-NeoX's fused projection holds each head's query, key and value together (rows
# (N, 3, D)); ours holds all queries, then all keys, then all values (rows (3, N, D)).
NEOX_QKV = (".attention.query_key_value.weight", ".attention.query_key_value.bias")
# Exception: GPT-1's linear layers are OpenAI's `Conv1D`, whose weight is stored (in, out), the
# transpose of `nn.Linear`'s.
CONV1D_WEIGHTS = (".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight")


def _linear(ours: str, theirs: str) -> list[tuple[str, str]]:
    return [(f"{ours}.weight", f"{theirs}.weight"), (f"{ours}.bias", f"{theirs}.bias")]


# Ours alone, in every family: a tagger's CRF (no HF class has one; its token classifier loads without it).
CRF_KEYS = [(name, f"bertforge_crf.{name}") for name in ("transitions", "start", "end")]


def head_keys(model_type: str, architecture: str = "") -> dict[str, list[tuple[str, str]]]:
    """(ours, HF) names of every head a model of this family and HF class may have."""
    if model_type in GPT_TYPES:  # the LM head is the token embeddings
        if architecture.endswith("ForSequenceClassification"):
            return {"classifier": [("dense.weight", "score.weight")]}  # no bias
        if architecture.endswith("ForMultipleChoice") and model_type != "gpt_neox":
            return {"classifier": _linear("dense", "multiple_choice_head.summary")}
        return {"classifier": _linear("dense", "bertforge_classifier"), "qa": _linear("dense", "bertforge_qa"),
                "crf": CRF_KEYS}
    if model_type == "modernbert":
        # One `head` (dense -> act -> LayerNorm, biases as configured) before the decoder or the
        # classifier; on every token in the token-level classes (our `transform`), and QA's start
        # and end logits come from a two-output `classifier`.
        head = _linear("dense", "head.dense") + _linear("norm", "head.norm")
        return {"mlm": head + [("bias", "decoder.bias")], "transform": head,
                "classifier": _linear("dense", "classifier"), "qa": _linear("dense", "classifier"), "crf": CRF_KEYS}
    dense, norm, bias = _MLM[model_type]
    heads = {
        "mlm": _linear("dense", dense) + _linear("norm", norm) + [("bias", bias)],
        # BertFor{Sequence,Token}Classification, BertForMultipleChoice and their kin
        "classifier": _linear("dense", "classifier"),
        "qa": _linear("dense", "qa_outputs"),  # start and end logits
        "discriminator": _linear("dense", "discriminator_predictions.dense")
        + _linear("prediction", "discriminator_predictions.dense_prediction"),
        # Ours alone: the ELMo-style scalar mix of a frozen-feature classifier, SpanBERT's SBO head.
        "mix": [("weights", "bertforge_mix.weights"), ("gamma", "bertforge_mix.gamma")],
        "sbo": [(name, f"bertforge_sbo.{name}") for name in (
            "offset.weight", "dense1.weight", "dense1.bias", "norm1.weight", "norm1.bias",
            "dense2.weight", "dense2.bias", "norm2.weight", "norm2.bias", "bias")],
        "crf": CRF_KEYS,
    }
    if model_type in _SENTENCE:
        heads["nsp"] = _linear("dense", _SENTENCE[model_type])
    if model_type in ("roberta", "electra", "roformer") and architecture.endswith("ForSequenceClassification"):
        heads["classifier"] = _linear("dense", "classifier.out_proj")
    if model_type == "roformer" and architecture.endswith("ForMultipleChoice"):
        heads["classifier"] = _linear("dense", "bertforge_classifier")
    return heads


def pooler_key(model_type: str, architecture: str = "") -> str | None:
    """The HF name of our pooler's dense layer in this family's class (None: the class has none)."""
    if model_type in ("roberta", "electra", "roformer") and architecture.endswith("ForSequenceClassification"):
        return "classifier.dense"  # dense -> tanh (RoBERTa), GELU (ELECTRA) or hidden_act (RoFormer) -> out_proj
    if model_type == "roformer":
        ours = architecture == "BertForPreTraining" or architecture.endswith("ForMultipleChoice")
        return "bertforge_pooler.dense" if ours else None
    if model_type == "electra" and architecture.endswith("ForMultipleChoice"):
        return "sequence_summary.summary"  # dense -> GELU, as ELECTRA's pooler
    return POOLER_KEYS.get(model_type)


# HF prefixes of heads we know but a given model may not use (so they are skipped, not errors).
KNOWN_HEAD_PREFIXES = ("cls.", "classifier.", "qa_outputs.", "predictions.", "sop_classifier.", "lm_head.",
                       "generator_predictions.", "generator_lm_head.", "discriminator_predictions.",
                       "sequence_summary.", "pooler.", "bertforge_mix.", "bertforge_sbo.", "bertforge_pooler.",
                       "bertforge_nsp.", "head.", "decoder.", "multiple_choice_head.", "score.",
                       "bertforge_classifier.", "bertforge_qa.", "bertforge_crf.")

# Heads of ours that no HF class has (SpanBERT's boundary head, the scalar mix) live in a file of
# their own beside model.safetensors.
EXTRA_FILE = "bertforge_heads.safetensors"

# Exception 2: names written by old (TF-converted) checkpoints, renamed when read.
LEGACY_SUFFIXES = {".gamma": ".weight", ".beta": ".bias"}
# Exception 3: buffers or tied copies HF may store that carry no weights of their own.
DERIVED_KEYS = ("embeddings.position_ids", "embeddings.token_type_ids", "cls.predictions.decoder.bias",
                "predictions.decoder.bias", "lm_head.decoder.bias", ROTARY_TABLE, "rotary_emb.inv_freq")
# ... and per layer: GPT-1's and GPT-NeoX's causal-mask buffers and GPT-NeoX's rotary frequencies,
# which older `transformers` versions saved.
DERIVED_SUFFIXES = (".attn.bias", ".attn.masked_bias", ".attention.bias", ".attention.masked_bias",
                    ".rotary_emb.inv_freq")
# Decoders tied to the word embeddings: must equal them when present.
TIED_DECODERS = ("cls.predictions.decoder.weight", "predictions.decoder.weight", "lm_head.decoder.weight",
                 "generator_lm_head.weight", "decoder.weight", "lm_head.weight",
                 "embed_out.weight")  # GPT-NeoX's LM head before transformers 5
# The word-embedding matrix, by family (BERT's name for every family not listed).
WORD_EMBEDDINGS = {"modernbert": "embeddings.tok_embeddings.weight", "openai-gpt": "tokens_embed.weight",
                   "gpt2": "wte.weight", "gpt_neox": "embed_in.weight"}
BERT_WORD_EMBEDDINGS = "embeddings.word_embeddings.weight"


def hf_class(model_type: str, architecture: str) -> str:
    """The HF class of this family for one of ours: `BertForMaskedLM` is `RobertaForMaskedLM` in RoBERTa."""
    name = FAMILY_CLASS[model_type] + architecture.removeprefix("Bert") if architecture.startswith("Bert") \
        else architecture
    return NEAREST_CLASS.get(name, name)


def encoder_key_map(config: BertConfig | ModernBertConfig | GPTConfig, architecture: str = "",
                    pooler: bool = True) -> list[tuple[str, str]]:
    """Every (ours, HF) name pair of the encoder `config` describes, QKV excepted."""
    if config.model_type in RENAMES:
        return renamed_key_map(config, architecture, pooler)
    family = "albert" if config.model_type == "albert" else "bert"
    pairs = [p for p in EMBEDDING_KEYS if config.model_type != "roformer" or "position" not in p[0]]
    if config.model_type == "albert" or config.word_size != config.hidden_size:  # as `Bert.project`
        pairs += _linear("project", PROJECTION_KEYS[config.model_type])
    for i in range(config.num_hidden_groups or config.num_hidden_layers):
        pairs += [(ours.format(i), theirs.format(i)) for ours, theirs in LAYER_KEYS[family]]
    theirs = pooler_key(config.model_type, architecture) if pooler else None
    return pairs + (_linear("pooler.dense", theirs) if theirs else [])


def renamed_key_map(config: ModernBertConfig | GPTConfig, architecture: str = "", pooler: bool = True) -> list:
    """(ours, HF) name pairs of a ModernBERT encoder or GPT-1 decoder: its own parameter names
    renamed by prefix (`RENAMES`). ModernBERT's pooler is HF's `head` in the sentence-level task
    classes (in the others `head` is a head of ours)."""
    pooler = pooler and architecture.endswith(("ForSequenceClassification", "ForMultipleChoice"))
    pairs = []
    with torch.device("meta"):  # names only: no memory, no initialisation
        names = encoder(config, pooler=pooler).state_dict()
    for name in names:
        layer = name.split(".")[1] if name.startswith("layers.") else None
        for ours, theirs in RENAMES[config.model_type]:
            ours = ours.format(layer)
            if name.startswith(ours):
                pairs.append((name, theirs.format(layer) + name.removeprefix(ours)))
                break
    return pairs


def _qkv_names(config: BertConfig | ModernBertConfig | GPTConfig):
    """(our fused name, HF's three names) for each layer's weight and bias."""
    if config.model_type in RENAMES:
        return  # fused in HF too
    template = QKV_HF["albert" if config.model_type == "albert" else "bert"]
    for i in range(config.num_hidden_groups or config.num_hidden_layers):
        for kind in ("weight", "bias"):
            yield QKV_OURS.format(i, kind), [template.format(i, part, kind) for part in QKV_PARTS]


def encoder_to_hf(state: dict[str, torch.Tensor], config: BertConfig, architecture: str = "") -> dict:
    """Our encoder's state dict -> HF names (pooler-less classes drop the pooler)."""
    pooler = "pooler.dense.weight" in state
    out = {theirs: _layout(theirs, state[ours], config, to_hf=True)
           for ours, theirs in encoder_key_map(config, architecture, pooler)}
    for ours, names in _qkv_names(config):
        out.update(zip(names, state[ours].chunk(3, dim=0)))
    return out


def encoder_from_hf(tensors: dict[str, torch.Tensor], config: BertConfig, architecture: str = "",
                    pooler: bool = True) -> tuple[dict, set]:
    """HF names -> our encoder's state dict, and the HF keys that were used.

    Keys the encoder needs but `tensors` lacks are simply absent from the result; the caller
    reports them, since only it knows which file they should have been in.
    """
    state, used = {}, set()
    for ours, theirs in encoder_key_map(config, architecture, pooler):
        if theirs in tensors:
            state[ours] = _layout(theirs, tensors[theirs], config, to_hf=False)
            used.add(theirs)
    for ours, names in _qkv_names(config):
        if all(n in tensors for n in names):
            state[ours] = torch.cat([tensors[n] for n in names], dim=0)
            used.update(names)
    return state, used


def _layout(name: str, tensor: torch.Tensor, config, to_hf: bool) -> torch.Tensor:
    """HF's tensor `name` from ours (`to_hf`) or ours from it, where the layouts differ: GPT-1's
    Conv1D weights are nn.Linear's transposed (the same both ways); GPT-NeoX's fused QKV rows are
    grouped by head (see `NEOX_QKV`)."""
    if name.endswith(CONV1D_WEIGHTS):
        return tensor.t()
    if name.endswith(NEOX_QKV):
        heads = config.num_attention_heads
        grouped = (3, heads) if to_hf else (heads, 3)  # the row order of the tensor given
        return tensor.unflatten(0, (*grouped, -1)).transpose(0, 1).reshape(tensor.shape)
    return tensor


# ---- reading -------------------------------------------------------------------------------------


def has_masked_lm_head(config) -> bool:
    """Whether a saved checkpoint's HF class carries a masked-LM head (`...ForMaskedLM`, `...ForPreTraining`).
    Not ELECTRA's `ElectraForPreTraining`: the discriminator, whose head tells replaced tokens apart
    (its generator, saved beside it, is the masked LM)."""
    return any(a.endswith(("ForMaskedLM", "ForPreTraining")) and a != "ElectraForPreTraining"
               for a in config.architectures or ())


def read_weights(directory: str, model_type: str = "bert") -> tuple[dict[str, torch.Tensor], str]:
    """All tensors of a checkpoint directory under names relative to the encoder (`BertModel`'s,
    `AlbertModel`'s, ...): the family's prefix is stripped.

    Accepts `model.safetensors`, a sharded `model.safetensors.index.json`, or `pytorch_model.bin`
    (read with `weights_only=True`). Returns the tensors and the file they came from.
    """
    candidates = ["model.safetensors", "model.safetensors.index.json", "pytorch_model.bin"]
    found = [name for name in candidates if os.path.exists(os.path.join(directory, name))]
    if not found:
        raise BertforgeError(f"{directory}: no weights file (expected one of {', '.join(candidates)})")
    path = os.path.join(directory, found[0])
    if found[0] == "model.safetensors":
        tensors = read_safetensors(path)
    elif found[0].endswith(".index.json"):
        tensors = {}
        for shard in shard_files(path):
            tensors.update(read_safetensors(shard))
    else:
        tensors = read_pickled(path)
    extra = os.path.join(directory, EXTRA_FILE)
    if os.path.exists(extra):
        tensors.update(read_safetensors(extra))
    check_finite(tensors, path)
    return canonical_names(tensors, path, model_type), path


def shard_files(index: str) -> list[str]:
    """The shards a `model.safetensors.index.json` names, each inside its folder (a name with `../`
    or an absolute one is refused before anything is read)."""
    content = _read_json(index)
    weight_map = content.get("weight_map") if isinstance(content, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise BertforgeError(f"{index}: no weight_map (a shard index maps each weight to its file)")
    folder = os.path.dirname(index)
    shards = [inside(folder, shard, index) for shard in weight_map.values()]
    return sorted(set(shards))


def canonical_names(tensors: dict[str, torch.Tensor], source: str, model_type: str = "bert") -> dict:
    """Strip the family's prefix, rename legacy gamma/beta, drop derived keys, check tied decoders."""
    out = {}
    for key, tensor in tensors.items():
        key = key.removeprefix(ENCODER_PREFIX.get(model_type, model_type) + ".")
        for old, new in LEGACY_SUFFIXES.items():
            if key.endswith(old) and "LayerNorm" in key:
                key = key[: -len(old)] + new
        if key not in DERIVED_KEYS and not key.endswith(DERIVED_SUFFIXES):
            out[key] = tensor
    word_key = WORD_EMBEDDINGS.get(model_type, BERT_WORD_EMBEDDINGS)
    for name in TIED_DECODERS:
        decoder = out.pop(name, None)
        if decoder is not None and word_key not in out:
            # `transformers` may keep a tied matrix under the head's name alone (GPT's double-heads model)
            out[word_key] = decoder
        elif decoder is not None and not torch.equal(decoder, out[word_key]):
            raise BertforgeError(f"{source}: the MLM decoder {name} is not tied to the word embeddings; "
                                 "untied decoders are not supported")
    return out


def load_pretrained(directory: str, cls=None, device: str | torch.device = "cpu", new_heads: bool = False,
                    config=None, **options):
    """Load any HF BERT, ALBERT, RoBERTa, ELECTRA, RoFormer or ModernBERT directory (the encoder
    classes, pretraining and task models) as `cls`.

    `cls` is None for the encoder alone (`Bert` or `ModernBert`, as the config says: heads in the
    checkpoint are skipped) or a composite with
    the encoder at `.backbone` and heads named as in `head_keys` (e.g. `BertPretraining`), whose heads
    must be in the checkpoint unless `new_heads` allows fresh ones. A checkpoint without a pooler
    (HF's `BertForMaskedLM`, ELECTRA, token-level task models) gets a freshly initialised one,
    with a warning. `options` go to `cls` (e.g. `sentence=None`). `config`: the directory's, when
    already read.
    """
    config = config or read_config(directory)
    model = encoder(config, **options) if cls is None or cls in ENCODERS else cls(config, **options)
    for sub, part in parts(model).items():
        load_into(part, _join(directory, sub), new_heads, config if not sub else None)
    return model.to(device)


def load_into(model: nn.Module, directory: str, new_heads: bool = False, config: BertConfig | None = None,
              heads: bool = True) -> None:
    """Copy the weights of an HF checkpoint directory into an existing `model` (see `load_pretrained`).
    With `heads=False` only the encoder is read: a new task starts with a fresh head even when the
    checkpoint has one (of another task, or with other labels)."""
    config = config or read_config(directory)
    tensors, source = read_weights(directory, config.model_type)
    _check_tokenizer(directory, config)
    body, architecture = (model, "") if isinstance(model, ENCODERS) else (model.backbone, model.architecture)
    state, used = encoder_from_hf(tensors, config, architecture, pooler=body.pooler is not None)
    allowed_missing = {f"pooler.{layer}.{kind}" for layer in ("dense", "norm") for kind in ("weight", "bias")}
    fresh = set()  # new task heads: expected to be missing, so no warning
    if not isinstance(model, ENCODERS):
        state = {"backbone." + k: v for k, v in state.items()}
        allowed_missing = {"backbone." + k for k in allowed_missing}
        for name, pairs in head_keys(config.model_type, architecture).items():
            if getattr(model, name, None) is None:
                continue
            for ours, theirs in pairs:
                # ModernBERT's `head` before a token classifier is the masked-LM head's, carried over
                # to a new task as HF carries it (and as every family's pooler is).
                if theirs in tensors and (heads or name == "transform"):
                    state[f"{name}.{ours}"] = tensors[theirs]
                    used.add(theirs)
                elif new_heads:
                    fresh.add(f"{name}.{ours}")
    unexpected = [k for k in tensors if k not in used and not k.startswith(KNOWN_HEAD_PREFIXES)]
    # Other parts of the model (ELECTRA's generator) come from their own directories.
    elsewhere = {k for k in model.state_dict() for sub in parts(model) if sub and k.startswith(sub + ".")}
    load_state(model, state, source, unexpected, allowed_missing | fresh | elsewhere, quiet=fresh | elsewhere)


def _check_tokenizer(directory: str, config: BertConfig) -> None:
    """A tokenizer whose ids run past the embedding matrix would fail later, deep in a forward pass."""
    vocab_txt = os.path.join(directory, "vocab.txt")
    if not os.path.exists(vocab_txt):
        return
    with open(vocab_txt, encoding="utf-8", errors="replace") as f:
        size = sum(1 for _ in f)
    # A model may have more rows than the tokenizer has tokens (vocabularies padded to a multiple
    # of 64 for speed); the reverse is an error.
    if size > config.vocab_size:
        raise BertforgeError(f"{vocab_txt}: {size} tokens, but {os.path.join(directory, 'config.json')} "
                             f"has vocab_size={config.vocab_size}; the tokenizer does not match the model")


# ---- writing -------------------------------------------------------------------------------------


def save_pretrained(model: nn.Module, directory: str, tokenizer=None) -> None:
    """Write `model` as an HF checkpoint directory, atomically (a half-written directory never
    takes the place of a good one).

    `model` is a `Bert` encoder (saved as `BertModel`, `AlbertModel`, ...) or a composite with an
    encoder at `.backbone`, head modules named as in `head_keys`, and an `architecture` attribute naming
    the HF class; an objective made of several models (ELECTRA) writes each (see `parts`).
    """
    check_vocab_fits(tokenizer, (model if isinstance(model, ENCODERS) else model.backbone).config)
    with atomic_directory(directory) as tmp:
        write_parts(model, tmp, tokenizer)


def write_parts(model: nn.Module, directory: str, tokenizer=None) -> None:
    """Write every part of `model` (see `parts`) into an existing directory."""
    for sub, part in parts(model).items():
        os.makedirs(_join(directory, sub), exist_ok=True)
        own = _own_layout(part)
        if own is not None:
            own.write(part, _join(directory, sub), tokenizer)
            continue
        if native.is_native(part):  # no transformers class: bertforge's own layout
            native.write(part, _join(directory, sub), tokenizer)
            continue
        tensors, config = to_hf(part)
        write_pretrained(_join(directory, sub), tensors, config, tokenizer)


def load_parts(model: nn.Module, directory: str) -> None:
    """Read back what `write_parts` wrote (resuming a run)."""
    for sub, part in parts(model).items():
        own = _own_layout(part)
        if own is not None:
            own.load(part, _join(directory, sub))
        elif native.is_native(part):
            native.load(part, _join(directory, sub), read_config(_join(directory, sub)))
        else:
            load_into(part, _join(directory, sub))


def _own_layout(part: nn.Module):
    """The checkpoint module of a family with a layout of its own (its record's `checkpoint`), or None."""
    config = getattr(getattr(part, "backbone", part), "config", None)
    path = family_of(config).checkpoint if config is not None else None
    return importlib.import_module(path) if path else None


def _join(directory: str, sub: str) -> str:
    return os.path.join(directory, sub) if sub else directory


def check_vocab_fits(tokenizer, config: BertConfig) -> None:
    if tokenizer is not None and tokenizer.vocab_size > config.vocab_size:
        raise BertforgeError(f"the tokenizer has {tokenizer.vocab_size} tokens but the model only "
                             f"vocab_size={config.vocab_size}")


def write_pretrained(directory: str, tensors: dict[str, torch.Tensor], config: BertConfig, tokenizer=None) -> None:
    """Write HF-named `tensors`, `config` and the tokenizer into an existing directory. Weights of
    heads only we have go to their own file, so that `model.safetensors` is exactly what the HF
    class expects."""
    from safetensors.torch import save_file

    config.save(os.path.join(directory, "config.json"))
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}
    ours = {k: tensors.pop(k) for k in list(tensors) if k.startswith("bertforge_")}
    save_file(tensors, os.path.join(directory, "model.safetensors"), metadata={"format": "pt"})
    if ours:
        save_file(ours, os.path.join(directory, EXTRA_FILE), metadata={"format": "pt"})
    if tokenizer is not None:
        tokenizer.save_pretrained(directory)


def to_hf(model: nn.Module) -> tuple[dict[str, torch.Tensor], BertConfig | ModernBertConfig]:
    """The HF-named tensors and config of `model` (see `save_pretrained`)."""
    if isinstance(model, ENCODERS):
        body, architecture, prefix = model, "BertModel", ""
    else:
        body, architecture = model.backbone, model.architecture
        prefix = ENCODER_PREFIX.get(body.config.model_type, body.config.model_type) + "."
    model_type = body.config.model_type
    config = dataclasses.replace(body.config, architectures=[hf_class(model_type, architecture)])
    tensors = {(k if k.startswith(("bertforge_", "head.")) else prefix + k): v  # heads: not under HF's prefix
               for k, v in encoder_to_hf(body.state_dict(), config, architecture).items()}
    if model_type == "roformer":
        tensors[prefix + ROTARY_TABLE] = rotary_table_hf(config)
    if prefix:
        for name, pairs in head_keys(model_type, architecture).items():
            head = getattr(model, name, None)
            if head is not None:
                head_state = head.state_dict()
                tensors.update({theirs: head_state[ours] for ours, theirs in pairs if ours in head_state})
    return tensors, config


def rotary_table_hf(config: BertConfig) -> torch.Tensor:
    """HF's RoFormer sinusoidal table (positions, D): the sines of each pair's angle, then the cosines."""
    cos, sin = rotary_tables(torch.arange(config.max_position_embeddings), config.head_size)
    return torch.cat([sin[:, ::2], cos[:, ::2]], dim=-1)


def parts(model: nn.Module) -> dict[str, nn.Module]:
    """The HF models a training objective is saved as, by sub-directory ("" = the directory itself),
    each sub-directory named after the attribute holding that part. One for most; ELECTRA's
    discriminator and, in `generator/`, its generator."""
    return model.parts() if hasattr(model, "parts") else {"": model}
