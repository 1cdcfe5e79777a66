"""ModernBERT's config (Warner et al., 2024) and its sizes, from BERT's presets."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...errors import BertforgeError
from ...config.base import ACTIVATIONS, HFConfig, _check, _is_number
from ...config.sizes import PRESETS


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

    IGNORED_KEYS = frozenset({"deterministic_flash_attn", "sparse_prediction", "sparse_pred_ignore_index",
                              "reference_compile", "repad_logits_with_grad", "norm_bias_enabled"})

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
    positions = "rotary"
    token_types = True
    score_bias = True
    embedding_size = None
    type_vocab_size = 1
    num_hidden_groups = None
    hidden_act = property(lambda self: self.hidden_activation)
    layer_norm_eps = property(lambda self: self.norm_eps)
    hidden_dropout_prob = property(lambda self: self.mlp_dropout)


# The keys ModernBERT's HF config writes that say nothing about the model we build (flash-attention
# and compilation switches, sparse-prediction settings of HF's own loss).
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


def pretraining_config(size: str, tokenizer, objective, positions: str, layer_norm: str,
                       overrides: dict | None = None) -> ModernBertConfig:
    """The config of a new ModernBERT pretraining run at `size`, for `tokenizer`'s vocabulary (its
    [CLS] and [SEP] also begin and end sequences)."""
    ids = {f"{name}_token_id": tok_id for name, tok_id in (("cls", tokenizer.cls_id), ("sep", tokenizer.sep_id),
                                                           ("bos", tokenizer.cls_id), ("eos", tokenizer.sep_id))}
    return modernbert_preset(size, vocab_size=tokenizer.vocab_size, pad_token_id=tokenizer.pad_id, **ids,
                             **(overrides or {}))
