"""Task families: one module each (read -> featurize -> model -> predict -> score)."""

from __future__ import annotations

from ..config import BertConfig
from ..errors import BertforgeError
from .choice import MultipleChoiceTask
from .classification import GLUE, ClassificationTask, glue_task
from .qa import QuestionAnsweringTask
from .tagging import TaggingTask

FAMILIES = ("classification", "regression", "ner", "qa", "multiple-choice")


def make_task(name: str, **options):
    """A task by GLUE name (`sst2`, `mrpc`, ...) or family (`classification`, `regression`).

    `options` set columns and lengths (`text_column`, `pair_column`, `label_column`,
    `max_seq_length`, `header`, `metrics`); None values are ignored.
    """
    options = {k: v for k, v in options.items() if v is not None}
    if name in GLUE:
        task = glue_task(name, options.get("max_seq_length", 128))
        task.features = options.get("features", task.features)
        return task
    if name in ("classification", "regression"):
        keep = ("text_column", "pair_column", "label_column", "max_seq_length", "header", "metrics", "features")
        options = {k: v for k, v in options.items() if k in keep}
        if name == "regression":
            options = {"regression": True, "metrics": ["pearson", "spearman"], **options}
        return ClassificationTask(name=name, **options)
    if name in ("ner", "tagging"):
        keep = ("word_column", "tag_column", "scheme", "max_seq_length")
        return TaggingTask(name=name, **{k: v for k, v in options.items() if k in keep})
    if name == "qa":
        keep = ("max_seq_length", "doc_stride", "max_query_length", "max_answer_length", "n_best",
                "null_threshold")
        return QuestionAnsweringTask(**{k: v for k, v in options.items() if k in keep})
    if name == "multiple-choice":
        keep = ("text_column", "choice_columns", "prefix_column", "label_column", "max_seq_length")
        return MultipleChoiceTask(**{k: v for k, v in options.items() if k in keep})
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
    if family == "ner":
        saved["metrics"] = tuple(saved.get("metrics", ()))
        return TaggingTask(**saved)
    if family == "qa":
        saved["metrics"] = tuple(saved.get("metrics", ()))
        return QuestionAnsweringTask(**saved)
    if family == "multiple-choice":
        saved["metrics"] = tuple(saved.get("metrics", ()))
        return MultipleChoiceTask(**saved)
    raise BertforgeError(f"{source}: unknown task family {family!r}")
