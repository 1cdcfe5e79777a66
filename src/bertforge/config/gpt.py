"""GPT-1's config (Radford et al., 2018), also in GPT-2's layer order, and its sizes."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import BertforgeError
from .base import HFConfig, _check
from .bert import PRESETS


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

    # Older OpenAI GPT configs also hold `n_ctx` (the same as n_positions) and `n_special`,
    # `predict_special_tokens`, which nothing reads.
    IGNORED_KEYS = frozenset({"predict_special_tokens", "n_ctx", "n_special"})

    @classmethod
    def _prepare(cls, data: dict) -> dict:
        if data.get("model_type") == "gpt2":
            data = gpt2_values(data)
        if data.get("n_ctx", data.get("n_positions")) != data.get("n_positions"):
            raise BertforgeError(f"n_ctx {data['n_ctx']} differs from n_positions {data.get('n_positions')}")
        return data

    def hf_dict(self) -> dict:
        values = self.to_dict()
        if self.pre_norm:  # GPT2Config's spelling; its token ids default to GPT-2's vocabulary's, so always written
            values["activation_function"] = GPT2_ACTIVATIONS_OURS[values.pop("afn")]
            values.update({name: getattr(self, name) for name in ("bos_token_id", "eos_token_id", "pad_token_id")})
        return values

    pre_norm = property(lambda self: self.model_type == "gpt2")
    layer_norm = property(lambda self: "pre" if self.pre_norm else "post")
    positions = "absolute"
    token_head = False
    token_types = False  # no segment table (HF's convention would embed the zeros as token 0)
    score_bias = False  # HF's GPT sequence classifier projects without a bias
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


def pretraining_config(size: str, tokenizer, objective, positions: str, layer_norm: str,
                       overrides: dict | None = None) -> GPTConfig:
    """The config of a new GPT pretraining run at `size` in `layer_norm` order ("pre": GPT-2's,
    saved as gpt2), for `tokenizer`'s vocabulary: rows start with [CLS] and documents end with [SEP]."""
    return gpt_preset(size, vocab_size=tokenizer.vocab_size, pad_token_id=tokenizer.pad_id,
                      bos_token_id=tokenizer.cls_id, eos_token_id=tokenizer.sep_id,
                      model_type="gpt2" if layer_norm == "pre" else "openai-gpt", **(overrides or {}))
