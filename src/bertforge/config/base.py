"""What every family's config shares: the HF bookkeeping keys, reading config.json, field checks."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import ClassVar

from ..errors import BertforgeError
from ..paths import why_missing


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


@dataclass(kw_only=True)
class HFConfig:
    """What every family's config does alike: read itself from a `config.json`'s contents, check the
    task keys HF writes, and write itself as HF does.

    The task keys of a fine-tuned model are its fields, which every family's config inherits:
    keyword-only, so that a family's own fields keep their places, and written last in
    `config.json` (`TASK_KEYS`), after the family's own keys."""

    # Fine-tuned models: HF's own keys for the head, so `AutoModelFor...` rebuilds it ...
    id2label: dict[int, str] | None = None
    label2id: dict[str, int] | None = None
    problem_type: str | None = None  # "single_label_classification" or "regression"
    finetuning_task: str | None = None  # e.g. "sst2", "ner", "qa"
    # ... and ours: how the task reads its input (columns, label scheme, lengths), for `predict`.
    bertforge_task: dict | None = None

    # Keys read and ignored beside HF's bookkeeping (a family's own bookkeeping, older spellings).
    IGNORED_KEYS: ClassVar[frozenset] = frozenset()
    # The last keys of `config.json`, in this order (a family may place one of its own among them).
    TASK_KEYS: ClassVar[tuple] = ("id2label", "label2id", "problem_type", "finetuning_task", "bertforge_task")

    @classmethod
    def from_dict(cls, data: dict, source: str = "config"):
        """Build a config from a dict, ignoring bookkeeping keys; unknown keys are errors naming `source`."""
        try:
            if not isinstance(data, dict):
                raise BertforgeError(f"expected a JSON object, found {type(data).__name__}")
            data = cls._prepare(data)
            names = {f.name for f in dataclasses.fields(cls)}
            unknown = sorted(set(data) - names - _HF_BOOKKEEPING - cls.IGNORED_KEYS)
            if unknown:
                raise BertforgeError(f"unknown key(s) {', '.join(unknown)}")
            return cls(**{k: v for k, v in data.items() if k in names})
        except BertforgeError as e:
            raise BertforgeError(f"{source}: {e}") from None

    @classmethod
    def _prepare(cls, data: dict) -> dict:
        """A family's own reading of the keys before they are checked (another spelling, say)."""
        return data

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

    def _check_translation_ids(self) -> None:
        """Marian's special ids, which both translation families keep: pad the last target id unless
        given, the decoder starting from pad unless given, and every special id inside the vocabulary."""
        if self.pad_token_id is None:
            self.pad_token_id = self.vocab_size - 1
        if self.decoder_start_token_id is None:
            self.decoder_start_token_id = self.pad_token_id
        for name in ("pad_token_id", "eos_token_id", "decoder_start_token_id"):
            value = getattr(self, name)
            _check(isinstance(value, int) and 0 <= value < self.vocab_size, name, f"an id below {self.vocab_size}", value)

    def _check_heads(self) -> None:
        if self.architectures == []:  # said nothing: the family's own default (its encoder), as when left out
            field = next(f for f in dataclasses.fields(self) if f.name == "architectures")
            self.architectures = field.default_factory()
        _check(isinstance(self.architectures, list) and all(isinstance(a, str) for a in self.architectures),
               "architectures", "a list of class names", self.architectures)
        _check(self.bertforge_task is None or isinstance(self.bertforge_task, dict), "bertforge_task",
               "an object (the task a model was fine-tuned for, as bertforge finetune writes it)", self.bertforge_task)
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
        """The config as HF writes it: the family's keys, then the task keys; optional fields appear only when set."""
        values = dataclasses.asdict(self)
        ordered = [k for k in values if k not in self.TASK_KEYS] + list(self.TASK_KEYS)
        return {k: values[k] for k in ordered if values[k] is not None}

    def hf_dict(self) -> dict:
        """What `config.json` holds: `to_dict`, unless a family spells a key otherwise in HF."""
        return self.to_dict()

    def save(self, path: str) -> None:
        with open(path, "w", encoding="utf-8") as f:
            # stamped with what wrote it, as transformers stamps `transformers_version`
            json.dump({**self.hf_dict(), "bertforge_version": bertforge_version()}, f, indent=2)
            f.write("\n")


def _read_json(path: str):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        raise BertforgeError(f"{path}: {why_missing(path)}") from None
    except json.JSONDecodeError as e:
        raise BertforgeError(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise BertforgeError(f"{path}: cannot read ({e})") from None


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check(ok: bool, name: str, expected: str, value) -> None:
    if not ok:
        raise BertforgeError(f"config field {name!r} must be {expected}, got {value!r}")
