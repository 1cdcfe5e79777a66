"""Hugging Face format: the one key map between our parameter names and HF BERT's, and checkpoint I/O.

A checkpoint directory holds `config.json`, `model.safetensors` and the tokenizer files, exactly as
`transformers` writes them, so that models move both ways. Weights are read with safetensors (or,
for old `pytorch_model.bin` files, `torch.load(weights_only=True)`): loading never runs code.
"""

from __future__ import annotations

import json
import os
import warnings

import torch
from torch import nn

from .atomic import atomic_directory
from .config import BertConfig
from .errors import BertforgeError
from .model import Bert

# (ours, HF) names. `{}` stands for the layer index. HF's names are those of `BertModel`; the
# task and pretraining classes put the encoder under `bert.` and their heads beside it.
EMBEDDING_KEYS = [
    ("embeddings.word.weight", "embeddings.word_embeddings.weight"),
    ("embeddings.position.weight", "embeddings.position_embeddings.weight"),
    ("embeddings.segment.weight", "embeddings.token_type_embeddings.weight"),
    ("embeddings.norm.weight", "embeddings.LayerNorm.weight"),
    ("embeddings.norm.bias", "embeddings.LayerNorm.bias"),
]
LAYER_KEYS = [
    ("layers.{}.attention.out.weight", "encoder.layer.{}.attention.output.dense.weight"),
    ("layers.{}.attention.out.bias", "encoder.layer.{}.attention.output.dense.bias"),
    ("layers.{}.attention_norm.weight", "encoder.layer.{}.attention.output.LayerNorm.weight"),
    ("layers.{}.attention_norm.bias", "encoder.layer.{}.attention.output.LayerNorm.bias"),
    ("layers.{}.ffn_in.weight", "encoder.layer.{}.intermediate.dense.weight"),
    ("layers.{}.ffn_in.bias", "encoder.layer.{}.intermediate.dense.bias"),
    ("layers.{}.ffn_out.weight", "encoder.layer.{}.output.dense.weight"),
    ("layers.{}.ffn_out.bias", "encoder.layer.{}.output.dense.bias"),
    ("layers.{}.ffn_norm.weight", "encoder.layer.{}.output.LayerNorm.weight"),
    ("layers.{}.ffn_norm.bias", "encoder.layer.{}.output.LayerNorm.bias"),
]
POOLER_KEYS = [
    ("pooler.dense.weight", "pooler.dense.weight"),
    ("pooler.dense.bias", "pooler.dense.bias"),
]
# Exception 1: our attention has one fused projection; HF has three. Ours = cat(query, key, value)
# along the output dimension, for both weight and bias.
QKV_OURS = "layers.{}.attention.qkv.{}"
QKV_HF = "encoder.layer.{}.attention.self.{}.{}"
QKV_PARTS = ("query", "key", "value")

# Heads, by the attribute name a composite model gives them (ours relative to the head module).
HEAD_KEYS = {
    "mlm": [
        ("dense.weight", "cls.predictions.transform.dense.weight"),
        ("dense.bias", "cls.predictions.transform.dense.bias"),
        ("norm.weight", "cls.predictions.transform.LayerNorm.weight"),
        ("norm.bias", "cls.predictions.transform.LayerNorm.bias"),
        ("bias", "cls.predictions.bias"),
    ],
    "nsp": [
        ("dense.weight", "cls.seq_relationship.weight"),
        ("dense.bias", "cls.seq_relationship.bias"),
    ],
    # BertForSequenceClassification, BertForTokenClassification, BertForMultipleChoice
    "classifier": [("dense.weight", "classifier.weight"), ("dense.bias", "classifier.bias")],
    # BertForQuestionAnswering: start and end logits
    "qa": [("dense.weight", "qa_outputs.weight"), ("dense.bias", "qa_outputs.bias")],
    # Ours alone: the ELMo-style scalar mix of a frozen-feature classifier.
    "mix": [("weights", "bertforge_mix.weights"), ("gamma", "bertforge_mix.gamma")],
}
# HF prefixes of heads we know but a given model may not use (so they are skipped, not errors).
KNOWN_HEAD_PREFIXES = ("cls.", "classifier.", "qa_outputs.", "bertforge_mix.")

