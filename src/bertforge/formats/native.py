"""bertforge's own checkpoint format, for families `transformers` has no class for (AWD-LSTM, ELMo:
those whose record says `native`).

The same shape as an HF directory: `config.json` (with its `model_type`), `model.safetensors`
holding the module's own parameter names (but the encoder's under `bert.`, see `FILE_PREFIX`), and
the vocabulary. A weight tied to another (AWD-LSTM's decoder, which is its embedding matrix) is
stored once and tied again on loading. Reading goes through safetensors only: nothing in a
checkpoint can execute code.
"""

from __future__ import annotations

import math
import os

import torch
from torch import nn

from ..checkpoint import read_config
from ..families import family_of
from ..errors import BertforgeError
from .tensors import check_finite, load_state, read_safetensors

WEIGHTS = "model.safetensors"
# The encoder's attribute was `bert` when this format was defined and is `backbone` now; files keep
# `bert.`, so that a file written before the rename and one written after are the same bytes and
# either loads. Here, and only here, do the two names meet.
FILE_PREFIX, MODULE_PREFIX = "bert.", "backbone."


def file_name(name: str) -> str:
    """A parameter's name in the module -> its name in the file."""
    return FILE_PREFIX + name.removeprefix(MODULE_PREFIX) if name.startswith(MODULE_PREFIX) else name


def module_name(name: str) -> str:
    """A tensor's name in the file -> the module's name for it."""
    return MODULE_PREFIX + name.removeprefix(FILE_PREFIX) if name.startswith(FILE_PREFIX) else name


def is_native(model: nn.Module) -> bool:
    """Whether `model` (an objective or task model, or a bare encoder) is of a family saved in this format."""
    config = getattr(getattr(model, "backbone", model), "config", None)
    return config is not None and family_of(config).native


def _tied(model: nn.Module) -> set[str]:
    """Names of parameters that are another parameter under a second name (stored once)."""
    seen, tied = set(), set()
    for name, tensor in model.state_dict(keep_vars=True).items():
        if id(tensor) in seen:
            tied.add(name)
        seen.add(id(tensor))
    return tied


def write(model: nn.Module, directory: str, tokenizer=None) -> None:
    """Write `model` (an objective or model whose encoder's config is native) into an existing directory."""
    from safetensors.torch import save_file

    config = model.backbone.config
    saved = type(config)(**{**config.to_dict(), "architectures": [model.architecture]})
    saved.save(os.path.join(directory, "config.json"))
    tied = _tied(model)
    tensors = {file_name(k): v.detach().to("cpu").contiguous() for k, v in model.state_dict().items() if k not in tied}
    save_file(tensors, os.path.join(directory, WEIGHTS), metadata={"format": "pt"})
    if tokenizer is not None:
        tokenizer.save_pretrained(directory)


def check_words(directory: str, config):
    """A word vocabulary of another size than the model's softmax and embeddings would index past
    them, or leave rows that mean nothing: refused, naming the file. Returns the vocabulary read
    (None where the directory has none), so that a caller reads it once."""
    path = os.path.join(directory, "words.json")
    if not os.path.exists(path):
        return None
    from ..data.words import WordVocab

    vocab = WordVocab.from_pretrained(directory)
    if vocab.vocab_size != config.vocab_size:
        raise BertforgeError(f"{path}: {vocab.vocab_size:,} words, but {os.path.join(directory, 'config.json')} has "
                             f"vocab_size={config.vocab_size:,}; the vocabulary does not belong to this model")
    return vocab


def load(model: nn.Module, directory: str, config, words_checked: bool = False) -> None:
    """Copy the weights written by `write` into `model`, naming every missing, unexpected or
    mis-shaped tensor. `config`: the directory's (`checkpoint.read_config`), whose vocabulary size
    its words must have (`words_checked`: the caller read and checked them already)."""
    if not words_checked:
        check_words(directory, config)
    path = os.path.join(directory, WEIGHTS)
    if not os.path.exists(path):
        raise BertforgeError(f"{path}: no such file")
    stored = read_safetensors(path)
    tensors = {module_name(k): v for k, v in stored.items()}
    check_finite(stored, path)
    tied = _tied(model)
    unexpected = [k for k in stored if module_name(k) not in model.state_dict()]  # named as in the file
    load_state(model, tensors, path, unexpected, allowed_missing=tied, quiet=tied)


def load_encoder(model: nn.Module, directory: str, config, into: nn.Module | None = None) -> None:
    """Only the encoder's weights (`bert.` in the file) of the model in `directory` (whose config is
    `config`) into `model.backbone` (or `into`): a new task starts from a language model with a fresh head."""
    check_words(directory, config)
    path = os.path.join(directory, WEIGHTS)
    if not os.path.exists(path):
        raise BertforgeError(f"{path}: no such file")
    tensors = {k.removeprefix(FILE_PREFIX): v for k, v in read_safetensors(path).items() if k.startswith(FILE_PREFIX)}
    check_finite(tensors, path)
    target = model.backbone if into is None else into
    unexpected = [k for k in tensors if k not in target.state_dict()]
    tied = _tied(target)  # stored once by `write`, tied again here
    load_state(target, tensors, path, unexpected, allowed_missing=tied, quiet=tied)


def parameter_count(directory: str) -> int:
    """How many numbers the checkpoint holds (a tied weight once), read from its header alone."""
    from safetensors import safe_open

    path = os.path.join(directory, WEIGHTS)
    try:
        with safe_open(path, "pt") as f:
            return sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())
    except FileNotFoundError:
        raise BertforgeError(f"{path}: no such file") from None
    except Exception as e:  # SafetensorError: a header truncated or corrupt
        raise BertforgeError(f"{path}: corrupted or truncated safetensors file ({e})") from None


def check_native(config, directory: str):
    """`config` (read by `checkpoint.read_config`), refused when its checkpoint is not in this format."""
    if not family_of(config).native:
        raise BertforgeError(f"{directory}: a {config.model_type} checkpoint, which is saved in transformers' format")
    return config


def load_model(build, directory: str, device: str | torch.device = "cpu", config=None,
               backbone: bool = False, words_checked: bool = False) -> nn.Module:
    """`build(config)` (a model class, or a task's builder) from the directory's config (`config`
    when already read), loaded with its weights; with `backbone`, the model is what the saved
    objective held at `.backbone` (a translation family's encoder-decoder), read on its own."""
    config = read_config(directory) if config is None else config
    model = build(config)
    if backbone:
        load_encoder(model, directory, config, into=model)
    else:
        load(model, directory, config, words_checked)
    return model.to(device)
