"""CoVe's two vocabularies: words on the source side, one per word vector (CoVe's encoder reads
fixed GloVe vectors, so its source vocabulary is theirs), and the sub-words of a
`TranslationTokenizer` learned on the target side.

Source ids: `</s>` 0 (ending every source, as the Transformer's), `<unk>` 1, then the kept words
in the vector file's order; both specials read zero vectors, as CoVe gives words without a GloVe
vector. Words are split as bertforge splits words (`data/words.py`), lowercased when the vectors
are (no word in them has a capital). Saved as `source_words.json` beside the target's files.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable

import numpy as np

from ..atomic import atomic_file
from ..errors import BertforgeError
from .parallel import TranslationTokenizer
from .words import WordEncoding, split_words

FILE = "source_words.json"
SPECIALS = ("</s>", "<unk>")


class CoveTokenizer:
    transforms = False  # GPT-1's input transforms are not for it

    def __init__(self, words: list[str], lowercase: bool, target: TranslationTokenizer):
        self.words, self.lowercase, self.target = list(words), lowercase, target
        self.index = {w: k + len(SPECIALS) for k, w in enumerate(self.words)}
        self.source_vocab_size = len(self.words) + len(SPECIALS)
        self.vocab_size, self.pad_id, self.eos_id = target.vocab_size, target.pad_id, target.eos_id
        self.model_max_length = target.model_max_length

    @classmethod
    def build(cls, vectors_words: list[str], sources: Iterable[str], target_texts: Iterable[str],
              vocab_size: int, kind: str = "bpe", most_frequent: int = 50000) -> "CoveTokenizer":
        """Keep the words of the vectors that occur in `sources` and the `most_frequent` first of the
        vector file (so that test words unseen in training still have a vector); learn the target's
        sub-words from `target_texts`."""
        lowercase = not any(w != w.lower() for w in vectors_words)
        seen = {w for text in sources for w in split_words(text.lower() if lowercase else text)}
        kept = [w for k, w in enumerate(vectors_words) if k < most_frequent or w in seen]
        return cls(kept, lowercase, TranslationTokenizer.train(target_texts, vocab_size, kind))

    def source_words(self, text: str) -> list[str]:
        return split_words(text.lower() if self.lowercase else text)

    def encode(self, text: str) -> list[int]:
        """The source ids of `text`, ending in `</s>`."""
        return [self.index.get(w, 1) for w in self.source_words(text)] + [0]

    def coverage(self, texts: Iterable[str]) -> dict:
        """How many words of `texts` have a vector: the words read, those without one (they read the
        zero vector of `<unk>`), how many different words those are, and the commonest ten."""
        missing, words = Counter(), 0
        for text in texts:
            split = self.source_words(text)
            words += len(split)
            missing.update(w for w in split if w not in self.index)
        return {"words": words, "without_vector": sum(missing.values()), "different_without": len(missing),
                "commonest_without": [w for w, _ in missing.most_common(10)]}

    def encode_source_batch(self, texts: list[str]) -> list[list[int]]:
        return [self.encode(t) for t in texts]

    def encode_batch(self, texts: list[str], pairs: list[str] | None = None,
                     max_length: int | None = None) -> list[WordEncoding]:
        """A task's inputs, read as translation read sources: the words, then `</s>`. With `pairs`,
        each text then its pair (each cut to `max_length`), the pair's positions marked segment 1:
        the task model splits them and the MT-LSTM reads each on its own."""
        encodings = [self._encoding(self.source_words(t), max_length) for t in texts]
        if pairs is None:
            return encodings
        joined = []
        for first, pair in zip(encodings, pairs):
            second = self._encoding(self.source_words(pair), max_length)
            both = WordEncoding(first.ids + second.ids, first.truncated or second.truncated, None,
                                first.word_ids + second.word_ids, first.tokens + second.tokens)
            both.token_type_ids = [0] * len(first.ids) + [1] * len(second.ids)
            joined.append(both)
        return joined

    def encode_words(self, sentences: list[list[str]], max_length: int | None = None) -> list[WordEncoding]:
        """Sentences already split into words (tagging), each word its own position."""
        return [self._encoding([w.lower() for w in s] if self.lowercase else list(s), max_length) for s in sentences]

    def _encoding(self, words: list[str], max_length: int | None) -> WordEncoding:
        ids, word_ids = [self.index.get(w, 1) for w in words] + [0], [*range(len(words)), None]
        cut = max_length is not None and len(ids) > max_length
        return WordEncoding(ids[:max_length], cut, None, word_ids[:max_length], (words + [SPECIALS[0]])[:max_length])

    def encode_target_batch(self, texts: list[str]) -> list[list[int]]:
        return self.target.encode_batch(texts)

    def decode(self, ids: Iterable[int]) -> str:
        return self.target.decode(ids)

    def decode_batch(self, rows) -> list[str]:
        return self.target.decode_batch(rows)

    def vector_matrix(self, vectors_words: list[str], vectors: np.ndarray) -> np.ndarray:
        """(source_vocab_size, dim): the kept words' vectors, zeros for the specials."""
        row = {w: k for k, w in enumerate(vectors_words)}
        out = np.zeros((self.source_vocab_size, vectors.shape[1]), dtype=np.float32)
        out[len(SPECIALS):] = vectors[[row[w] for w in self.words]]
        return out

    def save_pretrained(self, directory: str) -> None:
        self.target.save_pretrained(directory)
        with atomic_file(os.path.join(directory, FILE)) as f:
            json.dump({"lowercase": self.lowercase, "specials": list(SPECIALS), "words": self.words}, f,
                      ensure_ascii=False)

    @classmethod
    def from_pretrained(cls, directory: str) -> "CoveTokenizer":
        path = os.path.join(directory, FILE)
        if not os.path.exists(path):
            raise BertforgeError(f"{path}: no such file (a CoVe model keeps its source words there)")
        with open(path, encoding="utf-8") as f:
            saved = json.load(f)
        return cls(saved["words"], saved["lowercase"], TranslationTokenizer.from_pretrained(directory))


def describe_coverage(coverage: dict) -> str:
    """One line for the log from `CoveTokenizer.coverage`."""
    share = 1 - coverage["without_vector"] / max(coverage["words"], 1)
    line = f"{share:.1%} of the {coverage['words']:,} source words read have a vector"
    if coverage["different_without"]:
        line += (f"; {coverage['different_without']:,} different words have none (the zero vector), the commonest: "
                 + ", ".join(coverage["commonest_without"]))
    return line


def check_coverage(coverage: dict, least: float, vectors: str) -> None:
    """Refuse, before training, word vectors that cover less than the share `least` of the words read
    (`CoveTokenizer.coverage`): the encoder would read the one zero vector for most of them, and a
    run over none trained its whole budget for nothing."""
    share = 1 - coverage["without_vector"] / max(coverage["words"], 1)
    if share < least:
        raise BertforgeError(f"{vectors}: only {share:.1%} of the {coverage['words']:,} training source words have a "
                             f"vector (--min-vector-coverage {least:g}); the commonest without one: "
                             f"{', '.join(coverage['commonest_without'][:5])}. Vectors learned on text like the "
                             "corpus cover it (bertforge word-vectors); --min-vector-coverage 0 trains anyway")
