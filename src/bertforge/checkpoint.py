"""What a model directory says of itself, read without building a model: its config, and a
fine-tuned model's label names.

`read_config` is the one reader of a directory's `config.json`, for every family and both layouts
(Hugging Face's and bertforge's own): the family its `model_type` names picks the config class.
Torch-free, and below everything that reads a checkpoint (formats, load, the recipes, serve), so
that training and serving reach these without importing one another.
"""

from __future__ import annotations

import os

from .config.base import _read_json
from .errors import BertforgeError
from .families import family_and_config
from .paths import why_missing

CONFIG_FILE = "config.json"


def read_config(directory: str):
    """The config of the model in `directory` (its `config.json`), of the family its `model_type`
    names; errors name the directory or the file."""
    return read_family_and_config(directory)[1]


def read_family_and_config(directory: str):
    """`read_config`'s config, with the record of the family its `model_type` names."""
    if not os.path.isdir(directory):
        raise BertforgeError(f"{directory}: {why_missing(directory, 'directory')}")
    path = os.path.join(directory, CONFIG_FILE)
    return family_and_config(_read_json(path), source=path)


def label_names_of(model) -> list[str] | None:
    """A fine-tuned classifier's label names in id order (None for regression and other heads)."""
    config = model.backbone.config
    if config.problem_type == "regression" or not config.id2label:
        return None
    return [config.id2label[i] for i in range(len(config.id2label))]
