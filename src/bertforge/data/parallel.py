"""Parallel text for translation: read aligned sentence pairs, learn a joint sub-word vocabulary,
and cut the pairs into batches by token count.

Pairs come either as two line-aligned files `PREFIX.SRC` and `PREFIX.TGT` (fairseq's and Marian's
layout) or as JSON lines of Hugging Face's `{"translation": {"en": ..., "de": ...}}`.

The vocabulary is SentencePiece-style (NFKC, spaces kept as `▁` inside pieces, so that decoding
gives back the plain text) with Marian's special ids: `</s>` = 0, `<unk>` = 1 and `<pad>` the
last id; `<pad>` is also the decoder's start token, as in `MarianMTModel`. Its `tokenizer.json`
loads in `transformers` as a `PreTrainedTokenizerFast` that gives the same ids.

Batches hold sentences of similar length (sorted once, with a seeded tie-break) up to a token
budget; each epoch shuffles the order of the batches by (seed, epoch), so that a batch is a pure
function of its position in the run and a resumed run continues exactly.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from itertools import zip_longest

import numpy as np
import torch
from tokenizers import AddedToken, decoders, normalizers, pre_tokenizers, processors, trainers
from tokenizers import Tokenizer as Backend
from tokenizers.models import BPE, Unigram

from ..atomic import atomic_file
from ..errors import BertforgeError
from ..paths import why_missing
from .batches import Position
from .masking import IGNORE

EOS, UNK, PAD = "</s>", "<unk>", "<pad>"
KINDS = ("bpe", "unigram")
JSON_SUFFIXES = (".jsonl", ".json")
RECORD_KEY = "translation"  # the field of Hugging Face's translation data sets (wmt16, opus_books)

Pair = tuple[list[int], list[int]]


# ---------------------------------------------------------------------------------------------
# Reading


def parallel_files(path: str, source_lang: str, target_lang: str) -> list[str]:
    """The files `read_parallel` reads for `path`: itself (JSON lines), or the prefix's two."""
    return [path] if path.endswith(JSON_SUFFIXES) else [f"{path}.{source_lang}", f"{path}.{target_lang}"]


def read_parallel(path: str, source_lang: str, target_lang: str) -> list[tuple[str, str]]:
    """The (source, target) sentence pairs at `path`: a JSON-lines file (`.jsonl`/`.json`) of
    `{"translation": {source_lang: ..., target_lang: ...}}`, else the prefix of two line-aligned
    files `path.source_lang` and `path.target_lang`. Both files are read line by line together.
    Missing files, different line counts, invalid UTF-8 or JSON, a missing language and an empty
    sentence raise a BertforgeError naming the file and the 1-based line."""
    if source_lang == target_lang:
        raise BertforgeError(f"{path}: the source and target language are both {source_lang!r}")
    if path.endswith(JSON_SUFFIXES):
        if not os.path.isfile(path):
            raise BertforgeError(f"{path}: {why_missing(path)}")
        return list(_json_pairs(path, source_lang, target_lang))
    files = [f"{path}.{source_lang}", f"{path}.{target_lang}"]
    missing = [f for f in files if not os.path.isfile(f)]
    if missing and os.path.isdir(path):
        raise BertforgeError(f"{path}: is a directory; parallel text is named by its files' prefix (PREFIX for "
                             f"PREFIX.{source_lang} and PREFIX.{target_lang}) or is one .jsonl or .json file")
    if missing:
        reasons = {f: why_missing(f) for f in missing}  # a folder by that name is not "not found"
        found = (f"{' and '.join(missing)} not found" if set(reasons.values()) == {"no such file"}
                 else "; ".join(f"{f}: {why}" for f, why in reasons.items()))
        raise BertforgeError(f"{path}: no parallel text: looked for {files[0]} and {files[1]}, {found}")
    return list(_aligned_pairs(*files))


def _lines(path: str) -> Iterator[str]:
    """The lines of `path`, decoded one at a time, without their newline (or a trailing \\r)."""
    try:
        with open(path, "rb") as f:
            for number, raw in enumerate(f, 1):
                try:
                    yield raw.rstrip(b"\n").rstrip(b"\r").decode("utf-8")
                except UnicodeDecodeError as e:
                    raise BertforgeError(f"{path}:{number}: not valid UTF-8 ({e.reason} at byte {e.start} "
                                         "of the line)") from None
    except OSError as e:
        raise BertforgeError(f"{path}: cannot read ({e.strerror or e})") from None


