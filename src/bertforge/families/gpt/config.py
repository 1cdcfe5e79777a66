"""GPT-1's config (Radford et al., 2018), also in GPT-2's layer order or with rotary positions
(GPT-NeoX's spelling), and its sizes."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...errors import BertforgeError
from ...config.base import HFConfig, _check, _is_number
from ...config.sizes import PRESETS


@dataclass
class GPTConfig(HFConfig):
    """GPT-1 (Radford et al., 2018), spelled as HF's `OpenAIGPTConfig` (`model_type` "openai-gpt"):
    a left-to-right Transformer decoder with learned positions and BERT's post-LayerNorm block.

    `model_type` "gpt2" is the same decoder with GPT-2's layer order (Radford et al., 2019): the
    LayerNorm before each sublayer and one after the last block (`pre_norm`), which leaves the
    unigram plateau of a CPU's few hundred steps sooner than GPT-1's (docs/gpt.md: "GPT-1's layer order").
    It is saved as HF's `GPT2Config`, whose only other difference is a key's name
    (`activation_function`).

    `model_type` "gpt_neox" is GPT-2's order with rotary positions in place of the learned table
    (Su et al., 2021; `positions` "rotary"): each layer turns the first `rotary_pct` of every head's
    queries and keys, dimension i with i + D/2 (GPT-NeoX's layout), by position x
    `rotary_emb_base`^(-2i/D). It is saved as HF's `GPTNeoXConfig` with its sequential residual
    (`use_parallel_residual` false) and the LM head tied to the token embeddings; its one dropout
    `hidden_dropout` is both `embd_pdrop` and `resid_pdrop`, which must therefore be equal.

    Defaults are GPT-1's: 12 layers of 768, 12 heads, 512 positions, its 40,478-piece vocabulary.
    `summary_*` describe HF's multiple-choice head (`OpenAIGPTDoubleHeadsModel`). The properties at
    the end give the BERT-named values that code shared by every family reads.
    """

    vocab_size: int = 40478
    n_positions: int = 512
    n_embd: int = 768
    n_layer: int = 12
    n_head: int = 12
    afn: str = "gelu"  # HF's "gelu" for GPT is the tanh approximation (OpenAI's code); "gelu_exact": erf's
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
    rotary_pct: float | None = None  # gpt_neox: the fraction of each head turned (1.0 unless given)
    rotary_emb_base: float | None = None  # gpt_neox: theta of the angles (10,000 unless given)
    model_type: str = "openai-gpt"
    architectures: list[str] = field(default_factory=lambda: ["OpenAIGPTModel"])

    def __post_init__(self) -> None:
        self._check_ranges(counts=("vocab_size", "n_positions", "n_embd", "n_layer", "n_head"),
                           probabilities=("resid_pdrop", "embd_pdrop", "attn_pdrop", "summary_first_dropout"),
                           positives=("layer_norm_epsilon", "initializer_range"))
        _check(self.model_type in GPT_TYPES, "model_type", "'openai-gpt', 'gpt2' or 'gpt_neox'", self.model_type)
        # GPT-NeoX's default is the exact (erf) GELU, which OpenAI's GPT does not have
        afns = ("gelu", "relu", "silu", "swish") + (("gelu_exact",) if self.model_type == "gpt_neox" else ())
        _check(self.afn in afns, "afn", f"one of {', '.join(afns)}", self.afn)
        _check(self.n_embd % self.n_head == 0, "n_head", f"a divisor of n_embd={self.n_embd}", self.n_head)
        self._check_rotary()
        _check(self.tie_word_embeddings is True, "tie_word_embeddings", "true (the LM head is the embeddings)",
               self.tie_word_embeddings)
        for name in ("pad_token_id", "bos_token_id", "eos_token_id"):
            value = getattr(self, name)
            _check(value is None or isinstance(value, int) and 0 <= value < self.vocab_size, name,
                   f"an id below vocab_size={self.vocab_size}", value)
        self._check_heads()

    def _check_rotary(self) -> None:
        """gpt_neox: the rotary settings (defaults filled in) and one dropout; the others: none of them."""
        if self.model_type != "gpt_neox":
            for name in ("rotary_pct", "rotary_emb_base"):
                _check(getattr(self, name) is None, name, "unset outside gpt_neox (rotary positions)",
                       getattr(self, name))
            return
        self.rotary_pct = 1.0 if self.rotary_pct is None else self.rotary_pct
        self.rotary_emb_base = 10000.0 if self.rotary_emb_base is None else self.rotary_emb_base
        _check(_is_number(self.rotary_pct) and 0 < self.rotary_pct <= 1, "rotary_pct", "a fraction in (0, 1]",
               self.rotary_pct)
        _check(self.rotary_dims > 0 and self.rotary_dims % 2 == 0, "rotary_pct",
               f"a fraction of the head size {self.head_size} giving an even count of turned dimensions",
               self.rotary_pct)
        _check(_is_number(self.rotary_emb_base) and self.rotary_emb_base > 0, "rotary_emb_base", "a positive number",
               self.rotary_emb_base)
        _check(self.embd_pdrop == self.resid_pdrop, "embd_pdrop",
               f"resid_pdrop's {self.resid_pdrop} (GPT-NeoX has one hidden_dropout)", self.embd_pdrop)

    # Older OpenAI GPT configs also hold `n_ctx` (the same as n_positions) and `n_special`,
    # `predict_special_tokens`, which nothing reads.
    IGNORED_KEYS = frozenset({"predict_special_tokens", "n_ctx", "n_special"})

    @classmethod
    def _prepare(cls, data: dict) -> dict:
        if data.get("model_type") == "gpt2":
            data = gpt2_values(data)
        if data.get("model_type") == "gpt_neox":
            data = neox_values(data)
        if data.get("n_ctx", data.get("n_positions")) != data.get("n_positions"):
            raise BertforgeError(f"n_ctx {data['n_ctx']} differs from n_positions {data.get('n_positions')}")
        return data

    def hf_dict(self) -> dict:
        if self.model_type == "gpt_neox":
            return neox_dict(self)
        values = self.to_dict()
        if self.pre_norm:  # GPT2Config's spelling; its token ids default to GPT-2's vocabulary's, so always written
            values["activation_function"] = GPT2_ACTIVATIONS_OURS[values.pop("afn")]
            values.update({name: getattr(self, name) for name in ("bos_token_id", "eos_token_id", "pad_token_id")})
        return values

    pre_norm = property(lambda self: self.model_type in ("gpt2", "gpt_neox"))
    layer_norm = property(lambda self: "pre" if self.pre_norm else "post")
    positions = property(lambda self: "rotary" if self.model_type == "gpt_neox" else "absolute")
    # the dimensions of each head that rotary positions turn (HF's `rotary_ndims`); 0: a position table
    rotary_dims = property(lambda self: int(self.head_size * self.rotary_pct) if self.rotary_pct else 0)
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
    # OpenAI's "gelu" is the tanh approximation, which our activations call gelu_new (and erf's "gelu")
    hidden_act = property(lambda self: {"gelu": "gelu_new", "gelu_exact": "gelu"}.get(self.afn, self.afn))
    classifier_dropout = property(lambda self: self.summary_first_dropout)
    embedding_size = None
    type_vocab_size = 1
    num_hidden_groups = None



GPT_TYPES = ("openai-gpt", "gpt2", "gpt_neox")
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


# GPTNeoXConfig's `hidden_act` -> our `afn`, and back
NEOX_ACTIVATIONS = {"gelu": "gelu_exact", "gelu_new": "gelu", "gelu_pytorch_tanh": "gelu", "relu": "relu",
                    "silu": "silu", "swish": "swish"}
NEOX_ACTIVATIONS_OURS = {"gelu_exact": "gelu", "gelu": "gelu_new", "relu": "relu", "silu": "silu", "swish": "swish"}
# GPTNeoXConfig's names of our fields; `hidden_dropout` is both embd_pdrop and resid_pdrop
NEOX_NAMES = {"hidden_size": "n_embd", "num_hidden_layers": "n_layer", "num_attention_heads": "n_head",
              "max_position_embeddings": "n_positions", "attention_dropout": "attn_pdrop",
              "layer_norm_eps": "layer_norm_epsilon", "classifier_dropout": "summary_first_dropout"}
# Written as they are in either spelling
NEOX_SAME = ("vocab_size", "initializer_range", "pad_token_id", "bos_token_id", "eos_token_id", "tie_word_embeddings",
             "model_type", "architectures", "id2label", "label2id", "problem_type", "finetuning_task",
             "bertforge_task")


def neox_values(data: dict) -> dict:
    """A GPTNeoXConfig's keys as GPTConfig's, refusing the GPT-NeoX options our decoder does not have."""
    data = dict(data)
    act = data.pop("hidden_act", "gelu")
    if act not in NEOX_ACTIVATIONS:
        raise BertforgeError(f"hidden_act {act!r} is not supported (one of {', '.join(NEOX_ACTIVATIONS)})")
    values = {"afn": NEOX_ACTIVATIONS[act]}
    width = data.get("hidden_size", 6144)
    if data.pop("intermediate_size", 4 * width) != 4 * width:
        raise BertforgeError("intermediate_size is not supported unless 4 x hidden_size")
    # GPTNeoXConfig's defaults: a parallel residual (Pythia's), biases
    for name, default, supported in (("use_parallel_residual", True, False), ("attention_bias", True, True)):
        if data.pop(name, default) != supported:
            raise BertforgeError(f"{name} {not supported} is not supported")
    values.update(_neox_rotary(data))
    dropout = data.pop("hidden_dropout", 0.0)  # GPTNeoXConfig's defaults: no dropout
    values.update(embd_pdrop=dropout, resid_pdrop=dropout, attn_pdrop=data.pop("attention_dropout", 0.0))
    values.update({ours: data.pop(theirs) for theirs, ours in NEOX_NAMES.items() if theirs in data})
    values.update({name: data.pop(name) for name in NEOX_SAME if name in data})
    values.setdefault("architectures", ["GPTNeoXModel"])
    return {**data, **values}  # what is left is bookkeeping or unknown (an error, naming it)


def _neox_rotary(data: dict) -> dict:
    """`rotary_pct` and `rotary_emb_base` from any of GPTNeoXConfig's spellings: transformers 5's
    `rope_parameters` (which wins, as it does there), 4's `rotary_pct` and `rotary_emb_base`, and
    its `rope_scaling`, which must ask for nothing beyond the default angles."""
    rope = {}
    for name in ("rope_scaling", "rope_parameters"):
        given = data.pop(name, None) or {}
        if not isinstance(given, dict) or given.get("rope_type", given.get("type", "default")) != "default":
            raise BertforgeError(f"{name} {given!r} is not supported (only the default rotary angles)")
        rope.update(given)
    values = {}
    # each setting's keys outside rope_parameters, GPTNeoXConfig's name first; then its own default
    for ours, names, default in (("rotary_pct", ("rotary_pct", "partial_rotary_factor"), 0.25),
                                 ("rotary_emb_base", ("rotary_emb_base", "rope_theta"), 10000.0)):
        found = [data.pop(name) for name in names if name in data]
        values[ours] = rope.get(names[1], found[0] if found else default)
    return values


def neox_dict(config: GPTConfig) -> dict:
    """A gpt_neox GPTConfig as GPTNeoXConfig spells it: the rotary settings in transformers 5's
    `rope_parameters` and in 4's keys, so that either reads them."""
    values = config.to_dict()
    out = {name: values[name] for name in NEOX_SAME if name in values}
    out.update({theirs: values[ours] for theirs, ours in NEOX_NAMES.items()})
    out.update(intermediate_size=config.intermediate_size, hidden_act=NEOX_ACTIVATIONS_OURS[config.afn],
               hidden_dropout=config.resid_pdrop, use_parallel_residual=False, attention_bias=True,
               rotary_pct=config.rotary_pct, rotary_emb_base=config.rotary_emb_base,
               rope_parameters={"rope_type": "default", "rope_theta": config.rotary_emb_base,
                                "partial_rotary_factor": config.rotary_pct})
    for name in ("pad_token_id", "bos_token_id", "eos_token_id"):  # GPTNeoXConfig's own defaults are 0 and 2
        out[name] = values.get(name)
    return out


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
    saved as gpt2) with `positions` ("rotary": GPT-2's order, saved as gpt_neox), for `tokenizer`'s
    vocabulary: rows start with [CLS] and documents end with [SEP]."""
    if positions == "rotary" and layer_norm != "pre":
        raise BertforgeError("rotary positions come in GPT-2's layer order only (GPT-NeoX's, their transformers "
                             "class): use --layer-norm pre, or --positions absolute")
    model_type = "gpt_neox" if positions == "rotary" else "gpt2" if layer_norm == "pre" else "openai-gpt"
    return gpt_preset(size, vocab_size=tokenizer.vocab_size, pad_token_id=tokenizer.pad_id,
                      bos_token_id=tokenizer.cls_id, eos_token_id=tokenizer.sep_id, model_type=model_type,
                      **(overrides or {}))
