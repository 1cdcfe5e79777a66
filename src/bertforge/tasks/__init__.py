"""Task families: one module each (read -> featurize -> model -> predict -> score)."""

from __future__ import annotations

from ..config import BertConfig
from ..errors import BertforgeError
from .classification import GLUE, ClassificationTask, glue_task

FAMILIES = ("classification", "regression")


def make_task(name: str, **options):
    """A task by GLUE name (`sst2`, `mrpc`, ...) or family (`classification`, `regression`).

    `options` set columns and lengths (`text_column`, `pair_column`, `label_column`,
    `max_seq_length`, `header`, `metrics`); None values are ignored.
    """
    options = {k: v for k, v in options.items() if v is not None}
    if name in GLUE:
        return glue_task(name, options.get("max_seq_length", 128))
    if name == "classification":
        return ClassificationTask(**options)
    if name == "regression":
        return ClassificationTask(name="regression", regression=True, metrics=["pearson", "spearman"], **options)
    raise BertforgeError(f"unknown task {name!r}; choose a GLUE task ({', '.join(GLUE)}) or a family "
                         f"({', '.join(FAMILIES)})")


def task_from_config(config: BertConfig, source: str):
    """The task a fine-tuned model was trained for, as saved in its config."""
    saved = config.bertforge_task
    if not saved:
        raise BertforgeError(f"{source}: not a fine-tuned model (no task in config.json)")
    saved = dict(saved)
    family = saved.get("family")
    if family == "classification":
        return ClassificationTask(**saved)
    raise BertforgeError(f"{source}: unknown task family {family!r}")