# Exception 2: names written by old (TF-converted) checkpoints, renamed when read.
LEGACY_SUFFIXES = {".gamma": ".weight", ".beta": ".bias"}
# Exception 3: buffers or tied copies HF may store that carry no weights of their own.
DERIVED_KEYS = ("embeddings.position_ids", "cls.predictions.decoder.bias")
TIED_DECODER = "cls.predictions.decoder.weight"  # must equal the word embeddings when present


def encoder_key_map(num_layers: int) -> list[tuple[str, str]]:
    """Every (ours, HF) name pair of an encoder with `num_layers` layers, QKV excepted."""
    pairs = list(EMBEDDING_KEYS)
    for i in range(num_layers):
        pairs += [(ours.format(i), theirs.format(i)) for ours, theirs in LAYER_KEYS]
    return pairs + POOLER_KEYS


def encoder_to_hf(state: dict[str, torch.Tensor], num_layers: int) -> dict[str, torch.Tensor]:
    """Our encoder's state dict -> HF `BertModel` names."""
    out = {theirs: state[ours] for ours, theirs in encoder_key_map(num_layers)}
    for i in range(num_layers):
        for kind in ("weight", "bias"):
            for part, tensor in zip(QKV_PARTS, state[QKV_OURS.format(i, kind)].chunk(3, dim=0)):
                out[QKV_HF.format(i, part, kind)] = tensor
    return out


def encoder_from_hf(tensors: dict[str, torch.Tensor], num_layers: int) -> tuple[dict, set[str]]:
    """HF `BertModel` names -> our encoder's state dict, and the HF keys that were used.

    Keys the encoder needs but `tensors` lacks are simply absent from the result; the caller
    reports them, since only it knows which file they should have been in.
    """
    state, used = {}, set()
    for ours, theirs in encoder_key_map(num_layers):
        if theirs in tensors:
            state[ours] = tensors[theirs]
            used.add(theirs)
    for i in range(num_layers):
        for kind in ("weight", "bias"):
            names = [QKV_HF.format(i, part, kind) for part in QKV_PARTS]
            if all(n in tensors for n in names):
                state[QKV_OURS.format(i, kind)] = torch.cat([tensors[n] for n in names], dim=0)
                used.update(names)
    return state, used


# ---- reading -------------------------------------------------------------------------------------


def read_config(directory: str) -> BertConfig:
    if not os.path.isdir(directory):
        raise BertforgeError(f"{directory}: no such directory")
    return BertConfig.load(os.path.join(directory, "config.json"))


def read_weights(directory: str) -> tuple[dict[str, torch.Tensor], str]:
    """All tensors of a checkpoint directory under canonical HF `BertModel`-relative names.

    Accepts `model.safetensors`, a sharded `model.safetensors.index.json`, or `pytorch_model.bin`
    (read with `weights_only=True`). Returns the tensors and the file they came from.
    """
    candidates = ["model.safetensors", "model.safetensors.index.json", "pytorch_model.bin"]
    found = [name for name in candidates if os.path.exists(os.path.join(directory, name))]
    if not found:
        raise BertforgeError(f"{directory}: no weights file (expected one of {', '.join(candidates)})")
    path = os.path.join(directory, found[0])
    if found[0] == "model.safetensors":
        tensors = _read_safetensors(path)
    elif found[0].endswith(".index.json"):
        with open(path, encoding="utf-8") as f:
            shards = sorted(set(json.load(f).get("weight_map", {}).values()))
        tensors = {}
        for shard in shards:
            tensors.update(_read_safetensors(os.path.join(directory, shard)))
    else:
        try:
            tensors = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # unpickling errors come in many types
            raise BertforgeError(f"{path}: cannot be read safely as weights ({e})") from None
    return canonical_names(tensors, path), path