def _aligned_pairs(source_file: str, target_file: str) -> Iterator[tuple[str, str]]:
    missing = object()
    both = zip_longest(_lines(source_file), _lines(target_file), fillvalue=missing)
    for number, (source, target) in enumerate(both, 1):
        if source is missing or target is missing:
            # only on failure: count both files whole, for a message that says by how much they differ
            counts = _count_lines(source_file), _count_lines(target_file)
            raise BertforgeError(f"{source_file} has {counts[0]} lines but {target_file} has {counts[1]}; "
                                 "the two files must be line-aligned")
        _check_not_empty(source, source_file, number)
        _check_not_empty(target, target_file, number)
        yield source, target


def _count_lines(path: str) -> int:
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def _check_not_empty(text: str, path: str, number: int) -> None:
    if not text.strip():
        raise BertforgeError(f"{path}:{number}: empty sentence; empty pairs are not allowed (remove the line "
                             "from both files)")


def _json_pairs(path: str, source_lang: str, target_lang: str) -> Iterator[tuple[str, str]]:
    for number, line in enumerate(_lines(path), 1):
        if not line.strip():
            continue  # a blank line (a trailing one, most often) is no record
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise BertforgeError(f"{path}:{number}: not valid JSON ({e.msg} at column {e.colno}); expected one "
                                 "object per line") from None
        pair = record.get(RECORD_KEY) if isinstance(record, dict) else None
        if not isinstance(pair, dict):
            raise BertforgeError(f"{path}:{number}: expected an object with a \"translation\" object")
        for lang in (source_lang, target_lang):
            if not isinstance(pair.get(lang), str):
                found = ", ".join(sorted(map(str, pair))) or "none"
                raise BertforgeError(f"{path}:{number}: no {lang!r} text in \"translation\" (languages: {found})")
            _check_not_empty(pair[lang], path, number)
        yield pair[source_lang], pair[target_lang]


# ---------------------------------------------------------------------------------------------
# The joint vocabulary


class TranslationTokenizer:
    """A joint source+target sub-word vocabulary (BPE or unigram) with Marian's special ids:
    `</s>` = 0 ends every encoded text, `<unk>` = 1, `<pad>` = the last id. Build one with `train`
    or `from_pretrained`."""

    def __init__(self, backend: Backend, model_max_length: int = 512):
        self.backend = backend
        self.model_max_length = model_max_length
        vocab = backend.get_vocab()
        self.vocab_size = backend.get_vocab_size()
        expected = {EOS: 0, UNK: 1, PAD: self.vocab_size - 1}
        wrong = [f"{token} is {vocab.get(token)} (expected {id_})" for token, id_ in expected.items()
                 if vocab.get(token) != id_]
        if wrong:
            raise BertforgeError(f"not a translation vocabulary: {'; '.join(wrong)}")
        self.eos_id, self.unk_id, self.pad_id = 0, 1, self.vocab_size - 1
        backend.no_padding()
        backend.no_truncation()
        backend.post_processor = processors.TemplateProcessing(single=f"$A:0 {EOS}:0",
                                                               special_tokens=[(EOS, self.eos_id)])

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int = 8000, kind: str = "bpe") -> "TranslationTokenizer":
        """Learn a vocabulary of at most `vocab_size` ids (`<pad>` included) from `texts`, the
        source and target sentences together. `kind` "bpe" (the default: on Multi30k as short as
        unigram's encodings and faster to learn) or "unigram" (SentencePiece's default)."""
        if kind not in KINDS:
            raise BertforgeError(f"unknown vocabulary kind {kind!r}; choose one of {', '.join(KINDS)}")
        if vocab_size < 3:
            raise BertforgeError(f"vocab_size must be at least 3 (</s>, <unk>, <pad>), got {vocab_size}")
        specials = [EOS, UNK]  # ids 0 and 1, in this order; <pad> is added after, as the last id
        if kind == "bpe":
            model = BPE(unk_token=UNK)
            trainer = trainers.BpeTrainer(vocab_size=vocab_size - 1, special_tokens=specials, show_progress=False)
        else:
            model = Unigram()
            trainer = trainers.UnigramTrainer(vocab_size=vocab_size - 1, special_tokens=specials, unk_token=UNK,
                                              show_progress=False)
        backend = Backend(model)
        backend.normalizer = normalizers.NFKC()
        # SentencePiece's convention: a word's piece starts with ▁ where the text had a space, so
        # that decoding puts back exactly the spaces there were (no detokenizer rules).
        backend.pre_tokenizer = pre_tokenizers.Metaspace()
        backend.decoder = decoders.Metaspace()
        backend.train_from_iterator(texts, trainer)
        backend.add_special_tokens([AddedToken(PAD, special=True, normalized=False)])
        return cls(backend)

    def encode(self, text: str) -> list[int]:
        """The ids of `text`, ending in `</s>`."""
        return self.backend.encode(text).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """The ids of each text (`encode`), encoded in parallel by the Rust library."""
        return [e.ids for e in self.backend.encode_batch(list(texts))]

    def encode_source_batch(self, texts: list[str]) -> list[list[int]]:
        """What translation reads: `encode_batch` (one vocabulary for both sides)."""
        return self.encode_batch(texts)

    def encode_target_batch(self, texts: list[str]) -> list[list[int]]:
        return self.encode_batch(texts)

    def decode(self, ids: Iterable[int]) -> str:
        """The text of `ids` up to the first `</s>`, leaving out `<pad>` (the decoder's start)."""
        return self.backend.decode(_until_eos(ids, self.eos_id), skip_special_tokens=True)

    def decode_batch(self, rows: Iterable[Iterable[int]]) -> list[str]:
        """`decode` of each row."""
        return self.backend.decode_batch([_until_eos(ids, self.eos_id) for ids in rows], skip_special_tokens=True)

    def save_pretrained(self, directory: str) -> None:
        """Write `tokenizer.json`, `tokenizer_config.json` and `special_tokens_map.json` into
        `directory` (other files there are left alone), each atomically, so that
        `transformers.AutoTokenizer.from_pretrained(directory)` loads it with the same ids."""
        specials = {"eos_token": EOS, "unk_token": UNK, "pad_token": PAD}
        config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": self.model_max_length,
                  # transformers' clean-up would join "a ." into "a.": the pieces already hold the spaces
                  "clean_up_tokenization_spaces": False, **specials}
        os.makedirs(directory, exist_ok=True)
        with atomic_file(os.path.join(directory, "tokenizer.json")) as f:
            f.write(self.backend.to_str(pretty=True))
        for name, content in (("tokenizer_config.json", config), ("special_tokens_map.json", specials)):
            with atomic_file(os.path.join(directory, name)) as f:
                json.dump(content, f, indent=2, ensure_ascii=False)
                f.write("\n")

    @classmethod
    def from_pretrained(cls, directory: str) -> "TranslationTokenizer":
        """Load what `save_pretrained` wrote to `directory`."""
        path = os.path.join(directory, "tokenizer.json")
        if not os.path.isfile(path):
            raise BertforgeError(f"{path}: {why_missing(path)} (no translation tokenizer in {directory})")
        try:
            backend = Backend.from_file(path)
        except Exception as e:  # the Rust library raises a bare Exception on malformed files
            raise BertforgeError(f"{path}: not a valid tokenizer file ({' '.join(str(e).split())})") from None
        max_length = _read_config(os.path.join(directory, "tokenizer_config.json")).get("model_max_length", 512)
        if isinstance(max_length, bool) or not isinstance(max_length, int) or not 0 < max_length <= 1_000_000:
            max_length = 512  # HF writes 1e30 for "unset"
        try:
            return cls(backend, max_length)
        except BertforgeError as e:
            raise BertforgeError(f"{path}: {e}") from None


