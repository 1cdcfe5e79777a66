"""Model configuration: dataclasses whose field names are the keys of a Hugging Face `config.json`.

`BertConfig` serves the five encoder families that share BERT's Transformer layer: BERT, ALBERT,
RoBERTa, ELECTRA and RoFormer (BERT with rotary positions); they differ in the few fields below
`model_type`. `ModernBertConfig` is ModernBERT's (Warner et al., 2024) and `GPTConfig` GPT-1's
(Radford et al., 2018), whose keys are their own. `load_config` reads any of them, by the file's
`model_type`.

Torch-free on purpose, so that configs can be read, validated and printed without loading a model.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field

from .errors import BertforgeError


def bertforge_version() -> str:
    """The installed package's version (importlib.metadata: no torch import)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("bertforge")
    except PackageNotFoundError:
        return "unknown"


# Activations the encoder implements; the names are those HF writes in `hidden_act`.
ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "silu", "swish")

# Keys HF writes into every config.json that say nothing about the model's maths.
_HF_BOOKKEEPING = {
    "_name_or_path", "transformers_version", "bertforge_version", "gradient_checkpointing", "use_cache",
    "torch_dtype", "dtype", "output_attentions", "output_hidden_states", "return_dict",
    "is_decoder", "add_cross_attention", "tie_word_embeddings", "chunk_size_feed_forward",
    "bos_token_id", "eos_token_id", "sep_token_id", "tokenizer_class", "task_specific_params",
    "is_encoder_decoder",
    # Settings of HF's own task heads (ALBERT's classifier dropout, ELECTRA's multiple-choice
    # summary); our heads take theirs from `classifier_dropout` and the family.
    "classifier_dropout_prob", "summary_type", "summary_use_proj", "summary_activation",
    "summary_last_dropout", "summary_first_dropout",
    # Written by HF's AlbertConfig for every ALBERT, unused by its model.
    "down_scale_factor", "gap_size", "net_structure_type", "num_memory_blocks",
}

# The encoder families, by HF `model_type`. ALBERT and ELECTRA may have word embeddings narrower
# than the hidden size (`embedding_size`), projected up; ALBERT shares one layer's weights across
# layers (`num_hidden_groups` sets of weights); RoBERTa numbers positions from pad_token_id + 1;
# RoFormer (Su et al., 2021) has no position table and rotates queries and keys by position instead.
MODEL_TYPES = ("bert", "albert", "roberta", "electra", "roformer")