def _read_safetensors(path: str) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    try:
        return load_file(path)
    except FileNotFoundError:
        raise BertforgeError(f"{path}: no such file") from None
    except Exception as e:  # SafetensorError and OSError: truncated, corrupt or unreadable
        raise BertforgeError(f"{path}: corrupted or truncated safetensors file ({e})") from None


def canonical_names(tensors: dict[str, torch.Tensor], source: str) -> dict[str, torch.Tensor]:
    """Strip the `bert.` prefix, rename legacy gamma/beta, drop derived keys, check the tied decoder."""
    out = {}
    for key, tensor in tensors.items():
        key = key.removeprefix("bert.")
        for old, new in LEGACY_SUFFIXES.items():
            if key.endswith(old) and "LayerNorm" in key:
                key = key[: -len(old)] + new
        if key not in DERIVED_KEYS:
            out[key] = tensor
    decoder = out.pop(TIED_DECODER, None)
    word = out.get("embeddings.word_embeddings.weight")
    if decoder is not None and word is not None and not torch.equal(decoder, word):
        raise BertforgeError(f"{source}: the MLM decoder is not tied to the word embeddings; "
                             "untied decoders are not supported")
    return out


def load_pretrained(directory: str, cls=Bert, device: str | torch.device = "cpu", new_heads: bool = False,
                    **options):
    """Load any HF BERT directory (`BertModel`, `BertForPreTraining`, task models) as `cls`.

    `cls` is `Bert` (the encoder alone: heads in the checkpoint are skipped) or a composite with
    the encoder at `.bert` and heads named as in `HEAD_KEYS` (e.g. `BertPretraining`), whose heads
    must be in the checkpoint unless `new_heads` allows fresh ones. A checkpoint without a pooler
    (HF's `BertForMaskedLM` and token-level task models drop it) gets a freshly initialised one,
    with a warning. `options` go to `cls` (e.g. `nsp=False`).
    """
    config = read_config(directory)
    model = cls(config, **options)
    load_into(model, directory, new_heads, config)
    return model.to(device)


def load_into(model: nn.Module, directory: str, new_heads: bool = False, config: BertConfig | None = None,
              heads: bool = True) -> None:
    """Copy the weights of an HF BERT directory into an existing `model` (see `load_pretrained`).
    With `heads=False` only the encoder is read: a new task starts with a fresh head even when the
    checkpoint has one (of another task, or with other labels)."""
    config = config or read_config(directory)
    tensors, source = read_weights(directory)
    _check_tokenizer(directory, config)
    state, used = encoder_from_hf(tensors, config.num_hidden_layers)
    allowed_missing = {"pooler.dense.weight", "pooler.dense.bias"}
    fresh = set()  # new task heads: expected to be missing, so no warning
    if not isinstance(model, Bert):
        state = {"bert." + k: v for k, v in state.items()}
        allowed_missing = {"bert." + k for k in allowed_missing}
        for name, pairs in HEAD_KEYS.items():
            if getattr(model, name, None) is None:
                continue
            for ours, theirs in pairs:
                if theirs in tensors and heads:
                    state[f"{name}.{ours}"] = tensors[theirs]
                    used.add(theirs)
                elif new_heads:
                    fresh.add(f"{name}.{ours}")
    unexpected = [k for k in tensors if k not in used and not k.startswith(KNOWN_HEAD_PREFIXES)]
    load_state(model, state, source, unexpected, allowed_missing | fresh, quiet=fresh)


