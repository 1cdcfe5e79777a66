"""Contextual embeddings: vectors per token or per sentence from a chosen layer, the sum or the
concatenation of the last four layers (the BERT paper's feature-based NER), or a learned
ELMo-style scalar mix of all layers."""

from __future__ import annotations

import contextlib
import json
import os
import sys

import numpy as np
import torch

from .atomic import atomic_file
from .config.base import _read_json
from .errors import BertforgeError
from .checkpoint import read_family_and_config
from .data.padding import in_length_order
from .data.tokenizer import Tokenizer
# the layer choices are every embedder's, named here as they always were
from .nn.layer_choice import LAYER_CHOICES, check_layers, combine, handed_back  # noqa: F401
from .families import Family, resolve
from .load import load
from .nn.layers import token_types
from .paths import inside
from .progress import progress as progress_bar
from .quantize import for_inference
from .training.allocator import reuse_freed_memory

POOLING = ("mean", "cls", "tokens")


class Embedder:
    """An encoder and its tokenizer, loaded once, turning texts into vectors (what
    sentence-transformers' `SentenceTransformer.encode` is to its users).

    `pooling`, `normalize` and `max_length` are the defaults of `encode`: from a sentence-transformers
    directory (its `modules.json`: the Pooling module's mode, a Normalize module, and
    `sentence_bert_config.json`'s `max_seq_length`), so that its vectors are that library's; else
    mean pooling, no normalisation, the model's positions.
    """

    def __init__(self, model, tokenizer: Tokenizer, pooling: str = "mean", normalize: bool = False,
                 max_length: int | None = None, precision: str = "fp32"):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.pooling, self.normalize, self.max_length = pooling, normalize, max_length
        self.autocast = for_inference(self.model, precision)

    @classmethod
    def from_pretrained(cls, directory: str, device: str | torch.device = "cpu",
                        precision: str = "fp32") -> "Embedder":
        """The encoder of any HF BERT-family directory (heads are left out), or an ELMo biLM's.
        `precision`: fp32; bf16 (the matrix products in bf16: about 1.7x faster on a CPU with
        AVX512-BF16 or a recent GPU; vectors then differ from fp32 ones by ~1e-2 at most); int8
        (the linear layers quantized, CPU only; see `bertforge.quantize`). Vectors are fp32 always."""
        family, config = read_family_and_config(directory)
        family.supports("embed", directory)
        return load_embedder(directory, config, family, device, precision)

    @staticmethod
    def load_options(config, family: Family) -> dict:
        """What `load` reads the directory as: a Transformer's encoder (heads in the checkpoint are
        left out, and so is the pooler, which no pooling here reads: a checkpoint without one, as
        masked-LM pretraining writes, is not warned of)."""
        return {"model": family.build_encoder, "pooler": False}

    @classmethod
    def from_loaded(cls, loaded, precision: str = "fp32") -> "Embedder":
        """The embedder of what `load` read, with the settings of a sentence-transformers directory."""
        return cls(loaded.model, loaded.tokenizer, **sentence_transformers_settings(loaded.directory),
                   precision=precision)

    @property
    def states(self) -> int:
        """How many outputs `layers` chooses from: the embeddings' and each layer's."""
        return self.model.config.num_hidden_layers + 1

    def tokens(self, texts: list[str], max_length: int | None = None) -> list[list[str]]:
        """The tokens `encode` gives vectors for, with `pooling="tokens"`."""
        limit = max_length or self.max_length or self.model.config.max_length
        return [e.tokens for e in self.tokenizer.encode_batch(texts, max_length=limit)]

    def encode(self, texts: list[str], layers: str | int = "last", pooling: str | None = None, batch_size: int = 128,
               max_length: int | None = None, *, normalize: bool | None = None,
               progress: bool = False) -> list[np.ndarray] | np.ndarray:
        """Vectors for `texts`, in the precision the embedder was loaded with, from `layers` (see
        `combine`: a model with fewer than four outputs gives all of them to the last-four choices).

        `pooling`: `mean` over the real tokens, `cls` (the [CLS] vector), both giving an (N, D) array;
        or `tokens`, giving one (tokens, D) array per text, special tokens included. `normalize`
        scales each vector to length 1. Unset, both (and `max_length`) are the embedder's defaults.
        Texts are batched in order of length, so little is computed on padding.
        `progress` shows a bar over the batches (worth it for many thousands of texts).
        """
        pooling = pooling or self.pooling
        normalize = self.normalize if normalize is None else normalize
        max_length = max_length or self.max_length
        if pooling not in POOLING:
            raise BertforgeError(f"pooling must be one of {', '.join(POOLING)}, got {pooling!r}")
        check_layers(layers, self.states)
        reuse_freed_memory()
        model, tokenizer = self.model, self.tokenizer
        device = next(model.parameters()).device
        encodings = tokenizer.encode_batch(texts, max_length=max_length or model.config.max_length)
        out = [None] * len(texts)
        bar = progress_bar(total=len(texts), desc="embed", unit="texts", disable=not progress)
        with torch.inference_mode(), self.autocast:
            for rows in in_length_order(encodings, batch_size):
                bar.update(len(rows))
                batch = {k: v.to(device) for k, v in tokenizer.pad([encodings[i] for i in rows]).items()}
                batch["token_type_ids"] = token_types(model, batch["token_type_ids"])
                if layers == "last":  # no need to keep every layer's states
                    vectors = model(**batch).last_hidden_state.float()  # (B, T, D)
                else:
                    vectors = combine(model(**batch, output_hidden_states=True).hidden_states, layers).float()
                if pooling == "tokens":
                    for k, i in enumerate(rows):
                        out[i] = vectors[k, :len(encodings[i])].cpu().numpy()
                    continue
                if pooling == "cls":
                    pooled = vectors[:, 0]
                else:
                    mask = batch["attention_mask"].unsqueeze(-1).to(vectors.dtype)
                    pooled = (vectors * mask).sum(1) / mask.sum(1)  # (B, D)
                for i, vector in zip(rows, pooled.cpu().numpy()):
                    out[i] = vector
        bar.close()
        return handed_back(out, pooling, normalize)