class HFConfig:
    """What every family's config does alike: check the task keys HF writes, and write itself as HF does."""

    def _check_ranges(self, counts: tuple = (), probabilities: tuple = (), positives: tuple = ()) -> None:
        """The fields named in `counts` are positive integers, in `probabilities` dropout rates in
        [0, 1), in `positives` positive numbers."""
        for name in counts:
            value = getattr(self, name)
            _check(isinstance(value, int) and not isinstance(value, bool) and value > 0, name, "a positive integer",
                   value)
        for name in probabilities:
            value = getattr(self, name)
            _check(_is_number(value) and 0.0 <= value < 1.0, name, "a probability in [0, 1)", value)
        for name in positives:
            value = getattr(self, name)
            _check(_is_number(value) and value > 0, name, "a positive number", value)

    def _check_heads(self) -> None:
        _check(isinstance(self.architectures, list) and all(isinstance(a, str) for a in self.architectures),
               "architectures", "a list of class names", self.architectures)
        if self.id2label is not None:
            # JSON object keys are strings: "0" -> 0.
            _check(isinstance(self.id2label, dict) and all(str(k).isdigit() for k in self.id2label),
                   "id2label", "a mapping from label ids to names", self.id2label)
            self.id2label = {int(k): str(v) for k, v in self.id2label.items()}
            _check(sorted(self.id2label) == list(range(len(self.id2label))), "id2label",
                   "ids 0..n-1", sorted(self.id2label))
            self.label2id = {v: k for k, v in self.id2label.items()}

    @property
    def num_labels(self) -> int:
        return len(self.id2label) if self.id2label else 2

    def to_dict(self) -> dict:
        """The config as HF writes it; optional task fields appear only when set."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    def hf_dict(self) -> dict:
        """What `config.json` holds: `to_dict`, unless a family spells a key otherwise in HF."""
        return self.to_dict()

    def save(self, path: str) -> None:
        with open(path, "w", encoding="utf-8") as f:
            # stamped with what wrote it, as transformers stamps `transformers_version`
            json.dump({**self.hf_dict(), "bertforge_version": bertforge_version()}, f, indent=2)
            f.write("\n")


@dataclass
class BertConfig(HFConfig):
    """The shape and regularisation of a BERT-family encoder, spelled as HF's `BertConfig`
    (and `AlbertConfig`, `RobertaConfig`, `ElectraConfig` for the fields they add).

    Defaults are those of BERT-base (Devlin et al., 2019). `architectures` records which HF class
    a saved checkpoint corresponds to (e.g. `BertForPreTraining`); it does not change the encoder.
    """

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    model_type: str = "bert"
    embedding_size: int | None = None  # ALBERT and ELECTRA; None: the hidden size
    num_hidden_groups: int | None = None  # ALBERT: distinct sets of layer weights (1: all shared)
    inner_group_num: int | None = None  # ALBERT: layers per group; only 1 is supported, as released
    rotary_value: bool | None = None  # RoFormer: rotate values too; only False, as released
    architectures: list[str] = field(default_factory=lambda: ["BertModel"])
    # Fine-tuned models: HF's own keys for the head, so `AutoModelFor...` rebuilds it ...
    id2label: dict[int, str] | None = None
    label2id: dict[str, int] | None = None
    problem_type: str | None = None  # "single_label_classification" or "regression"
    classifier_dropout: float | None = None  # None: hidden_dropout_prob, as HF
    finetuning_task: str | None = None  # e.g. "sst2", "ner", "qa"
    # ... and ours: how the task reads its input (columns, label scheme, lengths), for `predict`.
    bertforge_task: dict | None = None

    def __post_init__(self) -> None:
        self._check_ranges(counts=("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                                   "intermediate_size", "max_position_embeddings", "type_vocab_size"),
                           probabilities=("hidden_dropout_prob", "attention_probs_dropout_prob"),
                           positives=("initializer_range", "layer_norm_eps"))
        _check(self.hidden_act in ACTIVATIONS, "hidden_act", f"one of {', '.join(ACTIVATIONS)}",
               self.hidden_act)
        _check(self.hidden_size % self.num_attention_heads == 0, "num_attention_heads",
               f"a divisor of hidden_size={self.hidden_size}", self.num_attention_heads)
        _check(isinstance(self.pad_token_id, int) and 0 <= self.pad_token_id < self.vocab_size,
               "pad_token_id", f"an id below vocab_size={self.vocab_size}", self.pad_token_id)
        _check(self.model_type in MODEL_TYPES, "model_type", f"one of {', '.join(MODEL_TYPES)}", self.model_type)
        if self.model_type == "albert":
            self.embedding_size = self.embedding_size or 128
            self.num_hidden_groups = self.num_hidden_groups or 1
            self.inner_group_num = self.inner_group_num or 1
            _check(self.inner_group_num == 1, "inner_group_num", "1 (one layer per group)", self.inner_group_num)
            _check(isinstance(self.num_hidden_groups, int) and 1 <= self.num_hidden_groups <= self.num_hidden_layers,
                   "num_hidden_groups", f"an integer in [1, num_hidden_layers={self.num_hidden_layers}]",
                   self.num_hidden_groups)
        else:
            for name in ("num_hidden_groups", "inner_group_num"):
                _check(getattr(self, name) is None, name, "unset outside ALBERT", getattr(self, name))
        if self.model_type == "roformer":
            self.rotary_value = bool(self.rotary_value)
            _check(not self.rotary_value, "rotary_value", "false (rotary queries and keys only)", self.rotary_value)
            _check(self.head_size % 2 == 0, "num_attention_heads", "a count giving an even head size (rotary pairs)",
                   self.num_attention_heads)
        else:
            _check(self.rotary_value is None, "rotary_value", "unset outside RoFormer", self.rotary_value)
        if self.model_type in ("electra", "roformer"):
            self.embedding_size = self.embedding_size or self.hidden_size
        elif self.model_type != "albert":
            _check(self.embedding_size in (None, self.hidden_size), "embedding_size",
                   "the hidden size (only ALBERT, ELECTRA and RoFormer factorise embeddings)", self.embedding_size)
            self.embedding_size = None
        if self.embedding_size is not None:
            _check(isinstance(self.embedding_size, int) and self.embedding_size > 0, "embedding_size",
                   "a positive integer", self.embedding_size)
        if self.model_type == "roberta":
            # Positions run from pad_token_id + 1, so the table needs that many more rows.
            _check(self.max_position_embeddings > self.pad_token_id + 1, "max_position_embeddings",
                   f"more than pad_token_id + 1 = {self.pad_token_id + 1} (RoBERTa's position offset)",
                   self.max_position_embeddings)
        self._check_heads()
        if self.classifier_dropout is not None:
            _check(_is_number(self.classifier_dropout) and 0 <= self.classifier_dropout < 1,
                   "classifier_dropout", "a probability in [0, 1)", self.classifier_dropout)

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def word_size(self) -> int:
        """Width of the embedding tables (and of the MLM decoder): `embedding_size` or the hidden size."""
        return self.embedding_size or self.hidden_size

    @property
    def max_length(self) -> int:
        """The longest input the position table allows (RoBERTa's offset costs pad_token_id + 1 rows)."""
        if self.model_type == "roberta":
            return self.max_position_embeddings - self.pad_token_id - 1
        return self.max_position_embeddings

    @classmethod
    def from_dict(cls, data: dict, source: str = "config") -> "BertConfig":
        """Build a config from a dict, ignoring HF's bookkeeping keys; unknown keys are errors.

        `source` names where the dict came from, so that every message points at the file.
        """
        try:
            return cls._from_dict(data)
        except BertforgeError as e:
            raise BertforgeError(f"{source}: {e}") from None

    @classmethod
    def _from_dict(cls, data: dict) -> "BertConfig":
        if not isinstance(data, dict):
            raise BertforgeError(f"expected a JSON object, found {type(data).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        # Absolute positions are the only kind BERT has; a relative-position checkpoint would load
        # without complaint and compute something else, so it is refused by name.
        kind = data.get("position_embedding_type", "absolute")
        if kind != "absolute":
            raise BertforgeError(f"position_embedding_type={kind!r} is not supported (only 'absolute')")
        unknown = sorted(set(data) - names - _HF_BOOKKEEPING - {"position_embedding_type"})
        if unknown:
            raise BertforgeError(f"unknown key(s) {', '.join(unknown)}")
        required = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                    "intermediate_size")
        missing = [k for k in required if k not in data]
        if missing:
            raise BertforgeError(f"missing required key(s) {', '.join(missing)}")
        return cls(**{k: v for k, v in data.items() if k in names})


    @classmethod
    def load(cls, path: str) -> "BertConfig":
        """Read a `config.json` (a file, or a directory holding one)."""
        if os.path.isdir(path):
            path = os.path.join(path, "config.json")
        return cls.from_dict(_read_json(path), source=path)


# Google's released BERT sizes (Turc et al., 2019 for the small ones; Devlin et al., 2019 for base
# and large). The feed-forward width is always 4x the hidden size and heads are 64 wide.
PRESETS: dict[str, dict] = {
    "bert-tiny": {"num_hidden_layers": 2, "hidden_size": 128, "num_attention_heads": 2},
    "bert-mini": {"num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4},
    "bert-small": {"num_hidden_layers": 4, "hidden_size": 512, "num_attention_heads": 8},
    "bert-medium": {"num_hidden_layers": 8, "hidden_size": 512, "num_attention_heads": 8},
    "bert-base": {"num_hidden_layers": 12, "hidden_size": 768, "num_attention_heads": 12},
    "bert-large": {"num_hidden_layers": 24, "hidden_size": 1024, "num_attention_heads": 16},
}


def preset(name: str, **overrides) -> BertConfig:
    """The config of a named size (`bert-tiny` ... `bert-large`), with any field overridden."""
    if name not in PRESETS:
        raise BertforgeError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    values = dict(PRESETS[name])
    values["intermediate_size"] = 4 * values["hidden_size"]
    values.update(overrides)
    return BertConfig(**values)


@dataclass
class ModernBertConfig(HFConfig):
    """ModernBERT (Warner et al., 2024), spelled as HF's `ModernBertConfig`: a pre-LayerNorm encoder
    with rotary positions, GeGLU feed-forward layers, no biases and no token types, whose layers
    alternate between global attention (every `global_attn_every_n_layers`-th, from the first) and
    attention to the `local_attention // 2` tokens on either side.

    Defaults are ModernBERT-base's, apart from the token ids, which follow our WordPiece vocabulary
    (HF's defaults are those of ModernBERT's 50k BPE). The properties at the end give the few
    BERT-named values that code shared by every family reads.
    """

    vocab_size: int = 50368
    hidden_size: int = 768
    intermediate_size: int = 1152  # the GeGLU's width: its input projection is twice this
    num_hidden_layers: int = 22
    num_attention_heads: int = 12
    hidden_activation: str = "gelu"
    max_position_embeddings: int = 8192
    initializer_range: float = 0.02
    initializer_cutoff_factor: float = 2.0
    norm_eps: float = 1e-5
    norm_bias: bool = False
    pad_token_id: int = 0
    cls_token_id: int | None = None
    sep_token_id: int | None = None
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    attention_bias: bool = False
    attention_dropout: float = 0.0
    embedding_dropout: float = 0.0
    mlp_bias: bool = False
    mlp_dropout: float = 0.0
    # "full_attention" or "sliding_attention" per layer; None: from `global_attn_every_n_layers`.
    layer_types: list[str] | None = None
    local_attention: int = 128
    # Rotary bases: {"full_attention": {"rope_type": "default", "rope_theta": 160000.0},
    # "sliding_attention": {... 10000.0}}; None: from the two thetas below.
    rope_parameters: dict | None = None
    global_attn_every_n_layers: int | None = None  # older configs' way of giving layer_types
    global_rope_theta: float | None = None  # older configs' rope_parameters["full_attention"]
    local_rope_theta: float | None = None  # and ["sliding_attention"]
    decoder_bias: bool = True
    classifier_pooling: str = "cls"  # "cls" or "mean"
    classifier_dropout: float = 0.0
    classifier_bias: bool = False
    classifier_activation: str = "gelu"
    tie_word_embeddings: bool = True
    model_type: str = "modernbert"
    architectures: list[str] = field(default_factory=lambda: ["ModernBertModel"])
    id2label: dict[int, str] | None = None
    label2id: dict[str, int] | None = None
    problem_type: str | None = None
    finetuning_task: str | None = None
    bertforge_task: dict | None = None

    def __post_init__(self) -> None:
        self._check_ranges(counts=("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                                   "intermediate_size", "max_position_embeddings", "local_attention"),
                           probabilities=("attention_dropout", "embedding_dropout", "mlp_dropout",
                                          "classifier_dropout"),
                           positives=("initializer_range", "initializer_cutoff_factor", "norm_eps"))
        for name in ("hidden_activation", "classifier_activation"):
            _check(getattr(self, name) in ACTIVATIONS, name, f"one of {', '.join(ACTIVATIONS)}", getattr(self, name))
        for name in ("norm_bias", "attention_bias", "mlp_bias", "classifier_bias"):
            _check(isinstance(getattr(self, name), bool), name, "true or false", getattr(self, name))
        _check(self.model_type == "modernbert", "model_type", "'modernbert'", self.model_type)
        _check(self.hidden_size % self.num_attention_heads == 0 and self.head_size % 2 == 0, "num_attention_heads",
               f"a divisor of hidden_size={self.hidden_size} giving an even head size (rotary pairs)",
               self.num_attention_heads)
        for name in ("pad_token_id", "cls_token_id", "sep_token_id", "bos_token_id", "eos_token_id"):
            value = getattr(self, name)
            _check(value is None and name != "pad_token_id" or isinstance(value, int) and 0 <= value < self.vocab_size,
                   name, f"an id below vocab_size={self.vocab_size}", value)
        _check(self.classifier_pooling in ("cls", "mean"), "classifier_pooling", "'cls' or 'mean'",
               self.classifier_pooling)
        _check(self.decoder_bias is True, "decoder_bias", "true (as released)", self.decoder_bias)
        _check(self.tie_word_embeddings is True, "tie_word_embeddings", "true (the decoder is the embeddings)",
               self.tie_word_embeddings)
        every = self.global_attn_every_n_layers or 3
        _check(isinstance(every, int) and every > 0, "global_attn_every_n_layers", "a positive integer", every)
        if self.layer_types is None:
            self.layer_types = ["full_attention" if i % every == 0 else "sliding_attention"
                                for i in range(self.num_hidden_layers)]
        self.global_attn_every_n_layers = None  # said once, by layer_types
        _check(isinstance(self.layer_types, list) and len(self.layer_types) == self.num_hidden_layers
               and set(self.layer_types) <= {"full_attention", "sliding_attention"}, "layer_types",
               f"{self.num_hidden_layers} of 'full_attention' / 'sliding_attention'", self.layer_types)
        rope = self.rope_parameters or {}
        _check(isinstance(rope, dict), "rope_parameters", "an object per layer type", rope)
        thetas = {"full_attention": self.global_rope_theta or 160_000.0,
                  "sliding_attention": self.local_rope_theta or 10_000.0}
        for kind, theta in thetas.items():
            given = dict(rope.get(kind) or {})
            given.setdefault("rope_type", "default")
            given.setdefault("rope_theta", theta)
            _check(given["rope_type"] == "default", "rope_parameters", "the default rope type (no scaling)",
                   given["rope_type"])
            _check(_is_number(given["rope_theta"]) and given["rope_theta"] > 0, "rope_parameters",
                   "a positive rope_theta", given["rope_theta"])
            thetas[kind] = {"rope_theta": float(given["rope_theta"]), "rope_type": "default"}
        self.rope_parameters = thetas
        self.global_rope_theta = self.local_rope_theta = None
        self._check_heads()

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def max_length(self) -> int:
        return self.max_position_embeddings

    # BERT's names for what code shared by every family reads (the MLM head, task heads, ELECTRA's
    # checks, the tokenizer check): ModernBERT has one token type and no factorised embeddings.
    word_size = property(lambda self: self.hidden_size)
    embedding_size = None
    type_vocab_size = 1
    num_hidden_groups = None
    hidden_act = property(lambda self: self.hidden_activation)
    layer_norm_eps = property(lambda self: self.norm_eps)
    hidden_dropout_prob = property(lambda self: self.mlp_dropout)



@dataclass
class GPTConfig(HFConfig):
    """GPT-1 (Radford et al., 2018), spelled as HF's `OpenAIGPTConfig` (`model_type` "openai-gpt"):
    a left-to-right Transformer decoder with learned positions and BERT's post-LayerNorm block.

    `model_type` "gpt2" is the same decoder with GPT-2's layer order (Radford et al., 2019): the
    LayerNorm before each sublayer and one after the last block (`pre_norm`), which leaves the
    unigram plateau of a CPU's few hundred steps sooner than GPT-1's (README: "GPT-1's layer order").
    It is saved as HF's `GPT2Config`, whose only other difference is a key's name
    (`activation_function`).

    Defaults are GPT-1's: 12 layers of 768, 12 heads, 512 positions, its 40,478-piece vocabulary.
    `summary_*` describe HF's multiple-choice head (`OpenAIGPTDoubleHeadsModel`). The properties at
    the end give the BERT-named values that code shared by every family reads.
    """

    vocab_size: int = 40478
    n_positions: int = 512
    n_embd: int = 768
    n_layer: int = 12
    n_head: int = 12
    afn: str = "gelu"  # HF's "gelu" for GPT is the tanh approximation (OpenAI's code)
    resid_pdrop: float = 0.1
    embd_pdrop: float = 0.1
    attn_pdrop: float = 0.1
    layer_norm_epsilon: float = 1e-5
    initializer_range: float = 0.02
    summary_type: str = "cls_index"
    summary_use_proj: bool = True
    summary_activation: str | None = None
    summary_proj_to_labels: bool = True
    summary_first_dropout: float = 0.1
    pad_token_id: int | None = None
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    tie_word_embeddings: bool = True
    model_type: str = "openai-gpt"
    architectures: list[str] = field(default_factory=lambda: ["OpenAIGPTModel"])
    id2label: dict[int, str] | None = None
    label2id: dict[str, int] | None = None
    problem_type: str | None = None
    finetuning_task: str | None = None
    bertforge_task: dict | None = None

    def __post_init__(self) -> None:
        self._check_ranges(counts=("vocab_size", "n_positions", "n_embd", "n_layer", "n_head"),
                           probabilities=("resid_pdrop", "embd_pdrop", "attn_pdrop", "summary_first_dropout"),
                           positives=("layer_norm_epsilon", "initializer_range"))
        _check(self.afn in ("gelu", "relu", "silu", "swish"), "afn", "one of gelu, relu, silu, swish", self.afn)
        _check(self.n_embd % self.n_head == 0, "n_head", f"a divisor of n_embd={self.n_embd}", self.n_head)
        _check(self.model_type in GPT_TYPES, "model_type", "'openai-gpt' or 'gpt2'", self.model_type)
        _check(self.tie_word_embeddings is True, "tie_word_embeddings", "true (the LM head is the embeddings)",
               self.tie_word_embeddings)
        for name in ("pad_token_id", "bos_token_id", "eos_token_id"):
            value = getattr(self, name)
            _check(value is None or isinstance(value, int) and 0 <= value < self.vocab_size, name,
                   f"an id below vocab_size={self.vocab_size}", value)
        self._check_heads()

    def hf_dict(self) -> dict:
        values = self.to_dict()
        if self.pre_norm:  # GPT2Config's spelling; its token ids default to GPT-2's vocabulary's, so always written
            values["activation_function"] = GPT2_ACTIVATIONS_OURS[values.pop("afn")]
            values.update({name: getattr(self, name) for name in ("bos_token_id", "eos_token_id", "pad_token_id")})
        return values

    pre_norm = property(lambda self: self.model_type == "gpt2")
    # BERT's names for the same values, read by code shared by every family.
    hidden_size = property(lambda self: self.n_embd)
    num_hidden_layers = property(lambda self: self.n_layer)
    num_attention_heads = property(lambda self: self.n_head)
    max_position_embeddings = property(lambda self: self.n_positions)
    max_length = property(lambda self: self.n_positions)
    intermediate_size = property(lambda self: 4 * self.n_embd)  # fixed in GPT-1
    head_size = property(lambda self: self.n_embd // self.n_head)
    word_size = property(lambda self: self.n_embd)
    layer_norm_eps = property(lambda self: self.layer_norm_epsilon)
    hidden_dropout_prob = property(lambda self: self.resid_pdrop)
    # OpenAI's "gelu" is the tanh approximation, which our activations call gelu_new
    hidden_act = property(lambda self: "gelu_new" if self.afn == "gelu" else self.afn)
    classifier_dropout = property(lambda self: self.summary_first_dropout)
    embedding_size = None
    type_vocab_size = 1
    num_hidden_groups = None



GPT_TYPES = ("openai-gpt", "gpt2")
# GPT2Config's `activation_function` -> our `afn` (OpenAI's names: its "gelu" is the tanh approximation)
GPT2_ACTIVATIONS = {"gelu_new": "gelu", "gelu_pytorch_tanh": "gelu", "relu": "relu", "silu": "silu", "swish": "swish"}
GPT2_ACTIVATIONS_OURS = {"gelu": "gelu_new", "relu": "relu", "silu": "silu", "swish": "swish"}


def gpt2_values(data: dict) -> dict:
    """A GPT2Config's keys as GPTConfig's, refusing the GPT-2 options our decoder does not have."""
    data = dict(data)
    act = data.pop("activation_function", "gelu_new")
    if act not in GPT2_ACTIVATIONS:
        raise BertforgeError(f"activation_function {act!r} is not supported (one of {', '.join(GPT2_ACTIVATIONS)})")
    data["afn"] = GPT2_ACTIVATIONS[act]
    inner = data.pop("n_inner", None)
    if inner is not None and inner != 4 * data.get("n_embd", 768):
        raise BertforgeError(f"n_inner {inner} is not supported: the feed-forward width is 4 x n_embd")
    for name, supported in (("scale_attn_weights", True), ("scale_attn_by_inverse_layer_idx", False),
                            ("add_cross_attention", False)):
        if data.pop(name, supported) != supported:
            raise BertforgeError(f"{name} {not supported} is not supported")
    data.pop("reorder_and_upcast_attn", None)  # a precision setting: the same model
    return data


def gpt_preset(name: str, **overrides) -> GPTConfig:
    """A GPT-1 of a BERT preset's depth, width and heads (`gpt-1`: GPT-1's own 12 x 768)."""
    sizes = {**PRESETS, "gpt-1": PRESETS["bert-base"]}
    if name not in sizes:
        raise BertforgeError(f"unknown preset {name!r}; choose one of {', '.join(sizes)}")
    size = sizes[name]
    values = {"n_layer": size["num_hidden_layers"], "n_embd": size["hidden_size"], "n_head": size["num_attention_heads"]}
    values.update(overrides)
    return GPTConfig(**values)


@dataclass
class AWDLSTMConfig(HFConfig):
    """Merity et al.'s AWD-LSTM language model (2018), the one ULMFiT (Howard & Ruder, 2018)
    fine-tunes: word embeddings of `emb_sz`, `n_layers` LSTMs of `n_hid` (the last one of `emb_sz`,
    so that the decoder can share the embedding matrix), and its five dropouts. No `transformers`
    class exists for it: bertforge writes its own `config.json` (model_type "awd-lstm") and weights
    under its own names.

    Defaults are ULMFiT's (fastai's `awd_lstm_lm_config`): 400 / 1152 / 3 layers; the dropouts are
    fastai's, which its `drop_mult` scales (`dropout_scale` here). `bidirectional=False` always: a
    backward model is a forward model trained on reversed text (`backwards`).
    """

    vocab_size: int = 60000
    emb_sz: int = 400
    n_hid: int = 1152
    n_layers: int = 3
    output_p: float = 0.1  # on the last LSTM's output, before the decoder
    hidden_p: float = 0.15  # between LSTM layers (locked: one mask per sequence)
    input_p: float = 0.25  # on the embedded input (locked)
    embed_p: float = 0.02  # whole words dropped from the embedding matrix
    weight_p: float = 0.2  # DropConnect on the hidden-to-hidden weights
    tie_weights: bool = True
    out_bias: bool = True
    backwards: bool = False  # trained on reversed documents (ULMFiT's backward model)
    pad_token_id: int = 1
    classifier_dropout: float | None = None  # a classifier's first dropout (None: output_p)
    model_type: str = "awd-lstm"
    architectures: list[str] = field(default_factory=lambda: ["AWDLSTMLanguageModel"])
    id2label: dict[int, str] | None = None
    label2id: dict[str, int] | None = None
    problem_type: str | None = None
    finetuning_task: str | None = None
    bertforge_task: dict | None = None

    def __post_init__(self) -> None:
        self._check_ranges(counts=("vocab_size", "emb_sz", "n_hid", "n_layers"),
                           probabilities=("output_p", "hidden_p", "input_p", "embed_p", "weight_p"))
        _check(self.model_type == "awd-lstm", "model_type", "'awd-lstm'", self.model_type)
        _check(isinstance(self.pad_token_id, int) and 0 <= self.pad_token_id < self.vocab_size, "pad_token_id",
               f"an id below vocab_size={self.vocab_size}", self.pad_token_id)
        self._check_heads()

    # The names code shared by every family reads.
    hidden_size = property(lambda self: self.emb_sz)  # what the last layer gives a task head
    num_hidden_layers = property(lambda self: self.n_layers)


# Sizes of AWD-LSTM: ULMFiT's, and smaller ones a CPU trains in minutes (the same 3 layers, the
# last of the embedding width so that the decoder is tied).
AWD_LSTM_PRESETS = {
    "awd-lstm-tiny": {"emb_sz": 64, "n_hid": 128},
    "awd-lstm-small": {"emb_sz": 200, "n_hid": 576},
    "awd-lstm-ulmfit": {"emb_sz": 400, "n_hid": 1152},
}


def awd_lstm_preset(name: str, **overrides) -> AWDLSTMConfig:
    if name not in AWD_LSTM_PRESETS:
        raise BertforgeError(f"unknown preset {name!r} for AWD-LSTM; choose one of {', '.join(AWD_LSTM_PRESETS)}")
    return AWDLSTMConfig(**{**AWD_LSTM_PRESETS[name], **overrides})


@dataclass
class ELMoConfig(HFConfig):
    """ELMo's bidirectional language model (Peters et al., 2018), in the names of AllenNLP's
    `options.json` where it has one: a character encoder (each word as up to
    `max_characters_per_token` UTF-8 bytes, `char_embedding_dim`-wide character embeddings,
    convolutions of the widths and counts in `filters`, `n_highway` highway layers, a projection to
    `projection_dim`), then `n_layers` LSTMs per direction of `cell_size` cells projected back to
    `projection_dim`, cells and projections clipped to +-`cell_clip`, +-`proj_clip`, with a residual
    connection from the second layer up. `vocab_size` words in the softmax the two directions share.

    Defaults are the paper's Original model (93.6M parameters without the softmax); see
    `ELMO_PRESETS` for its Small one and sizes a CPU trains in minutes.
    """

    vocab_size: int = 60000
    max_characters_per_token: int = 50
    char_embedding_dim: int = 16
    filters: list = field(default_factory=lambda: [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]])
    n_highway: int = 2
    activation: str = "relu"
    projection_dim: int = 512
    cell_size: int = 4096
    n_layers: int = 2
    cell_clip: float = 3.0
    proj_clip: float = 3.0
    dropout: float = 0.1
    pad_token_id: int = 1
    model_type: str = "elmo"
    architectures: list[str] = field(default_factory=lambda: ["ELMoLanguageModel"])
    id2label: dict[int, str] | None = None
    label2id: dict[str, int] | None = None
    problem_type: str | None = None
    finetuning_task: str | None = None
    bertforge_task: dict | None = None

    def __post_init__(self) -> None:
        self._check_ranges(counts=("vocab_size", "max_characters_per_token", "char_embedding_dim", "projection_dim",
                                   "cell_size", "n_layers"), probabilities=("dropout",))
        _check(isinstance(self.n_highway, int) and self.n_highway >= 0, "n_highway", "a count", self.n_highway)
        _check(self.max_characters_per_token >= 3, "max_characters_per_token", "at least 3 (begin, a byte, end)",
               self.max_characters_per_token)
        _check(isinstance(self.filters, list) and self.filters and all(
            isinstance(f, list) and len(f) == 2 and all(isinstance(v, int) and v > 0 for v in f) for f in self.filters)
            and max(w for w, _ in self.filters) <= self.max_characters_per_token, "filters",
            "a list of [width, count] pairs, widths at most max_characters_per_token", self.filters)
        _check(self.activation in ("relu", "tanh"), "activation", "relu or tanh", self.activation)
        for name in ("cell_clip", "proj_clip"):
            value = getattr(self, name)
            _check(value is None or _is_number(value) and value > 0, name, "a positive number or null", value)
        _check(self.model_type == "elmo", "model_type", "'elmo'", self.model_type)
        self._check_heads()

    # The names code shared by every family reads: ELMo's representations are [forward; backward].
    hidden_size = property(lambda self: 2 * self.projection_dim)
    num_hidden_layers = property(lambda self: self.n_layers)


# ELMo's sizes: the paper's Original (2 x 4096 cells, 512 projections, 2048 filters, 2 highways) and
# Small (2 x 1024, 128, 2048 filters, 1 highway: AllenNLP's 13.6M one), and sizes a CPU trains in minutes.
_ELMO_FILTERS = [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]]
ELMO_PRESETS = {
    "elmo-tiny": {"filters": [[1, 8], [2, 8], [3, 16], [4, 16]], "n_highway": 1, "projection_dim": 32,
                  "cell_size": 64, "char_embedding_dim": 8},
    "elmo-cpu": {"filters": [[1, 32], [2, 32], [3, 64], [4, 128], [5, 128], [6, 128], [7, 128]], "n_highway": 1,
                 "projection_dim": 128, "cell_size": 512},
    "elmo-small": {"filters": _ELMO_FILTERS, "n_highway": 1, "projection_dim": 128, "cell_size": 1024},
    "elmo-original": {"filters": _ELMO_FILTERS, "n_highway": 2, "projection_dim": 512, "cell_size": 4096},
}


def elmo_preset(name: str, **overrides) -> ELMoConfig:
    if name not in ELMO_PRESETS:
        raise BertforgeError(f"unknown preset {name!r} for ELMo; choose one of {', '.join(ELMO_PRESETS)}")
    return ELMoConfig(**{**ELMO_PRESETS[name], **overrides})


# The keys ModernBERT's HF config writes that say nothing about the model we build (flash-attention
# and compilation switches, sparse-prediction settings of HF's own loss).
_MODERNBERT_BOOKKEEPING = {"deterministic_flash_attn", "sparse_prediction", "sparse_pred_ignore_index",
                           "reference_compile", "repad_logits_with_grad", "norm_bias_enabled"}


# The families whose config is not BertConfig, by model_type.
FAMILY_CONFIGS = {"modernbert": ModernBertConfig, "openai-gpt": GPTConfig, "gpt2": GPTConfig, "awd-lstm": AWDLSTMConfig,
                  "elmo": ELMoConfig}


def config_from_dict(data: dict, source: str = "config") -> BertConfig | ModernBertConfig | GPTConfig:
    """The config a `config.json`'s contents describe: `ModernBertConfig` for model_type
    "modernbert", `GPTConfig` for "openai-gpt" and "gpt2", else `BertConfig`. Unknown keys are errors naming
    `source`."""
    cls = FAMILY_CONFIGS.get(data.get("model_type")) if isinstance(data, dict) else None
    if cls is None:
        return BertConfig.from_dict(data, source)
    names = {f.name for f in dataclasses.fields(cls)}
    if data.get("model_type") == "gpt2":
        try:
            data = gpt2_values(data)
        except BertforgeError as e:
            raise BertforgeError(f"{source}: {e}") from None
    # Older OpenAI GPT configs also hold `n_ctx` (the same as n_positions) and `n_special`,
    # `predict_special_tokens`, which nothing reads.
    ignored = _HF_BOOKKEEPING | _MODERNBERT_BOOKKEEPING | {"classifier_dropout_prob", "predict_special_tokens",
                                                          "n_ctx", "n_special"}
    unknown = sorted(set(data) - names - ignored)
    if cls is GPTConfig and data.get("n_ctx", data.get("n_positions")) != data.get("n_positions"):
        raise BertforgeError(f"{source}: n_ctx {data['n_ctx']} differs from n_positions {data.get('n_positions')}")
    try:
        if unknown:
            raise BertforgeError(f"unknown key(s) {', '.join(unknown)}")
        return cls(**{k: v for k, v in data.items() if k in names})
    except BertforgeError as e:
        raise BertforgeError(f"{source}: {e}") from None


def load_config(path: str) -> BertConfig | ModernBertConfig | GPTConfig:
    """Read a `config.json` (a file, or a directory holding one) of any family we build."""
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    return config_from_dict(_read_json(path), source=path)


def _read_json(path: str):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise BertforgeError(f"{path}: no such file") from None
    except json.JSONDecodeError as e:
        raise BertforgeError(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise BertforgeError(f"{path}: cannot read ({e})") from None


def modernbert_preset(name: str, **overrides) -> ModernBertConfig:
    """A ModernBERT of a BERT preset's depth, width and heads. The GeGLU width is 8/3 of the hidden
    size (rounded to 64), which gives the feed-forward layers BERT's 8 H^2 weights per layer."""
    if name not in PRESETS:
        raise BertforgeError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    values = dict(PRESETS[name])
    values["intermediate_size"] = max(64, round(8 * values["hidden_size"] / 3 / 64) * 64)
    values["max_position_embeddings"] = 512
    values.update(overrides)
    return ModernBertConfig(**values)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check(ok: bool, name: str, expected: str, value) -> None:
    if not ok:
        raise BertforgeError(f"config field {name!r} must be {expected}, got {value!r}")
