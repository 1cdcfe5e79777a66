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

from ..atomic import atomic_file
from ..errors import BertforgeError
from ..progress import progress

FILE = "words.json"
UNK, PAD, BOS, EOS = "xxunk", "xxpad", "xxbos", "xxeos"
FIELD = "xxfld"  # between the two texts of a pair
SPECIALS = (UNK, PAD, BOS, EOS, FIELD)  # ids 0-4 in every vocabulary (pad is 1, as fastai's)
RULE_TOKENS = ("xxrep", "xxwrep", "xxup", "xxmaj")

# ELMo's characters (AllenNLP's ELMoCharacterMapper): bytes are 0-255, then these marks; every id is
# shifted up by one when written, so that 0 can mark padding positions.
BEGIN_SENTENCE, END_SENTENCE, BEGIN_WORD, END_WORD, PADDING = 256, 257, 258, 259, 260
BOS_WORD, EOS_WORD = "<S>", "</S>"  # ELMo's sentence boundaries, with characters of their own

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*|\S", re.UNICODE)
_CHAR_REPEAT = re.compile(r"(\S)(\1{3,})")
_WORD_REPEAT = re.compile(r"(?:^|(?<=\s))(\S+)((?:\s+\1){3,})(?=\s|$)")


def split_words(text: str) -> list[str]:
    return _WORD.findall(text)


def word_characters(word: str, max_characters: int = 50) -> list[int]:
    """ELMo's character ids of one word: the begin-of-word mark, its UTF-8 bytes (cut to leave room
    for the end mark), the end-of-word mark, padding to `max_characters`, all shifted by one."""
    if word == BOS_WORD:
        body = [BEGIN_SENTENCE]
    elif word == EOS_WORD:
        body = [END_SENTENCE]
    else:
        body = list(word.encode("utf-8", "replace")[:max_characters - 2])
    ids = [BEGIN_WORD, *body, END_WORD] + [PADDING] * (max_characters - len(body) - 2)
    return [i + 1 for i in ids]


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
    """Word ids of one input, shaped as the sub-word tokenizers' encodings (no segments); for an
    ELMo vocabulary also each word's characters. `word_ids` maps each position to its word (None
    for the sentence marks), as a sub-word tokenizer maps its pieces."""

    def __init__(self, ids: list[int], truncated: bool, chars: list[list[int]] | None = None,
                 word_ids: list[int | None] | None = None, tokens: list[str] | None = None):
        self.ids, self.truncated, self.chars, self.word_ids, self.tokens = ids, truncated, chars, word_ids, tokens
        self.token_type_ids = [0] * len(ids)

    def __len__(self) -> int:
        return len(self.ids)


class WordVocab:
    def __init__(self, words: list[str], lowercase: bool = True, rules: bool = False, characters: int | None = None):
        if list(words[:len(SPECIALS)]) != list(SPECIALS):
            raise BertforgeError(f"a word vocabulary starts with {', '.join(SPECIALS)}")
        if len(set(words)) != len(words):
            seen = collections.Counter(words)
            raise BertforgeError(f"a word vocabulary lists {next(w for w, n in seen.items() if n > 1)!r} twice")
        self.words, self.lowercase, self.rules = list(words), lowercase or rules, rules
        # ELMo's vocabulary: its model reads words as up to this many characters, each sentence
        # between <S> and </S> (the softmax's xxbos and xxeos)
        self.characters = characters
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

    def id_to_token(self, token_id: int) -> str | None:
        return self.words[token_id] if 0 <= token_id < len(self.words) else None

    def ids_of(self, words: Iterable[str]) -> list[int]:
        return [self.index.get(w, self.unk_id) for w in words]

    def encode(self, text: str) -> list[int]:
        return self.ids_of(self.tokenize(text))

    def encode_batch(self, texts: list[str], pairs: list[str] | None = None,
                     max_length: int | None = None) -> list[WordEncoding]:
        """A task's inputs: `xxbos` and the text's words (then `xxfld` and the pair's, as fastai marks
        a second field), cut to `max_length` words. An ELMo vocabulary reads each text as a sentence
        between <S> and </S>, with every word's characters."""
        words = [self.tokenize(t) for t in texts]
        seconds = [self.tokenize(p) for p in pairs] if pairs is not None else None
        return [self._encoding(w, seconds[i] if seconds else None, max_length) for i, w in enumerate(words)]

    def encode_words(self, sentences: list[list[str]], max_length: int | None = None) -> list[WordEncoding]:
        """Sentences already split into words (tagging), each word its own position."""
        return [self._encoding([w.lower() for w in s] if self.lowercase else list(s), None, max_length)
                for s in sentences]

    def _encoding(self, words: list[str], pair: list[str] | None, max_length: int | None) -> WordEncoding:
        if self.characters:
            tokens = [BOS_WORD, *words, EOS_WORD] + ([BOS_WORD, *pair, EOS_WORD] if pair is not None else [])
            word_ids = [None, *range(len(words)), None] + ([None, *range(len(pair)), None] if pair is not None else [])
        else:
            tokens = [BOS] + words + ([FIELD, *pair] if pair is not None else [])
            word_ids = [None, *range(len(words))] + ([None, *range(len(pair))] if pair is not None else [])
        cut = max_length is not None and len(tokens) > max_length
        tokens, word_ids = tokens[:max_length], word_ids[:max_length]
        marks = {BOS_WORD: self.bos_id, EOS_WORD: self.eos_id, BOS: self.bos_id, FIELD: self.field_id}
        ids = [marks[t] if w is None else self.index.get(t, self.unk_id) for t, w in zip(tokens, word_ids)]
        chars = [word_characters(t, self.characters) for t in tokens] if self.characters else None
        return WordEncoding(ids, cut, chars, word_ids, tokens)

    def decode(self, ids: Iterable[int]) -> str:
        return " ".join(self.words[i] for i in ids)

    @classmethod
    def train(cls, texts: Iterable[str], max_size: int = 60000, min_freq: int = 2, lowercase: bool = True,
              rules: bool = False, characters: int | None = None, show_progress: bool = False) -> "WordVocab":
        """The `max_size` most frequent words of `texts` seen at least `min_freq` times (ties in
        first-seen order, so the same corpus always gives the same ids), after the specials.
        `show_progress`: texts counted so far (a bar on a terminal, else a line every 30 s)."""
        counts = collections.Counter()
        probe = cls(list(SPECIALS) + (list(RULE_TOKENS) if rules else []), lowercase, rules)
        bar = progress(desc="learning the vocabulary", unit="texts", disable=not show_progress)
        for text in texts:
            counts.update(probe.tokenize(text))
            bar.update(1)
        bar.close()
        fixed = probe.words
        kept = [w for w, n in counts.most_common() if n >= min_freq and w not in probe.index]
        return cls(fixed + kept[:max(0, max_size - len(fixed))], lowercase, rules, characters)

    def save_pretrained(self, directory: str) -> None:
        with atomic_file(os.path.join(directory, FILE)) as f:
            json.dump({"lowercase": self.lowercase, "rules": self.rules, "characters": self.characters,
                       "words": self.words}, f, ensure_ascii=False)

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
            return cls(data["words"], bool(data.get("lowercase", True)), bool(data.get("rules", False)),
                       data.get("characters"))
        except BertforgeError as e:
            raise BertforgeError(f"{path}: {e}") from None
