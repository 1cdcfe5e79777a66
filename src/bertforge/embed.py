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
from .families import family_of, resolve
from .checkpoint import read_config
from .load import load
from .paths import inside
from .progress import progress as progress_bar
from .quantize import for_inference
from .tasks.common import in_length_order, token_types
from .data.tokenizer import Tokenizer
from .training.allocator import reuse_freed_memory

LAYER_CHOICES = ("last", "sum-last-4", "concat-last-4", "all")
POOLING = ("mean", "cls", "tokens")


def check_layers(layers: str | int, states: int | None = None) -> str | None:
    """`layers` checked before any text is run: a name this module knows, and with `states` (how many
    outputs the model has: its embeddings' and each layer's), a layer that exists. Returns what to
    tell the user when the last four are asked of a model with fewer outputs: all of them are
    taken then (a 2-layer model's 3), which is another thing than four."""
    if isinstance(layers, str) and layers.lstrip("-").isdigit():
        layers = int(layers)
    if not isinstance(layers, int) and layers not in LAYER_CHOICES:
        raise BertforgeError(f"layers must be a layer number or one of {', '.join(LAYER_CHOICES)}, got {layers!r}")
    if states is None:
        return None
    if isinstance(layers, int) and not -states <= layers < states:
        raise BertforgeError(f"layer {layers} does not exist: the model has layers 0 (embeddings) to {states - 1}")
    if layers in ("sum-last-4", "concat-last-4") and states < 4:
        return (f"{layers}: the model has {states} outputs (its embeddings' and {states - 1} layers'), so all "
                f"{states} are {'summed' if layers == 'sum-last-4' else 'concatenated'}")
    return None


def combine(hidden_states: tuple[torch.Tensor, ...], layers: str | int) -> torch.Tensor:
    """One tensor from the embedding output and every layer's output (L + 1 tensors of (B, T, H)):
    one of them, the last four summed or concatenated (all, if there are fewer), or their mean."""
    check_layers(layers, len(hidden_states))
    if isinstance(layers, int) or layers.lstrip("-").isdigit():
        return hidden_states[int(layers)]
    if layers == "last":
        return hidden_states[-1]
    if layers == "sum-last-4":
        return torch.stack(hidden_states[-4:]).sum(0)
    if layers == "concat-last-4":
        return torch.cat(hidden_states[-4:], dim=-1)  # (B, T, 4H)
    return torch.stack(hidden_states).mean(0)  # all


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
                        precision: str = "fp32") -> "Embedder | ELMoEmbedder":
        """The encoder of any HF BERT-family directory (heads are left out), or an ELMo biLM's.
        `precision`: fp32; bf16 (the matrix products in bf16: about 1.7x faster on a CPU with
        AVX512-BF16 or a recent GPU; vectors then differ from fp32 ones by ~1e-2 at most); int8
        (the linear layers quantized, CPU only; see `bertforge.quantize`). Vectors are fp32 always."""
        config = read_config(directory)
        family = family_of(config)
        family.supports("embed", directory)
        return resolve(family.embedder).load(directory, config, device, precision)

    @classmethod
    def load(cls, directory: str, config, device: str | torch.device = "cpu", precision: str = "fp32") -> "Embedder":
        """A Transformer's encoder (heads in the checkpoint are left out, and so is the pooler, which
        no pooling here reads: a checkpoint without one, as masked-LM pretraining writes, is not
        warned of), with the settings of a sentence-transformers directory."""
        loaded = load(directory, device, model=resolve(family_of(config).encoder), config=config, pooler=False)
        return cls(loaded.model, loaded.tokenizer, **sentence_transformers_settings(directory), precision=precision)

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
        if normalize:  # sentence-transformers' Normalize: v / max(|v|, 1e-12), per vector
            out = [v / np.maximum(np.linalg.norm(v, axis=-1, keepdims=True), 1e-12) for v in out]
        return out if pooling == "tokens" else np.stack(out)