def load_embedder(directory: str, config, family: Family, device: str | torch.device = "cpu",
                  precision: str = "fp32", cls=None):
    """The embedder of `directory` (its config and family's record already read): `cls`, else the
    class the family's record names (`embedder`), else the Transformer's `Embedder`."""
    cls = cls or (resolve(family.embedder) if family.embedder else Embedder)
    loaded = load(directory, device, config=config, family=family, **cls.load_options(config, family))
    return cls.from_loaded(loaded, precision)


def check_output(path: str, pooling: str | None = None) -> None:
    """The output's name, before any work: .npy (sentence vectors, one array) or .jsonl (any)."""
    if not path.endswith((".npy", ".jsonl")):
        raise BertforgeError(f"{path}: vectors are written as .npy (sentence vectors) or .jsonl; name the file so")
    if pooling == "tokens" and path.endswith(".npy"):
        raise BertforgeError(f"{path}: token vectors differ in length per text, so they cannot be one .npy array: "
                             "write them as .jsonl")


SBERT_ENCODER = "Transformer"  # sentence-transformers' name for the module that holds the encoder


def sentence_transformers_settings(directory: str) -> dict:
    """The pooling, normalisation and length a sentence-transformers directory declares (empty for
    any other directory). Only what this embedder can do is read; a module it cannot apply (a Dense
    layer, max pooling) is an error rather than silently different vectors."""
    path = os.path.join(directory, "modules.json")
    if not os.path.exists(path):
        return {}
    modules = _read_json(path)
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise BertforgeError(f"{path}: not a list of modules")
    settings = {}
    for module in modules:
        kind = str(module.get("type", "")).rsplit(".", 1)[-1]
        folder = inside(directory, module.get("path", ""), path)  # a module's files stay in the model's folder
        if kind == SBERT_ENCODER:
            config = os.path.join(folder, "sentence_bert_config.json")
            if os.path.exists(config):
                settings["max_length"] = _read_json(config).get("max_seq_length")
        elif kind == "Pooling":
            modes = [k for k, v in _read_json(os.path.join(folder, "config.json")).items()
                     if k.startswith("pooling_mode") and v]
            known = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls"}
            if len(modes) != 1 or modes[0] not in known:
                raise BertforgeError(f"{path}: pooling {', '.join(modes)} is not one bertforge applies (mean or cls)")
            settings["pooling"] = known[modes[0]]
        elif kind == "Normalize":
            settings["normalize"] = True
        else:
            raise BertforgeError(f"{path}: a {kind} module, which bertforge does not apply; its vectors would differ")
    return settings


def embed(directory: str, texts: list[str], layers: str | int = "last", pooling: str | None = None,
          batch_size: int = 128, max_length: int | None = None, precision: str = "fp32",
          device: str | torch.device = "cpu", progress: bool = False) -> list[np.ndarray] | np.ndarray:
    """Vectors for `texts` from the encoder in `directory` (any HF BERT directory); see `Embedder.encode`."""
    return Embedder.from_pretrained(directory, device, precision).encode(texts, layers, pooling, batch_size,
                                                                         max_length, progress=progress)


def write_embeddings(path: str | None, vectors, texts: list[str], tokens: list[list[str]] | None = None) -> None:
    """`.npy` for sentence vectors (N, D); `.jsonl`, one object per text {text, vector[, tokens]};
    any other name is refused. `path` None: JSON lines on standard output."""
    if path is not None:
        check_output(path, "tokens" if isinstance(vectors, list) else None)
    if path is not None and path.endswith(".npy"):
        with atomic_file(path, "wb") as f:
            np.save(f, vectors)
        return
    with atomic_file(path) if path is not None else contextlib.nullcontext(sys.stdout) as f:
        for i, text in enumerate(texts):
            record = {"text": text, "vector": np.asarray(vectors[i]).round(6).tolist()}
            if tokens is not None:
                record["tokens"] = tokens[i]
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