def _until_eos(ids: Iterable[int], eos_id: int) -> list[int]:
    ids = [int(i) for i in ids]
    return ids[:ids.index(eos_id)] if eos_id in ids else ids


def _read_config(path: str) -> dict:
    if not os.path.exists(path):
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BertforgeError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(config, dict):
        raise BertforgeError(f"{path}: expected a JSON object")
    return config


def encode_pairs(pairs: list[tuple[str, str]], tokenizer: TranslationTokenizer) -> list[Pair]:
    """The ids of each (source, target) pair, each ending in `</s>`."""
    sources = tokenizer.encode_source_batch([s for s, _ in pairs])
    targets = tokenizer.encode_target_batch([t for _, t in pairs])
    return list(zip(sources, targets))


# ---------------------------------------------------------------------------------------------
# Batches


def padded_width(width: int) -> int:
    """`width` rounded up to a multiple of 8. Few distinct shapes keep oneDNN's bf16 kernels (cached
    per shape, each holding its scratch memory) from piling up: without it a 2-minute run grew from
    2.4 to 7 GB."""
    return -(-width // 8) * 8


class TokenBatches:
    """Training batches of pairs of similar length, each at most `max_tokens` wide by long
    (padded source and padded target each), and the held-out `valid` pairs cut the same way.

    Pairs whose source or target has more than `max_length` ids are skipped and counted
    (`skipped`, `valid_skipped`, `describe()`). The training pairs are sorted once by (source
    length, target length), ties broken by a seeded draw, and cut into batches greedily; each epoch
    visits every batch once, in an order drawn from (seed, epoch). Under torchrun, process `rank` of
    `world` takes every world-th batch of that order (the epoch's last few, fewer than `world`, are
    left out, so that every process has one each step)."""

    def __init__(self, pairs_ids: list[Pair], max_tokens: int, pad_id: int, seed: int = 0,
                 valid: list[Pair] | None = None, max_length: int = 256, rank: int = 0, world: int = 1):
        if max_tokens < padded_width(max_length):
            raise BertforgeError(f"max_tokens ({max_tokens}) must be at least max_length ({max_length}) rounded up "
                                 f"to a multiple of 8 ({padded_width(max_length)}), so that every kept pair fits "
                                 "in a batch")
        self.max_tokens, self.pad_id, self.seed, self.max_length = max_tokens, pad_id, seed, max_length
        self.rank, self.world = rank, world
        self.pairs, self.skipped = self._keep(pairs_ids)
        if not self.pairs:
            raise BertforgeError(f"none of the {len(pairs_ids)} training pairs fits max_length {max_length}")
        self.valid, self.valid_skipped = self._keep(valid or [])
        self.train_batches = self._cut(self.pairs, np.random.default_rng([seed, 1 << 20]))
        self.valid_batches = self._cut(self.valid, np.random.default_rng([seed, 1 << 21]))

    def _keep(self, pairs: list[Pair]) -> tuple[list[Pair], int]:
        kept = [p for p in pairs if len(p[0]) <= self.max_length and len(p[1]) <= self.max_length]
        return kept, len(pairs) - len(kept)

    def _cut(self, pairs: list[Pair], rng: np.random.Generator) -> list[np.ndarray]:
        """Indices of `pairs` per batch: sorted by length, each batch as large as the budget allows."""
        if not pairs:
            return []
        source = np.array([len(s) for s, _ in pairs])
        target = np.array([len(t) for _, t in pairs])
        order = np.lexsort((rng.random(len(pairs)), target, source))  # last key sorts first
        batches, start, widest_s, widest_t = [], 0, 0, 0
        for at, i in enumerate(order):
            widest_s, widest_t = max(widest_s, source[i]), max(widest_t, target[i])
            if padded_width(max(widest_s, widest_t)) * (at - start + 1) > self.max_tokens:
                batches.append(order[start:at])
                start, widest_s, widest_t = at, source[i], target[i]
        batches.append(order[start:])
        return batches

    def __len__(self) -> int:
        """The number of training batches in an epoch."""
        return len(self.train_batches)

    def describe(self) -> str:
        """One line for the log: pairs kept and skipped, and batches per epoch."""
        text = (f"{len(self.pairs)} training pairs kept, {self.skipped} skipped (source or target longer than "
                f"{self.max_length} tokens); {len(self)} batches of at most {self.max_tokens} tokens per epoch")
        if self.valid or self.valid_skipped:
            text += f"; {len(self.valid)} held-out pairs kept, {self.valid_skipped} skipped"
        return text

    def epoch_order(self, epoch: int) -> np.ndarray:
        """The order in which epoch `epoch` visits the training batches."""
        return np.random.default_rng([self.seed, epoch]).permutation(len(self.train_batches))

    def batches(self, position: Position) -> Iterator[tuple[Position, list[dict]]]:
        """Yield (position after this batch, [batch]) forever, from `position`: batch `index` of
        epoch `epoch`. Resuming at a yielded position continues exactly where the stream was."""
        epoch, index = position.epoch, position.index
        while True:
            order = self.epoch_order(epoch)
            while index + self.world <= len(order):
                batch = self.collate([self.pairs[i] for i in self.train_batches[order[index + self.rank]]])
                index += self.world
                yield Position(epoch, index), [batch]
            epoch, index = epoch + 1, 0

    def eval_batches(self, max_batches: int | None = None) -> Iterator[dict]:
        """The held-out batches, in the same order every time (at most `max_batches`)."""
        for b, rows in enumerate(self.valid_batches):
            if max_batches is not None and b >= max_batches:
                break
            yield self.collate([self.valid[i] for i in rows])

    def collate(self, pairs: list[Pair]) -> dict:
        """One batch of `pairs`: the source padded with `pad_id` and its mask; the decoder input,
        `pad_id` (the start token) then the target without its final `</s>`; the target to
        predict, padded with -100."""
        S, T = (padded_width(max(len(p[side]) for p in pairs)) for side in (0, 1))
        source = torch.full((len(pairs), S), self.pad_id, dtype=torch.long)
        target_in = torch.full((len(pairs), T), self.pad_id, dtype=torch.long)
        target_out = torch.full((len(pairs), T), IGNORE, dtype=torch.long)
        mask = torch.zeros((len(pairs), S), dtype=torch.bool)
        for row, (s, t) in enumerate(pairs):
            source[row, :len(s)] = torch.tensor(s)
            mask[row, :len(s)] = True
            target_in[row, 1:len(t)] = torch.tensor(t[:-1])
            target_out[row, :len(t)] = torch.tensor(t)
        targets = sum(len(t) for _, t in pairs)
        return {"source": source, "source_mask": mask, "target_in": target_in, "target_out": target_out,
                "counts": {"mt": targets}, "tokens": sum(len(s) for s, _ in pairs) + targets}
