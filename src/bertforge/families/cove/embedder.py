"""CoVe's embedder: a vector per word from the MT-LSTM (the record's `embedder`)."""

from __future__ import annotations

import numpy as np
import torch

from ...data.padding import pad
from ...errors import BertforgeError
from ...nn.layer_choice import handed_back
from ...progress import progress as progress_bar
from ...quantize import for_inference
from .config import FEATURES


class CoveEmbedder:
    """Word vectors from CoVe (McCann et al., 2017): per word, its fixed GloVe vector, its CoVe
    vector (the MT-LSTM's top layer, both directions) or both concatenated, [GloVe; CoVe], as the
    paper feeds a task model. Words are the model's source words (lowercased when its vectors
    are); the `</s>` the encoder was trained to read last is read, and left out of the output (an
    encoder read from the released CoVe weights was trained without one: its states near the end
    of a text then differ a little from Salesforce's)."""

    FEATURES = FEATURES  # what --features chooses (bertforge embed asks the embedder)
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
        return handed_back(out, pooling, normalize)
