"""What turns a model's states into vectors: the layer choices every embedder shares, and the
embedders of the families whose vectors are per word (ELMo's biLM, CoVe's MT-LSTM; named by their
records' `embedder`). The Transformer families' `Embedder` is in embed.py. An embedder class says
what `load` should read a directory as (`load_options`) and is made from what it read
(`from_loaded`), so that this module needs no loader and no registry."""

from __future__ import annotations

import numpy as np
import torch

from .data.padding import in_length_order, pad
from .data.words import BOS_WORD, EOS_WORD, word_characters
from .errors import BertforgeError
from .models.elmo import ELMoLanguageModel
from .progress import progress as progress_bar
from .quantize import for_inference

LAYER_CHOICES = ("last", "sum-last-4", "concat-last-4", "all")


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

    @staticmethod
    def load_options(config, family) -> dict:
        """What `load` reads the directory as: a fine-tuned model's task model (its biLM is inside,
        frozen, so the pretrained one), else the biLM with its language-model heads."""
        return {"model": None if config.bertforge_task else ELMoLanguageModel}

    @classmethod
    def from_loaded(cls, loaded, precision: str = "fp32") -> "ELMoEmbedder":
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

    @staticmethod
    def load_options(config, family) -> dict:
        return {}  # the translator, or a task model over CoVe, as the directory holds it

    @classmethod
    def from_loaded(cls, loaded, precision: str = "fp32") -> "CoveEmbedder":
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
