"""The vocabulary of a published OPUS-MT model (Helsinki-NLP's, converted from Marian): two
SentencePiece models, `source.spm` and `target.spm`, that cut text into pieces, and `vocab.json`,
which gives each piece the id the network reads (`target_vocab.json` too when the tokenizer config
says `separate_vocabs`). There is no `tokenizer.json`: the ids are not SentencePiece's own.

Reading and writing follow `transformers`' `MarianTokenizer` exactly, so that a model translates
here as `generate` does there:
- encoding: the text is split at the special tokens (`</s>`, `<unk>`, `<pad>`), which keep their
  ids; a language code at the start of a part (">>de<<", which multilingual models read to choose
  the target language) is one token; the rest is cut into pieces by the side's SentencePiece model
  (its own normalization included), each piece mapped through the vocabulary, `<unk>` when absent;
  `</s>` ends every text.
- decoding: the special ids are left out, the others mapped back to pieces, joined by SentencePiece
  (the source model's with a shared vocabulary, as `MarianTokenizer` does, else the target's) with
  `▁` read as a space; `clean_up_tokenization_spaces` in the tokenizer config as `transformers` reads it.

`sentencepiece` is imported where a model is read, with an install hint when it is missing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable

from ..atomic import atomic_file
from ..errors import BertforgeError

SOURCE_SPM, TARGET_SPM = "source.spm", "target.spm"
VOCAB, TARGET_VOCAB, CONFIG = "vocab.json", "target_vocab.json", "tokenizer_config.json"
EOS, UNK, PAD = "</s>", "<unk>", "<pad>"
SPACE = "▁"


def is_opus_mt(directory: str) -> bool:
    """Whether `directory` holds OPUS-MT's vocabulary files (and no `tokenizer.json` of ours)."""
    return all(os.path.isfile(os.path.join(directory, name)) for name in (SOURCE_SPM, VOCAB))


def _sentencepiece():
    try:
        import sentencepiece
    except ImportError:
        raise BertforgeError("reading an OPUS-MT vocabulary (source.spm, target.spm) needs sentencepiece: "
                             "pip install 'bertforge[translation]'") from None
    return sentencepiece


class _Pieces:
    """An encoding as the service reads one of a `tokenizers` backend: `tokens`, `ids`, `offsets`."""

    def __init__(self, tokens: list[str], ids: list[int], offsets: list[tuple[int, int]]):
        self.tokens, self.ids, self.offsets = tokens, ids, offsets


class _Backend:
    """The two calls the service makes of a `tokenizers` backend (`encode`: the pieces with their
    offsets; `id_to_token`), answered by an `OpusTokenizer`."""

    def __init__(self, tokenizer: "OpusTokenizer"):
        self.encode, self.id_to_token = tokenizer.encode_pieces, tokenizer.id_to_token


