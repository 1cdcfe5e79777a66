"""Hugging Face format: checkpoint I/O for every family saved as `transformers` saves it (BERT,
ALBERT, RoBERTa, ELECTRA, RoFormer, ModernBERT and GPT-1, also as GPT-2 and GPT-NeoX). The names
and layouts particular to a family are its own (`families/<family>/hf.py`, see
`families.hf_layout`); this module renames, checks, reads and writes through them.

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
from ..config import HFConfig
from ..config.base import _read_json
from ..errors import BertforgeError
from ..families import Family, family_of, resolve
from ..families.hf_layout import HFLayout
from ..paths import inside
from . import native
from .tensors import check_finite, load_state, read_pickled, read_safetensors, tensor_names

def layout_of(config_or_type, family: Family | None = None) -> HFLayout:
    """The Hugging Face layout of a config's (or a `model_type`'s) family (see `families.hf_layout`);
    `family`: its record, when the caller has it."""
    path = (family or family_of(config_or_type)).hf
    return resolve(path) if path else HFLayout()


def encoder_of(model: nn.Module) -> tuple[nn.Module, str]:
    """The encoder of `model` and the HF class `model` is saved as ("" for an encoder alone): a
    composite (an objective, a task model) keeps its encoder at `.backbone` and names its class."""
    backbone = getattr(model, "backbone", None)
    return (model, "") if backbone is None else (backbone, model.architecture)


def head_keys(model_type: str, architecture: str = "") -> dict[str, list[tuple[str, str]]]:
    """(ours, HF) names of every head a model of this family and HF class may have."""
    return layout_of(model_type).head_keys(model_type, architecture)


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
                "predictions.decoder.bias", "lm_head.decoder.bias",
                "encoder.embed_positions.weight",  # RoFormer's sinusoidal table (a layout's `derived`)
                "rotary_emb.inv_freq")
# ... and per layer: GPT-1's and GPT-NeoX's causal-mask buffers and GPT-NeoX's rotary frequencies,
# which older `transformers` versions saved.
DERIVED_SUFFIXES = (".attn.bias", ".attn.masked_bias", ".attention.bias", ".attention.masked_bias",
                    ".rotary_emb.inv_freq")
# Decoders tied to the word embeddings: must equal them when present.
TIED_DECODERS = ("cls.predictions.decoder.weight", "predictions.decoder.weight", "lm_head.decoder.weight",
                 "generator_lm_head.weight", "decoder.weight", "lm_head.weight",
                 "embed_out.weight")  # GPT-NeoX's LM head before transformers 5


def hf_class(model_type: str, architecture: str) -> str:
    """The HF class of this family for one of ours: `BertForMaskedLM` is `RobertaForMaskedLM` in RoBERTa."""
    return layout_of(model_type).hf_class(model_type, architecture)


def encoder_key_map(config, architecture: str = "", pooler: bool = True, family: Family | None = None
                    ) -> list[tuple[str, str]]:
    """Every (ours, HF) name pair of the encoder `config` describes, fused projections excepted.
    `family`: its record, when the caller has it."""
    family = family or family_of(config)

    def names(with_pooler: bool) -> list[str]:  # our encoder's parameter names, for layouts that rename
        with torch.device("meta"):  # names only: no memory, no initialisation
            return list(family.build_encoder(config, pooler=with_pooler).state_dict())

    return layout_of(config, family).encoder_keys(config, architecture, pooler, names)


def encoder_to_hf(state: dict[str, torch.Tensor], config: HFConfig, architecture: str = "") -> dict:
    """Our encoder's state dict -> HF names (pooler-less classes drop the pooler)."""
    pooler = "pooler.dense.weight" in state
    family = family_of(config)
    layout = layout_of(config, family)
    out = {theirs: layout.convert(theirs, state[ours], config, to_hf=True)
           for ours, theirs in encoder_key_map(config, architecture, pooler, family)}
    for ours, names in layout.fused(config):
        out.update(zip(names, state[ours].chunk(3, dim=0)))
    return out


def encoder_from_hf(tensors: dict[str, torch.Tensor], config: HFConfig, architecture: str = "",
                    pooler: bool = True, family: Family | None = None) -> tuple[dict, set]:
    """HF names -> our encoder's state dict, and the HF keys that were used (`family`: the
    config's record, when the caller has it).

    Keys the encoder needs but `tensors` lacks are simply absent from the result; the caller
    reports them, since only it knows which file they should have been in.
    """
    family = family or family_of(config)
    state, used, layout = {}, set(), layout_of(config, family)
    for ours, theirs in encoder_key_map(config, architecture, pooler, family):
        if theirs in tensors:
            state[ours] = layout.convert(theirs, tensors[theirs], config, to_hf=False)
            used.add(theirs)
    for ours, names in layout.fused(config):
        if all(n in tensors for n in names):
            state[ours] = torch.cat([tensors[n] for n in names], dim=0)
            used.update(names)
    return state, used


