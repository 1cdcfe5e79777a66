"""Word-level vocabularies, for the LM softmaxes and word embeddings of BERT's recurrent ancestors.

Words are split off by a rule (runs of letters and digits, with inner apostrophes, and each other
non-space character on its own), not learned as sub-words are. The vocabulary keeps the most
frequent words, up to `max_size` and at least `min_freq` occurrences (ULMFiT: 60,000 and 2); every
other word reads as `xxunk`.

With `rules` (ULMFiT's, after fastai's text rules), case and repetition become tokens instead of
new words: `xxmaj` before a capitalised word, `xxup` before an all-caps one (both then lowercased),
`xxrep n c` for a character repeated 4+ times, `xxwrep n w` for a word repeated 4+ times, and every
document starts with `xxbos`. Without rules, text is lowercased (unless `lowercase=False`).

Saved as `words.json` beside a model's `config.json`: the settings and the words, in id order.
"""

from __future__ import annotations

import collections
import json
import os
import re
from collections.abc import Iterable

from ..errors import BertforgeError
from ..training.atomic import atomic_file

FILE = "words.json"
UNK, PAD, BOS, EOS = "xxunk", "xxpad", "xxbos", "xxeos"
SPECIALS = (UNK, PAD, BOS, EOS, "xxfld")  # ids 0-4 in every vocabulary (fastai's order: pad is 1); xxfld
# stands between the two texts of a pair
RULE_TOKENS = ("xxrep", "xxwrep", "xxup", "xxmaj")

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*|\S", re.UNICODE)
_CHAR_REPEAT = re.compile(r"(\S)(\1{3,})")
_WORD_REPEAT = re.compile(r"(?:^|(?<=\s))(\S+)((?:\s+\1){3,})(?=\s|$)")


def split_words(text: str) -> list[str]:
    return _WORD.findall(text)


def apply_rules(text: str) -> list[str]:
    """ULMFiT's rules: `text` -> lowercased words with xxrep, xxwrep, xxup and xxmaj tokens."""
    text = _CHAR_REPEAT.sub(lambda m: f" xxrep {len(m.group(0))} {m.group(1)} ", text)
    text = _WORD_REPEAT.sub(lambda m: f" xxwrep {len(m.group(0).split())} {m.group(1)} ", text)
    words = []
    for word in split_words(text):
        if len(word) > 1 and word.isupper():
            words += ["xxup", word.lower()]
        elif word[:1].isupper() and word[1:].islower() or len(word) == 1 and word.isupper():
            words += ["xxmaj", word.lower()]
        else:
            words.append(word.lower())
    return words


class WordEncoding:
    """Word ids of one input, shaped as the sub-word tokenizers' encodings (no segments)."""

    def __init__(self, ids: list[int], truncated: bool):
        self.ids, self.truncated = ids, truncated
        self.token_type_ids = [0] * len(ids)


class WordVocab:
    def __init__(self, words: list[str], lowercase: bool = True, rules: bool = False):
        if list(words[:len(SPECIALS)]) != list(SPECIALS):
            raise BertforgeError(f"a word vocabulary starts with {', '.join(SPECIALS)}")
        if len(set(words)) != len(words):
            seen = collections.Counter(words)
            raise BertforgeError(f"a word vocabulary lists {next(w for w, n in seen.items() if n > 1)!r} twice")
        self.words, self.lowercase, self.rules = list(words), lowercase or rules, rules
        self.index = {w: i for i, w in enumerate(self.words)}

    # the ids and size every tokenizer here offers
    unk_id, pad_id, bos_id, eos_id, field_id = range(5)
    transforms = None  # GPT-1's input transforms: none here

    @property
    def vocab_size(self) -> int:
        return len(self.words)

    def tokenize(self, text: str) -> list[str]:
        if self.rules:
            return apply_rules(text)
        return split_words(text.lower() if self.lowercase else text)

    def encode_words(self, words: Iterable[str]) -> list[int]:
        return [self.index.get(w, self.unk_id) for w in words]

    def encode(self, text: str) -> list[int]:
        return self.encode_words(self.tokenize(text))

    def encode_batch(self, texts: list[str], pairs: list[str] | None = None,
                     max_length: int | None = None) -> list["WordEncoding"]:
        """A task's inputs: `xxbos` and the text's words (then `xxfld` and the pair's, as fastai marks
        a second field), cut to `max_length` words."""
        out = []
        for i, text in enumerate(texts):
            ids = [self.bos_id] + self.encode(text)
            if pairs is not None:
                ids += [self.field_id] + self.encode(pairs[i])
            cut = max_length is not None and len(ids) > max_length
            out.append(WordEncoding(ids[:max_length] if cut else ids, cut))
        return out

    def decode(self, ids: Iterable[int]) -> str:
        return " ".join(self.words[i] for i in ids)

    @classmethod
    def train(cls, texts: Iterable[str], max_size: int = 60000, min_freq: int = 2, lowercase: bool = True,
              rules: bool = False) -> "WordVocab":
        """The `max_size` most frequent words of `texts` seen at least `min_freq` times (ties in
        first-seen order, so the same corpus always gives the same ids), after the specials."""
        counts = collections.Counter()
        probe = cls(list(SPECIALS) + (list(RULE_TOKENS) if rules else []), lowercase, rules)
        for text in texts:
            counts.update(probe.tokenize(text))
        fixed = probe.words
        kept = [w for w, n in counts.most_common() if n >= min_freq and w not in probe.index]
        return cls(fixed + kept[:max(0, max_size - len(fixed))], lowercase, rules)

    def save_pretrained(self, directory: str) -> None:
        with atomic_file(os.path.join(directory, FILE)) as f:
            json.dump({"lowercase": self.lowercase, "rules": self.rules, "words": self.words}, f, ensure_ascii=False)

    @classmethod
    def from_pretrained(cls, directory: str) -> "WordVocab":
        path = os.path.join(directory, FILE)
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            raise BertforgeError(f"{path}: no such file (a word-level model's vocabulary)") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise BertforgeError(f"{path}: cannot be read ({e})") from None
        if not (isinstance(data, dict) and isinstance(data.get("words"), list)
                and all(isinstance(w, str) for w in data["words"])):
            raise BertforgeError(f"{path}: expected an object with a list of words under \"words\"")
        try:
            return cls(data["words"], bool(data.get("lowercase", True)), bool(data.get("rules", False)))
        except BertforgeError as e:
            raise BertforgeError(f"{path}: {e}") from None