def load_state(module: nn.Module, state: dict[str, torch.Tensor], source: str,
               unexpected: list[str] = (), allowed_missing: set[str] = frozenset(),
               quiet: set[str] = frozenset()) -> None:
    """Copy `state` into `module`, failing with every missing, unexpected and mis-shaped key named."""
    expected = module.state_dict()
    problems = []
    missing = [k for k in expected if k not in state and k not in allowed_missing]
    if missing:
        problems.append(f"missing weights: {_names(missing)}")
    if unexpected:
        problems.append(f"unexpected weights: {_names(unexpected)}")
    shapes = [f"{k} {tuple(v.shape)} (the model needs {tuple(expected[k].shape)})"
              for k, v in state.items() if k in expected and v.shape != expected[k].shape]
    if shapes:
        problems.append(f"wrong shapes: {_names(shapes)}")
    if problems:
        raise BertforgeError(f"{source}: " + "; ".join(problems))
    skipped = [k for k in expected if k not in state and k not in quiet]
    if skipped:
        warnings.warn(f"{source}: no weights for {', '.join(skipped)}; they keep their fresh initialisation",
                      stacklevel=3)
    with torch.no_grad():
        for k, v in state.items():
            expected[k].copy_(v)


def _names(keys: list[str], limit: int = 12) -> str:
    shown = ", ".join(keys[:limit])
    return shown + (f" and {len(keys) - limit} more" if len(keys) > limit else "")


def _check_tokenizer(directory: str, config: BertConfig) -> None:
    """A tokenizer whose ids run past the embedding matrix would fail later, deep in a forward pass."""
    vocab_txt = os.path.join(directory, "vocab.txt")
    if not os.path.exists(vocab_txt):
        return
    with open(vocab_txt, encoding="utf-8", errors="replace") as f:
        size = sum(1 for _ in f)
    # A model may have more rows than the tokenizer has tokens (vocabularies padded to a multiple
    # of 64 for speed); the reverse is an error.
    if size > config.vocab_size:
        raise BertforgeError(f"{vocab_txt}: {size} tokens, but {os.path.join(directory, 'config.json')} "
                             f"has vocab_size={config.vocab_size}; the tokenizer does not match the model")


# ---- writing -------------------------------------------------------------------------------------


def save_pretrained(model: nn.Module, directory: str, tokenizer=None) -> None:
    """Write `model` as an HF checkpoint directory, atomically (a half-written directory never
    takes the place of a good one).

    `model` is a `Bert` encoder (saved as `BertModel`) or a composite with an encoder at `.bert`,
    head modules named as in `HEAD_KEYS`, and an `architecture` attribute naming the HF class.
    """
    tensors, config = to_hf(model)
    check_vocab_fits(tokenizer, config)
    with atomic_directory(directory) as tmp:
        write_pretrained(tmp, tensors, config, tokenizer)


def check_vocab_fits(tokenizer, config: BertConfig) -> None:
    if tokenizer is not None and tokenizer.vocab_size > config.vocab_size:
        raise BertforgeError(f"the tokenizer has {tokenizer.vocab_size} tokens but the model only "
                             f"vocab_size={config.vocab_size}")


def write_pretrained(directory: str, tensors: dict[str, torch.Tensor], config: BertConfig, tokenizer=None) -> None:
    """Write HF-named `tensors`, `config` and the tokenizer into an existing directory."""
    from safetensors.torch import save_file

    config.save(os.path.join(directory, "config.json"))
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}
    save_file(tensors, os.path.join(directory, "model.safetensors"), metadata={"format": "pt"})
    if tokenizer is not None:
        tokenizer.save_pretrained(directory)


def to_hf(model: nn.Module) -> tuple[dict[str, torch.Tensor], BertConfig]:
    """The HF-named tensors and config of `model` (see `save_pretrained`)."""
    if isinstance(model, Bert):
        config = BertConfig(**{**model.config.to_dict(), "architectures": ["BertModel"]})
        return encoder_to_hf(model.state_dict(), config.num_hidden_layers), config
    encoder = model.bert
    config = BertConfig(**{**encoder.config.to_dict(), "architectures": [model.architecture]})
    tensors = {"bert." + k: v for k, v in encoder_to_hf(encoder.state_dict(), config.num_hidden_layers).items()}
    for name, pairs in HEAD_KEYS.items():
        head = getattr(model, name, None)
        if head is not None:
            head_state = head.state_dict()
            tensors.update({theirs: head_state[ours] for ours, theirs in pairs})
    return tensors, config