# ---- reading -------------------------------------------------------------------------------------


def has_masked_lm_head(config) -> bool:
    """Whether a saved checkpoint's HF class carries a masked-LM head (`...ForMaskedLM`, `...ForPreTraining`).
    Not ELECTRA's `ElectraForPreTraining`: the discriminator, whose head tells replaced tokens apart
    (its generator, saved beside it, is the masked LM)."""
    return any(a.endswith(("ForMaskedLM", "ForPreTraining")) and a != "ElectraForPreTraining"
               for a in config.architectures or ())


def read_weights(directory: str, model_type: str = "bert", layout: HFLayout | None = None
                 ) -> tuple[dict[str, torch.Tensor], str]:
    """All tensors of a checkpoint directory under names relative to the encoder (`BertModel`'s,
    `AlbertModel`'s, ...): the family's prefix is stripped.

    Accepts `model.safetensors`, a sharded `model.safetensors.index.json`, or `pytorch_model.bin`
    (read with `weights_only=True`). Returns the tensors and the file they came from.
    """
    path = weights_file(directory)
    if path.endswith(".safetensors"):
        tensors = read_safetensors(path)
    elif path.endswith(".index.json"):
        tensors = {}
        for shard in shard_files(path):
            tensors.update(read_safetensors(shard))
    else:
        tensors = read_pickled(path)
    extra = os.path.join(directory, EXTRA_FILE)
    if os.path.exists(extra):
        tensors.update(read_safetensors(extra))
    check_finite(tensors, path)
    return canonical_names(tensors, path, model_type, layout), path


def weights_file(directory: str) -> str:
    """The file a checkpoint directory keeps its weights in, by the formats' order of preference."""
    candidates = ["model.safetensors", "model.safetensors.index.json", "pytorch_model.bin"]
    found = [name for name in candidates if os.path.exists(os.path.join(directory, name))]
    if not found:
        raise BertforgeError(f"{directory}: no weights file (expected one of {', '.join(candidates)})")
    return os.path.join(directory, found[0])


def weight_names(directory: str) -> set[str]:
    """The names of a checkpoint directory's tensors as saved (a head's are `head_keys`'), read from
    the safetensors headers (a shard index's map) without reading any tensor; an old pickled file
    is read whole."""
    path = weights_file(directory)
    if path.endswith(".safetensors"):
        names = set(tensor_names(path))
    elif path.endswith(".index.json"):
        names = set(_weight_map(path))
    else:
        names = set(read_pickled(path))
    extra = os.path.join(directory, EXTRA_FILE)
    return names | set(tensor_names(extra)) if os.path.exists(extra) else names


def shard_files(index: str) -> list[str]:
    """The shards a `model.safetensors.index.json` names, each inside its folder (a name with `../`
    or an absolute one is refused before anything is read)."""
    folder = os.path.dirname(index)
    shards = [inside(folder, shard, index) for shard in _weight_map(index).values()]
    return sorted(set(shards))