class OpusTokenizer:
    """An OPUS-MT vocabulary (see the module's note). Read one with `from_pretrained`; `encode` and
    `decode` are the source's and the target's as translation uses them."""

    def __init__(self, source_model: bytes, target_model: bytes, vocab: dict[str, int],
                 target_vocab: dict[str, int] | None = None, config: dict | None = None, source: str = "vocabulary"):
        self.source_model, self.target_model = source_model, target_model
        self.vocab, self.target_vocab = vocab, target_vocab
        self.config = dict(config or {})
        for name, table in ((VOCAB, vocab), (TARGET_VOCAB, target_vocab)):
            missing = [t for t in (EOS, UNK, PAD) if table is not None and t not in table]
            if missing:
                raise BertforgeError(f"{source}: {name} has no {', '.join(missing)}")
        self.eos_id, self.unk_id, self.pad_id = vocab[EOS], vocab[UNK], vocab[PAD]
        self.vocab_size = len(vocab)
        max_length = self.config.get("model_max_length", 512)
        # HF writes 1e30 for "unset"
        self.model_max_length = max_length if isinstance(max_length, int) and 0 < max_length <= 1_000_000 else 512
        self.clean_up = bool(self.config.get("clean_up_tokenization_spaces", False))
        self.special_ids = {self.eos_id, self.unk_id, self.pad_id}
        self.backend = _Backend(self)
        self._load(source)

    def _load(self, source: str = "vocabulary") -> None:
        spm = _sentencepiece()
        try:
            self.source_spm = spm.SentencePieceProcessor(model_proto=self.source_model)
            self.target_spm = spm.SentencePieceProcessor(model_proto=self.target_model)
        except Exception as e:  # RuntimeError of the C++ library: not a SentencePiece model
            raise BertforgeError(f"{source}: not a SentencePiece model ({' '.join(str(e).split())})") from None
        target = self.target_vocab if self.target_vocab is not None else self.vocab
        self.id_to_piece = {i: t for t, i in target.items()}

    # the SentencePiece processors are rebuilt from their bytes: copies (the service's) and pickles
    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in ("source_spm", "target_spm", "backend")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.backend = _Backend(self)
        self._load()

    # ---- encoding ----------------------------------------------------------------------------

    def _encode(self, text: str, target: bool = False) -> tuple[list[str], list[int], list[tuple[int, int]]]:
        """Tokens, ids and character offsets of `text` on one side, `</s>` last (see the module's note)."""
        spm = self.target_spm if target else self.source_spm
        table = self.target_vocab if target and self.target_vocab is not None else self.vocab
        tokens, ids, offsets = [], [], []
        for start, part in _split_specials(text):
            if part in (EOS, UNK, PAD):  # the special tokens keep their ids (MarianTokenizer's added tokens)
                tokens.append(part)
                ids.append(self.vocab[part])
                offsets.append((start, start + len(part)))
                continue
            if part.startswith(">>") and part.find("<<") != -1:  # a language code, one token
                end = part.find("<<") + 2
                tokens.append(part[:end])
                ids.append(table.get(part[:end], self.unk_id))
                offsets.append((start, start + end))
                start, part = start + end, part[end:]
            pieces = spm.encode(part, out_type=str)
            tokens += pieces
            ids += [table.get(p, self.unk_id) for p in pieces]
            offsets += _offsets(part, pieces, start)
        return tokens + [EOS], ids + [self.eos_id], offsets + [(0, 0)]

    def encode(self, text: str) -> list[int]:
        """The source ids of `text`, ending in `</s>`."""
        return self._encode(text)[1]

    def encode_pieces(self, text: str) -> _Pieces:
        """The source pieces of `text` with their ids and character offsets (the service's tokens)."""
        return _Pieces(*self._encode(text))

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [self._encode(t)[1] for t in texts]

    def encode_source_batch(self, texts: list[str]) -> list[list[int]]:
        return self.encode_batch(texts)

    def encode_target_batch(self, texts: list[str]) -> list[list[int]]:
        """The target side's ids: its SentencePiece model, and its vocabulary when separate."""
        return [self._encode(t, target=True)[1] for t in texts]

    # ---- decoding ----------------------------------------------------------------------------

    def id_to_token(self, index: int) -> str:
        """The target piece of `index` (SentencePiece's own beyond the vocabulary, as `MarianTokenizer`)."""
        index, spm = int(index), self._decoder_spm()
        piece = self.id_to_piece.get(index)
        if piece is None:
            piece = spm.IdToPiece(index) if 0 <= index < spm.GetPieceSize() else ""
        return piece or UNK

    def _decoder_spm(self):
        return self.source_spm if self.target_vocab is None else self.target_spm

    def decode(self, ids: Iterable[int]) -> str:
        """The text of target `ids` up to the first `</s>`, the special ids left out."""
        ids = [int(i) for i in ids]
        ids = ids[:ids.index(self.eos_id)] if self.eos_id in ids else ids
        pieces = [self.id_to_token(i) for i in ids if i not in self.special_ids]
        text = self._decoder_spm().decode_pieces(pieces).replace(SPACE, " ").strip()
        return _clean_up(text) if self.clean_up else text

    def decode_batch(self, rows: Iterable[Iterable[int]]) -> list[str]:
        return [self.decode(row) for row in rows]

    # ---- files -------------------------------------------------------------------------------

    def save_pretrained(self, directory: str) -> None:
        """Write the vocabulary's files into `directory` (each atomically; others there are left
        alone), as `MarianTokenizer.save_pretrained` writes them."""
        os.makedirs(directory, exist_ok=True)
        for name, data in ((SOURCE_SPM, self.source_model), (TARGET_SPM, self.target_model)):
            with atomic_file(os.path.join(directory, name), "wb") as f:
                f.write(data)
        config = {"tokenizer_class": "MarianTokenizer", "model_max_length": self.model_max_length,
                  **self.config, "separate_vocabs": self.target_vocab is not None}
        files = [(VOCAB, self.vocab), (CONFIG, config)]
        files += [(TARGET_VOCAB, self.target_vocab)] if self.target_vocab is not None else []
        for name, content in files:
            with atomic_file(os.path.join(directory, name)) as f:
                json.dump(content, f, indent=2, ensure_ascii=False)
                f.write("\n")

    @classmethod
    def from_pretrained(cls, directory: str) -> "OpusTokenizer":
        """Read `source.spm`, `target.spm` (the source's when absent), `vocab.json`,
        `tokenizer_config.json` and, with `separate_vocabs`, `target_vocab.json` from `directory`."""
        config = _read_json(os.path.join(directory, CONFIG), dict, default={})
        separate = config.get("separate_vocabs", False)
        if not isinstance(separate, bool):
            raise BertforgeError(f"{os.path.join(directory, CONFIG)}: separate_vocabs must be true or false, "
                                 f"got {separate!r}")
        vocab = _read_vocab(os.path.join(directory, VOCAB))
        target_vocab = _read_vocab(os.path.join(directory, TARGET_VOCAB)) if separate else None
        models = []
        for name in (SOURCE_SPM, TARGET_SPM):
            path = os.path.join(directory, name)
            if name == TARGET_SPM and not os.path.exists(path):
                path = os.path.join(directory, SOURCE_SPM)  # one model for both sides
            try:
                with open(path, "rb") as f:
                    models.append(f.read())
            except FileNotFoundError:
                raise BertforgeError(f"{path}: no such file (an OPUS-MT directory holds its SentencePiece "
                                     "model there)") from None
        try:
            return cls(models[0], models[1], vocab, target_vocab, config, source=directory)
        except BertforgeError as e:
            if str(e).startswith(directory):
                raise
            raise BertforgeError(f"{directory}: {e}") from None


