"""Task kinds: one module each (read -> featurize -> model -> predict -> score), each class a
record of what generic code asks of its kind (see `kind.TaskKind`). `KINDS` is the one
registration; `make_task` and `task_from_config` look a task up there and nowhere else."""

from __future__ import annotations

from ..config import HFConfig
from ..errors import BertforgeError
from .choice import MultipleChoiceTask
from .classification import GLUE, ClassificationTask
from .kind import TaskKind
from .qa import QuestionAnsweringTask
from .tagging import TaggingTask

# kind -> its task class; a kind's name is what config.json saves as the task's "family"
KINDS: dict[str, type[TaskKind]] = {"classification": ClassificationTask, "ner": TaggingTask,
                                    "qa": QuestionAnsweringTask, "multiple-choice": MultipleChoiceTask}


def register(cls: type[TaskKind]) -> None:
    """Add a task kind (its class; the kind's name is its `kind` field's default): its name, and
    the names it accepts, must be new."""
    taken = ({cls.kind} & set(KINDS)) | (set(cls.accepts) & {n for kind in KINDS.values() for n in kind.accepts})
    if taken:
        raise BertforgeError(f"task kind {cls.kind}: {', '.join(sorted(taken))} already registered")
    KINDS[cls.kind] = cls


def unregister(cls: type[TaskKind]) -> None:
    KINDS.pop(cls.kind)


def make_task(name: str, **options):
    """A task by GLUE name (`sst2`, `mrpc`, ...) or kind (`classification`, `regression`, `ner`, ...).

    `options` set columns and lengths (`text_column`, `pair_column`, `label_column`,
    `max_seq_length`, `header`, `metrics`); those a kind does not take are ignored, as are None values.
    """
    options = {k: v for k, v in options.items() if v is not None}
    for cls in KINDS.values():
        if name in cls.accepts:
            return cls.make(name, options)
    kinds = [n for cls in KINDS.values() for n in cls.accepts if n not in GLUE]
    raise BertforgeError(f"unknown task {name!r}; choose a GLUE task ({', '.join(GLUE)}) or a kind "
                         f"({', '.join(kinds)})")


def task_from_config(config: HFConfig, source: str):
    """The task a fine-tuned model was trained for, as saved in its config."""
    saved = config.bertforge_task
    if not saved:
        raise BertforgeError(f"{source}: not a fine-tuned model (no task in config.json)")
    kind = saved.get("family")
    if kind not in KINDS:
        raise BertforgeError(f"{source}: unknown task family {kind!r}")
    return KINDS[kind].from_saved(saved)
