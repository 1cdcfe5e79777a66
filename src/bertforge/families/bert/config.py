"""BERT's config, shared by the encoder families with its Transformer layer (BERT, ALBERT,
RoBERTa, ELECTRA, RoFormer); its sizes are `config.sizes.PRESETS`."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field

from ...config.base import _HF_BOOKKEEPING, ACTIVATIONS, HFConfig, _check, _is_number, _read_json
from ...config.sizes import PRESETS
from ...errors import BertforgeError


# The encoder families, by HF `model_type`. ALBERT and ELECTRA may have word embeddings narrower
# than the hidden size (`embedding_size`), projected up; ALBERT shares one layer's weights across
# layers (`num_hidden_groups` sets of weights); RoBERTa numbers positions from pad_token_id + 1;
# RoFormer (Su et al., 2021) has no position table and rotates queries and keys by position instead.
MODEL_TYPES = ("bert", "albert", "roberta", "electra", "roformer")


# What each of them varies, as flags of the config that the model reads (it never tests a name):
# `positions` "absolute" (a learned table) or "rotary" (RoFormer); `positions_from_pad`: positions
# count from pad_token_id + 1 (RoBERTa, fairseq's numbering); `always_project`: embeddings are
# projected to the hidden size even when as wide (ALBERT, as HF does; the others only when narrower);
# `pooler_act` and `mlm_act`: the pooler's and the MLM head's non-linearity ("hidden_act": the
# config's). ELECTRA's sentence classifier, which its pooler stands for, applies GELU where BERT's
# pooler has tanh, and RoFormer's applies hidden_act; RoBERTa's and ELECTRA's MLM heads always GELU.
VARIANTS = {
    "bert": dict(positions="absolute", positions_from_pad=False, always_project=False, pooler_act="tanh",
                 mlm_act="hidden_act"),
    "albert": dict(positions="absolute", positions_from_pad=False, always_project=True, pooler_act="tanh",
                   mlm_act="hidden_act"),
    "roberta": dict(positions="absolute", positions_from_pad=True, always_project=False, pooler_act="tanh",
                    mlm_act="gelu"),
    "electra": dict(positions="absolute", positions_from_pad=False, always_project=False, pooler_act="gelu",
                    mlm_act="gelu"),
    "roformer": dict(positions="rotary", positions_from_pad=False, always_project=False, pooler_act="hidden_act",
                     mlm_act="hidden_act"),
}


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
    classifier_dropout: float | None = None  # a fine-tuned model's head; None: hidden_dropout_prob, as HF

    # BERT's config.json has always written the head's dropout among the task keys
    TASK_KEYS = ("id2label", "label2id", "problem_type", "classifier_dropout", "finetuning_task", "bertforge_task")

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
        if self.positions == "rotary":
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
        if self.positions_from_pad:
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

    # What task heads ask of a family (the same names on every config): segment ids (GPT-1 has no
    # table), a bias on the sequence classifier's output layer (GPT-1's has none). ModernBERT's head on
    # every token is its record's (`Family.token_head`).
    token_types = True
    score_bias = True

    # The variant's flags (`VARIANTS`), read from its model_type.
    @property
    def positions(self) -> str:
        """RoFormer's rotary positions, or BERT's learned table."""
        return VARIANTS[self.model_type]["positions"]

    @property
    def positions_from_pad(self) -> bool:
        """Positions count from pad_token_id + 1, padding staying at pad_token_id (RoBERTa)."""
        return VARIANTS[self.model_type]["positions_from_pad"]

    @property
    def always_project(self) -> bool:
        """Embeddings are projected to the hidden size even when as wide (ALBERT)."""
        return VARIANTS[self.model_type]["always_project"]

    @property
    def pooler_act(self) -> str:
        """The pooler's non-linearity: "tanh" or one of `ACTIVATIONS`."""
        act = VARIANTS[self.model_type]["pooler_act"]
        return self.hidden_act if act == "hidden_act" else act

    @property
    def mlm_act(self) -> str:
        """The masked-LM head's non-linearity, one of `ACTIVATIONS`."""
        act = VARIANTS[self.model_type]["mlm_act"]
        return self.hidden_act if act == "hidden_act" else act

    @property
    def max_length(self) -> int:
        """The longest input the position table allows (RoBERTa's offset costs pad_token_id + 1 rows)."""
        if self.positions_from_pad:
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


def preset(name: str, **overrides) -> BertConfig:
    """The config of a named size (`bert-tiny` ... `bert-large`), with any field overridden."""
    if name not in PRESETS:
        raise BertforgeError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    values = dict(PRESETS[name])
    values["intermediate_size"] = 4 * values["hidden_size"]
    values.update(overrides)
    return BertConfig(**values)


def pretraining_config(size: str, tokenizer, objective, positions: str, layer_norm: str,
                       overrides: dict | None = None) -> BertConfig:
    """The config of a new pretraining run of `objective` (a `families.Objective`) at `size`, for
    `tokenizer`'s vocabulary: RoFormer's model type with rotary positions."""
    model_type = "roformer" if positions == "rotary" else objective.model_type
    values = {"vocab_size": tokenizer.vocab_size, "pad_token_id": tokenizer.pad_id, "model_type": model_type,
              **objective.model, **(overrides or {})}
    if model_type == "roberta":  # room for RoBERTa's position offset (514 rows for 512 tokens)
        values.setdefault("max_position_embeddings", 512 + tokenizer.pad_id + 1)
    return preset(size, **values)