class ELMoEmbedder:
    """Word vectors from an ELMo biLM (Peters et al., 2018). Each text is split into words as the
    model's vocabulary splits them (cased) and read as one sentence between `<S>` and `</S>`, which
    are left out of the output, as AllenNLP's; every layer is [forward; backward], 2 x the
    projection wide: layer 0 the character-based word vector (twice), then each LSTM layer.
    `layers="all"` (the default) is their average: the scalar mix before a task has learned one."""

    def __init__(self, model, vocab, max_length: int | None = None, precision: str = "fp32"):
        self.model, self.vocab, self.max_length = model.eval(), vocab, max_length
        self.pooling, self.normalize = "mean", False
        self.autocast = for_inference(self.model, precision)

    @classmethod
    def load(cls, directory: str, config, device: str | torch.device = "cpu", precision: str = "fp32") -> "ELMoEmbedder":
        from .models.elmo import ELMoLanguageModel

        # fine-tuned: the biLM inside the task model (its task's model, by default), frozen, so the pretrained one
        loaded = load(directory, device, model=None if config.bertforge_task else ELMoLanguageModel, config=config)
        return cls(loaded.model.backbone, loaded.tokenizer, precision=precision)

    @property
    def states(self) -> int:
        """The character-based word vectors, then each LSTM layer's."""
        return self.model.config.n_layers + 1

    def tokens(self, texts: list[str], max_length: int | None = None) -> list[list[str]]:
        limit = max_length or self.max_length
        return [self.vocab.tokenize(t)[:limit] for t in texts]

    def encode(self, texts: list[str], layers: str | int = "all", pooling: str | None = None, batch_size: int = 64,
               max_length: int | None = None, *, normalize: bool | None = None,
               progress: bool = False) -> list[np.ndarray] | np.ndarray:
        """Vectors for `texts`, as `Embedder.encode`: mean over the words, or `tokens` (one vector
        per word). `cls` has no meaning here (there is no [CLS])."""
        from .data.words import BOS_WORD, EOS_WORD, word_characters

        pooling = pooling or self.pooling
        if pooling not in ("mean", "tokens"):
            raise BertforgeError(f"an ELMo model pools by mean or gives tokens, not {pooling!r}")
        check_layers(layers, self.states)
        words = self.tokens(texts, max_length)
        config = self.model.config
        device = next(self.model.parameters()).device
        out = [None] * len(texts)
        bar = progress_bar(total=len(texts), desc="embed", unit="texts", disable=not progress)
        with torch.inference_mode(), self.autocast:
            for rows in in_length_order(words, batch_size):
                bar.update(len(rows))
                width = max(len(words[i]) for i in rows) + 2
                chars = torch.zeros(len(rows), width, config.max_characters_per_token, dtype=torch.long)
                for k, i in enumerate(rows):
                    sentence = [BOS_WORD, *words[i], EOS_WORD]
                    chars[k, :len(sentence)] = torch.tensor([word_characters(w, config.max_characters_per_token)
                                                             for w in sentence])
                mask = chars[..., 0] > 0  # (B, T): every real word starts with its begin-of-word mark
                vectors = combine(self.model(chars.to(device), mask.to(device)), layers).float()  # (B, T, D)
                for k, i in enumerate(rows):
                    n = len(words[i])
                    word_vectors = vectors[k, 1:n + 1]  # without <S> and </S>
                    out[i] = (word_vectors if pooling == "tokens" else word_vectors.mean(0)).cpu().numpy()
        bar.close()
        if normalize:
            out = [v / np.maximum(np.linalg.norm(v, axis=-1, keepdims=True), 1e-12) for v in out]
        return out if pooling == "tokens" else np.stack(out)


