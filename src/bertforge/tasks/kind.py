"""A task kind's record: what generic code (finetune, predict, evaluate, serve, export) asks of a
task, so that none of it branches on a task's name. Each task class (classification, tagging, QA,
multiple choice) derives from `TaskKind` and fills in its class attributes; `tasks.KINDS` registers
the classes, as `families.FAMILIES` registers model families. A new task kind is one module with
such a class plus one line in `tasks/__init__.py`.

The attributes are class variables, so a task's dataclass fields (what config.json saves of it)
are exactly as before; its `kind` is saved under the key "family", the name files have always used.
"""

from __future__ import annotations

from typing import ClassVar

from ..errors import BertforgeError
from ..families import family_of


# what a predictions file holds, by format, for `predict`'s header
FORMATS = {"jsonl": "JSON lines", "conll": "CoNLL columns: word, gold, predicted"}


class TaskKind:
    # the names `make_task` takes for this kind, and the keywords it passes on to the task
    accepts: ClassVar[tuple[str, ...]] = ()
    options: ClassVar[tuple[str, ...]] = ("max_seq_length",)
    # one request's fields and their types (a Predictor's dicts, serve's /predict body)
    request: ClassVar[dict[str, type]] = {}
    inputs: ClassVar[str] = "a request dict"  # what a Python input of Predictor may be, for its error
    # ONNX: the output names, and the choices axis of the example the exporter traces (None: no such axis)
    onnx_outputs: ClassVar[tuple[str, ...]] = ("logits",)
    onnx_choices: ClassVar[int | None] = None
    # predictions written by `predict`: file suffix -> format, what `predict` says it writes
    suffixes: ClassVar[dict[str, str]] = {".jsonl": "jsonl"}
    written_as: ClassVar[str] = ".jsonl"
    labelled_inputs: ClassVar[bool | str] = False  # what `predict` passes `read` as with_labels
    ensembles: ClassVar[bool] = False  # whether several models' outputs of this kind can be averaged
    taggers: ClassVar[bool] = False  # whether a CRF or TagLM's tagger can sit on top
    crf = False  # class attributes of the kinds without a CRF (not saved with the task)
    tagger = None

    @classmethod
    def make(cls, name: str, options: dict):
        """The task named `name` (one of `accepts`) with the keywords it takes of `options`."""
        return cls(name=name, **{k: v for k, v in options.items() if k in cls.options})

    @classmethod
    def from_saved(cls, saved: dict):
        """The task as config.json saved it (lists where the dataclass holds tuples)."""
        saved = {k: v for k, v in saved.items() if k != "family"}
        if isinstance(getattr(cls, "metrics", None), tuple):
            saved["metrics"] = tuple(saved.get("metrics", ()))
        return cls(**saved)

    @property
    def family(self) -> str:
        """The kind under its former name (what config.json still calls it)."""
        return self.kind

    def build_model(self, config):
        """The task's model over a model of `config`'s family, as the family builds it (code that
        has the family's record at hand asks `family.build_task_model(task, config)`)."""
        return family_of(config).build_task_model(self, config)

    def encoder_model(self, config, family):
        """The task's head over `family`'s encoder of `config` (a Transformer family's task model)."""
        raise BertforgeError(f"a {self.name} task has no head over an encoder")

    def recorded(self) -> dict:
        """What run_config.json records of the task's options beyond its name (a tagger's CRF)."""
        return {}

    def prepare(self, model, train_features: list[dict]) -> None:
        """Anything the new task model takes from the training data before training starts."""

    def needed(self) -> set[str]:
        """The fields a request to this task must have, exactly."""
        return set(self.request)

    def example(self, request: dict) -> dict:
        """The example of one request (dict of `needed` fields), its fields checked."""
        needed, fields = self.needed(), set(request)
        if fields != needed:
            wanted = ", ".join(f'"{n}"' for n in sorted(needed))
            got = ", ".join(sorted(fields)) or "nothing"
            raise BertforgeError(f"a {self.name} model reads {wanted}; got {got}")
        return {**self.request_example(request), "where": "request"}

    def request_example(self, request: dict) -> dict:
        return dict(request)

    def request_of(self, x) -> dict | None:
        """A Python input (a text, a tuple) as a request dict; None if this kind takes no such input."""
        return None

    def served(self, outputs, names: list[str] | None, examples: list[dict], features: list[dict]) -> list[dict]:
        """The answers a Predictor and serve give, from the task's predictions (`predict`'s output)."""
        return self.outputs(outputs, names, examples, features)

    def format_name(self, output_format: str) -> str:
        """What `predict` says it writes, in `output_format` (one of `suffixes`' values)."""
        return FORMATS[output_format]

    def single_text(self) -> bool:
        """Whether an example is one text, so that a plain text file (one per line) can hold examples."""
        return False

    def in_layout(self, lines: list[str], names: list[str] | None) -> bool:
        """Whether a file's non-blank `lines` are in the task's own layout rather than plain text
        (asked only where `single_text`; see `common.plain_text`)."""
        return True
