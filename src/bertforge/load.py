"""One loader: a model directory -> its config, family, model, tokenizer and task, each read once.

Every command that runs a saved model (predict, evaluate, serve, fill-mask, embed, generate,
evaluate-lm, export, info) starts here, so that a directory is understood in one way: the family
from `config.json`'s model type, the checkpoint format and the vocabulary from the family, the task
from the config of a fine-tuned model.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import partial

import torch
from torch import nn

from .checkpoint import read_config, read_family_and_config
from .checks import check_model_size
from .data.words import FILE as WORDS_FILE
from .data.words import WordVocab
from .errors import BertforgeError
from .families import Family, family_of, resolve
from .formats import native
from .formats.hf import load_pretrained
from .hub import model_path
from .tasks import task_from_config
from .data.tokenizer import Tokenizer


@dataclass
class Loaded:
    """What a model directory holds, read once."""

    directory: str
    config: object
    family: Family
    model: nn.Module
    tokenizer: object
    task: object | None = None  # a fine-tuned model's task; None for a pretrained one


def load(directory: str, device: str | torch.device = "cpu", model=None, use: str | None = None, config=None,
         family: Family | None = None, **options) -> Loaded:
    """Load the model in `directory`, in eval mode.

    `model`: the class (or builder of a config) to load it as, e.g. an objective with its heads;
    by default a fine-tuned model's task model, else the checkpoint as its family saved it (the
    encoder of a Transformer: heads in the checkpoint are skipped; a recurrent family's language
    model). `use` (see `families.USES`) is checked first, so that a family without it gets one error
    listing what it supports. `config`, `family`: the directory's config and its family's record, when
    the caller has read them already.
    `options` go to `model` (e.g. `sentence=None`). `directory` may be a Hugging Face Hub name
    (`Helsinki-NLP/opus-mt-en-de`, `owner/name@revision`) where no such path exists: the model is read
    from the Hub's cache, fetched if need be (hub.py).
    """
    directory = model_path(directory)
    # the one lookup of the family: what follows is given its record
    if config is None:
        family, config = read_family_and_config(directory)
    family = family or family_of(config)
    if use is not None:
        family.supports(use, directory)
    task = task_from_config(config, os.path.join(directory, "config.json")) if config.bertforge_task else None
    build = model or (partial(family.build_task_model, task) if task is not None else None)
    # A word vocabulary is read first, checked against the config as it is, and not again with the
    # weights; any other tokenizer after the model, whose errors come first.
    words = family.vocab_kind == "words" and not family.tokenizer
    tokenizer = load_tokenizer(directory, config, family) if words else None
    net = read_model(directory, config, family, build, device, words, **options)
    tokenizer = load_tokenizer(directory, config, family) if tokenizer is None else tokenizer
    return Loaded(directory, config, family, net.eval(), tokenizer, task)


def load_finetuned(directory: str, device: str | torch.device = "cpu"):
    """A fine-tuned model, its task and tokenizer, as saved by `finetune`."""
    loaded = load(directory, device)
    if loaded.task is None:
        raise BertforgeError(f"{os.path.join(directory, 'config.json')}: not a fine-tuned model (no task in config.json)")
    return loaded.model, loaded.task, loaded.tokenizer


def read_model(directory: str, config, family: Family, build=None, device: str | torch.device = "cpu",
               words_checked: bool = False, **options) -> nn.Module:
    """The weights of `directory` in the model `build(config)` makes, read in the family's format
    (`words_checked`: its word vocabulary was read and checked already, by `load_tokenizer`)."""
    # bertforge's own layout: by default the model pretraining saved, or a translation family's encoder-decoder
    default = resolve(family.objectives[0].build) if family.native and family.objectives and not family.checkpoint \
        else None
    check_model_size(lambda c: (build or default or resolve(family.encoder))(c, **options), config,
                     os.path.join(directory, "config.json"), device)  # before any memory is taken
    if family.checkpoint:  # a layout of the family's own (MarianMT's); by default its model
        own = resolve(family.checkpoint + ":load_model")
        return own(lambda c: (build or resolve(family.encoder))(c, **options), directory, device, config=config)
    if family.native and (build or default) is None:  # no objective (a translation family's): the model it saved
        return native.load_model(lambda c: resolve(family.encoder)(c, **options), directory, device, config,
                                 backbone=True)
    if family.native:
        build = build or default
        return native.load_model(lambda c: build(c, **options), directory, device, config,
                                 words_checked=words_checked)
    return load_pretrained(directory, cls=build, device=device, config=config, family=family, **options)


def load_tokenizer(directory: str, config=None, family: Family | None = None):
    """The tokenizer saved with a model: sub-word (HF files), or a word vocabulary (`words.json`) for
    the families that read words (so that its absence is said as such). `config` and `family`: the
    directory's, when the caller has them already."""
    config = read_config(directory) if config is None else config
    family = family_of(config) if family is None else family
    if family.tokenizer:  # a vocabulary of the family's own (translation's)
        tokenizer = resolve(family.tokenizer).from_pretrained(directory)
        check_vocabulary(tokenizer, config, directory)
        return tokenizer
    if family.vocab_kind == "words":  # checked against the model's size as it is read; absent, said so
        vocab = native.check_words(directory, config)
        return vocab if vocab is not None else WordVocab.from_pretrained(directory)
    return Tokenizer.from_pretrained(directory)


def check_vocabulary(tokenizer, config, directory: str) -> None:
    """A translation tokenizer's ids are the model's rows, one to one: more would index past the
    embeddings, fewer leave rows whose tokens decode to nothing (empty translations)."""
    for field in ("vocab_size", "source_vocab_size"):
        theirs, ours = getattr(tokenizer, field, None), getattr(config, field, None)
        if isinstance(theirs, int) and isinstance(ours, int) and theirs != ours:
            raise BertforgeError(f"{directory}: its tokenizer has {theirs:,} ids where config.json's {field} is "
                                 f"{ours:,}: not the tokenizer this model was trained with")


def count_parameters(directory: str) -> tuple[object, int]:
    """The config of `directory` and how many numbers its model holds (a tied weight once): read from
    the weights file's header for our own format, else from the encoder as loaded."""
    config = read_config(directory)
    family = family_of(config)
    safetensors = os.path.exists(os.path.join(directory, native.WEIGHTS))
    if family.native or (family.checkpoint and safetensors):  # a tied weight is stored once
        return config, native.parameter_count(directory)
    if family.checkpoint:  # an old upload's pytorch_model.bin (OPUS-MT's)
        return config, sum(p.numel() for p in read_model(directory, config, family).parameters())
    import warnings

    # The count includes a pooler the checkpoint lacks (masked-LM pretraining writes none), as the
    # encoder AutoModel builds has one; a count reads no values, so their fresh start is no concern.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*: no weights for pooler\.")
        model = load_pretrained(directory, config=config)
    return config, sum(p.numel() for p in model.parameters())