class TranslationVocabulary:
    """The translation family's two vocabulary layouts: bertforge's own joint `tokenizer.json`
    (`TranslationTokenizer`), or a published OPUS-MT model's SentencePiece files (`OpusTokenizer`)."""

    @staticmethod
    def from_pretrained(directory: str):
        """The vocabulary `directory` holds: `tokenizer.json` when there is one, else OPUS-MT's files."""
        from .parallel import TranslationTokenizer

        if not os.path.isfile(os.path.join(directory, "tokenizer.json")) and is_opus_mt(directory):
            return OpusTokenizer.from_pretrained(directory)
        return TranslationTokenizer.from_pretrained(directory)


def _split_specials(text: str) -> list[tuple[int, str]]:
    """`text` cut at the special tokens (kept as parts of their own), each part with its start; no
    empty parts. `MarianTokenizer` (a `PreTrainedTokenizer`) splits so before SentencePiece."""
    parts, start, i = [], 0, 0
    while i < len(text):
        special = next((s for s in (EOS, UNK, PAD) if text.startswith(s, i)), None)
        if special is None:
            i += 1
            continue
        if i > start:
            parts.append((start, text[start:i]))
        parts.append((i, special))
        i = start = i + len(special)
    if start < len(text):
        parts.append((start, text[start:]))
    return parts


def _offsets(text: str, pieces: list[str], start: int) -> list[tuple[int, int]]:
    """Where each piece's text is in `text` (from `start`), found left to right; a piece that
    normalization changed (NFKC: a full-width letter) spans nothing where the search stands. For the
    service's display of tokens: SentencePiece's own offsets are read differently by each release."""
    out, at = [], 0
    for piece in pieces:
        surface = piece.replace(SPACE, " ").lstrip(" ")
        found = text.find(surface, at) if surface else -1
        if found < 0:
            out.append((start + at, start + at))
            continue
        at = found + len(surface)
        out.append((start + found, start + at))
    return out


def _clean_up(text: str) -> str:
    """`transformers`' `clean_up_tokenization`: no space before punctuation and English clitics."""
    for old, new in ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
                     (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")):
        text = text.replace(old, new)
    return text


def _read_json(path: str, kind: type, default=None):
    if default is not None and not os.path.exists(path):
        return default
    try:
        with open(path, encoding="utf-8") as f:
            content = json.load(f)
    except FileNotFoundError:
        raise BertforgeError(f"{path}: no such file (an OPUS-MT directory holds its vocabulary there)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BertforgeError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(content, kind):
        raise BertforgeError(f"{path}: expected a JSON {'object' if kind is dict else kind.__name__}")
    return content


def _read_vocab(path: str) -> dict[str, int]:
    vocab = _read_json(path, dict)
    bad = next((k for k, v in vocab.items() if isinstance(v, bool) or not isinstance(v, int) or v < 0), None)
    if bad is not None:
        raise BertforgeError(f"{path}: the id of {bad!r} is {vocab[bad]!r}, not an id (a non-negative integer)")
    if len(set(vocab.values())) != len(vocab):
        raise BertforgeError(f"{path}: two pieces share an id")
    if vocab and max(vocab.values()) >= len(vocab):  # the ids are the embedding's rows: 0 to N-1, no gaps
        piece = max(vocab, key=vocab.get)
        raise BertforgeError(f"{path}: the id of {piece!r} is {vocab[piece]:,}, past its {len(vocab):,} pieces (ids "
                             "run from 0 without gaps)")
    return vocab
