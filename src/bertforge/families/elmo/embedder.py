"""ELMo's embedder: a vector per word from the biLM's layers (the record's `embedder`)."""

from __future__ import annotations

import numpy as np
import torch

from ...data.padding import in_length_order
from ...data.words import BOS_WORD, EOS_WORD, word_characters
from ...errors import BertforgeError
from ...nn.layer_choice import check_layers, combine, handed_back
from ...progress import progress as progress_bar
from ...quantize import for_inference
from .model import ELMoLanguageModel


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
        return handed_back(out, pooling, normalize)
