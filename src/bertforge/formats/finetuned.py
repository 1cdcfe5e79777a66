"""Loading a directory written by `finetune`: its task (from `config.json`), the task's model with
its weights (HF layout, or bertforge's own for the families transformers has no class for), and
the tokenizer saved beside it."""

from __future__ import annotations

import os

import torch

from ..data.words import FILE as WORDS_FILE
from ..data.words import WordVocab
from ..tasks import task_from_config
from ..tokenizer import Tokenizer
from . import native
from .hf import load_pretrained, read_config


def load_finetuned(directory: str, device: str | torch.device = "cpu"):
    """A fine-tuned model, its task and tokenizer, as saved by `finetune`."""
    config = read_config(directory)
    task = task_from_config(config, os.path.join(directory, "config.json"))
    if config.model_type in native.NATIVE_TYPES:  # built as the task builds it (TagLM with or without LM states)
        model = native.load_model(task.build_model, directory, device)
    else:
        model = load_pretrained(directory, cls=type(task.build_model(config)), device=device)
    return model.eval(), task, load_tokenizer(directory)


def load_tokenizer(directory: str):
    """The tokenizer saved with a model: sub-word (HF files), or a word vocabulary (`words.json`)."""
    if os.path.exists(os.path.join(directory, WORDS_FILE)):
        native.check_words(directory, read_config(directory))
        return WordVocab.from_pretrained(directory)
    return Tokenizer.from_pretrained(directory)