def _weight_map(index: str) -> dict:
    content = _read_json(index)
    weight_map = content.get("weight_map") if isinstance(content, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise BertforgeError(f"{index}: no weight_map (a shard index maps each weight to its file)")
    return weight_map


def canonical_names(tensors: dict[str, torch.Tensor], source: str, model_type: str = "bert",
                    layout: HFLayout | None = None) -> dict:
    """Strip the family's prefix, rename legacy gamma/beta, drop derived keys, check tied decoders.
    `layout`: the family's, when the caller has it."""
    out, layout = {}, layout or layout_of(model_type)
    for key, tensor in tensors.items():
        key = key.removeprefix(layout.prefix(model_type) + ".")
        for old, new in LEGACY_SUFFIXES.items():
            if key.endswith(old) and "LayerNorm" in key:
                key = key[: -len(old)] + new
        if key not in DERIVED_KEYS and not key.endswith(DERIVED_SUFFIXES):
            out[key] = tensor
    word_key = layout.word_embeddings(model_type)
    for name in TIED_DECODERS + layout.tied:
        decoder = out.pop(name, None)
        if decoder is not None and word_key not in out:
            # `transformers` may keep a tied matrix under the head's name alone (GPT's double-heads model)
            out[word_key] = decoder
        elif decoder is not None and not torch.equal(decoder, out[word_key]):
            raise BertforgeError(f"{source}: the MLM decoder {name} is not tied to the word embeddings; "
                                 "untied decoders are not supported")
    return out


def load_pretrained(directory: str, cls=None, device: str | torch.device = "cpu", new_heads: bool = False,
                    config=None, family: Family | None = None, **options):
    """Load any HF BERT, ALBERT, RoBERTa, ELECTRA, RoFormer or ModernBERT directory (the encoder
    classes, pretraining and task models) as `cls`.

    `cls` is None for the encoder alone (`Bert` or `ModernBert`, as the config says: heads in the
    checkpoint are skipped) or a composite with
    the encoder at `.backbone` and heads named as in `head_keys` (e.g. `BertPretraining`), whose heads
    must be in the checkpoint unless `new_heads` allows fresh ones. A checkpoint without a pooler
    (HF's `BertForMaskedLM`, ELECTRA, token-level task models) gets a freshly initialised one,
    with a warning. `options` go to `cls` (e.g. `sentence=None`). `config`, `family`: the directory's
    config and its family's record, when the caller has them.
    """
    config = config or read_config(directory)
    family = family or family_of(config)
    model = family.build_encoder(config, **options) if cls is None else cls(config, **options)
    for sub, part in parts(model).items():
        # a part in a sub-directory (ELECTRA's generator) has a config of its own there
        load_into(part, _join(directory, sub), new_heads, None if sub else config, None if sub else family)
    return model.to(device)


def load_into(model: nn.Module, directory: str, new_heads: bool = False, config: HFConfig | None = None,
              family: Family | None = None, heads: bool = True) -> None:
    """Copy the weights of an HF checkpoint directory into an existing `model` (see `load_pretrained`).
    With `heads=False` only the encoder is read: a new task starts with a fresh head even when the
    checkpoint has one (of another task, or with other labels). `config`, `family`: the directory's
    config and its family's record, when the caller has them."""
    config = config or read_config(directory)
    family = family or family_of(config)
    layout = layout_of(config, family)  # asked of the family once for the whole read
    tensors, source = read_weights(directory, config.model_type, layout)
    _check_tokenizer(directory, config)
    body, architecture = encoder_of(model)
    state, used = encoder_from_hf(tensors, config, architecture, body.pooler is not None, family)
    allowed_missing = {f"pooler.{layer}.{kind}" for layer in ("dense", "norm") for kind in ("weight", "bias")}
    fresh = set()  # new task heads: expected to be missing, so no warning
    if body is not model:
        state = {"backbone." + k: v for k, v in state.items()}
        allowed_missing = {"backbone." + k for k in allowed_missing}
        for name, pairs in layout.head_keys(config.model_type, architecture).items():
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
    known = KNOWN_HEAD_PREFIXES + layout.known_heads(config.model_type)
    unexpected = [k for k in tensors if k not in used and not k.startswith(known)]
    # Other parts of the model (ELECTRA's generator) come from their own directories.
    elsewhere = {k for k in model.state_dict() for sub in parts(model) if sub and k.startswith(sub + ".")}
    load_state(model, state, source, unexpected, allowed_missing | fresh | elsewhere, quiet=fresh | elsewhere)


def _check_tokenizer(directory: str, config: HFConfig) -> None:
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
    check_vocab_fits(tokenizer, encoder_of(model)[0].config)
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


def check_vocab_fits(tokenizer, config: HFConfig) -> None:
    if tokenizer is not None and tokenizer.vocab_size > config.vocab_size:
        raise BertforgeError(f"the tokenizer has {tokenizer.vocab_size} tokens but the model only "
                             f"vocab_size={config.vocab_size}")


def write_pretrained(directory: str, tensors: dict[str, torch.Tensor], config: HFConfig, tokenizer=None) -> None:
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


def to_hf(model: nn.Module) -> tuple[dict[str, torch.Tensor], HFConfig]:
    """The HF-named tensors and config of `model` (see `save_pretrained`)."""
    body, architecture = encoder_of(model)
    if body is model:
        architecture, prefix = "BertModel", ""
    else:
        prefix = layout_of(body.config).prefix(body.config.model_type) + "."
    model_type = body.config.model_type
    config = dataclasses.replace(body.config, architectures=[hf_class(model_type, architecture)])
    outside = layout_of(config).outside
    tensors = {(k if k.startswith(outside) else prefix + k): v  # heads: not under HF's prefix
               for k, v in encoder_to_hf(body.state_dict(), config, architecture).items()}
    tensors.update(layout_of(config).derived(config, prefix))  # what HF stores that the config implies
    if prefix:
        for name, pairs in head_keys(model_type, architecture).items():
            head = getattr(model, name, None)
            if head is not None:
                head_state = head.state_dict()
                tensors.update({theirs: head_state[ours] for ours, theirs in pairs if ours in head_state})
    return tensors, config


def parts(model: nn.Module) -> dict[str, nn.Module]:
    """The HF models a training objective is saved as, by sub-directory ("" = the directory itself),
    each sub-directory named after the attribute holding that part. One for most; ELECTRA's
    discriminator and, in `generator/`, its generator."""
    return model.parts() if hasattr(model, "parts") else {"": model}