class CoveEmbedder:
    """Word vectors from CoVe (McCann et al., 2017): per word, its fixed GloVe vector, its CoVe
    vector (the MT-LSTM's top layer, both directions) or both concatenated, [GloVe; CoVe], as the
    paper feeds a task model. Words are the model's source words (lowercased when its vectors
    are); the `</s>` the encoder was trained to read last is read, and left out of the output (an
    encoder read from the released CoVe weights was trained without one: its states near the end
    of a text then differ a little from Salesforce's)."""

    FEATURES = ("glove", "cove", "glove+cove")
    # no layers to choose from: CoVe is the encoder's top layer, beside the word vectors it reads
    LAYERS_REFUSED = ("--layers is for BERT-family and ELMo models; a CoVe model's vectors are its top layer "
                      "and its word vectors, chosen by --features (glove, cove, glove+cove)")

    def __init__(self, model, tokenizer, max_length: int | None = None, precision: str = "fp32"):
        self.model, self.tokenizer, self.max_length = model.eval(), tokenizer, max_length
        self.pooling, self.normalize = "mean", False
        self.autocast = for_inference(self.model, precision)

    @classmethod
    def load(cls, directory: str, config, device: str | torch.device = "cpu", precision: str = "fp32") -> "CoveEmbedder":
        loaded = load(directory, device, config=config)  # the translator, or a task model over CoVe
        return cls(loaded.model, loaded.tokenizer, precision=precision)

    @property
    def states(self) -> int:
        return 2  # GloVe, CoVe: chosen by `features`, not by layer

    def tokens(self, texts: list[str], max_length: int | None = None) -> list[list[str]]:
        limit = max_length or self.max_length
        return [self.tokenizer.source_words(t)[:limit] for t in texts]

    def encode(self, texts: list[str], layers: str | int = "last", pooling: str | None = None, batch_size: int = 64,
               max_length: int | None = None, *, normalize: bool | None = None, progress: bool = False,
               features: str = "glove+cove") -> list[np.ndarray] | np.ndarray:
        """Vectors for `texts` as `Embedder.encode` gives them (mean over the words, or `tokens`: one
        per word), of the `features` asked: glove (word_dim wide), cove (2 x the encoder's width) or
        glove+cove. `layers` has no choice: CoVe is the top layer ("last"; anything else is refused)."""
        from .translate import pad

        if layers != "last":
            raise BertforgeError(self.LAYERS_REFUSED)

        pooling = pooling or self.pooling
        if pooling not in ("mean", "tokens"):
            raise BertforgeError(f"a CoVe model pools by mean or gives tokens, not {pooling!r}")
        if features not in self.FEATURES:
            raise BertforgeError(f"features must be one of {', '.join(self.FEATURES)}, got {features!r}")
        words = self.tokens(texts, max_length)
        ids = [[self.tokenizer.index.get(w, 1) for w in row] + [0] for row in words]  # </s> as in training
        # the translator's MT-LSTM, or a fine-tuned task model's (its backbone)
        encoder = self.model.backbone if hasattr(self.model, "backbone") else self.model.encoder
        device = next(self.model.parameters()).device
        out = [None] * len(texts)
        bar = progress_bar(total=len(texts), desc="embed", unit="texts", disable=not progress)
        with torch.inference_mode(), self.autocast:
            for start in range(0, len(ids), batch_size):
                rows = list(range(start, min(start + batch_size, len(ids))))
                source, mask = pad([ids[i] for i in rows], self.tokenizer.pad_id, device)
                parts = {"glove": encoder.vectors(source.masked_fill(~mask, 0)), "cove": encoder(source, mask)}
                vectors = torch.cat([parts[f] for f in features.split("+")], dim=-1).float()  # (B, S, D)
                for k, i in enumerate(rows):
                    n = len(words[i])
                    out[i] = vectors[k, :n].cpu().numpy() if pooling == "tokens" else \
                        vectors[k, :max(n, 1)].mean(0).cpu().numpy()
                bar.update(len(rows))
        bar.close()
        if normalize:
            out = [v / np.maximum(np.linalg.norm(v, axis=-1, keepdims=True), 1e-12) for v in out]
        return out if pooling == "tokens" else np.stack(out)


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
