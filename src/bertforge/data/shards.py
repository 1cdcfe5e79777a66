"""Token shards: a corpus tokenized once, in worker processes, into memory-mapped arrays.

A shard directory holds three flat arrays and a `meta.json`:
- `tokens.bin`: every sentence's token ids back to back (uint16 when the vocabulary fits, else uint32);
- `sentences.bin`: int64 offsets into `tokens`, one more than there are sentences;
- `documents.bin`: int64 offsets into `sentences`, one more than there are documents.
Building streams the corpus in chunks with a bounded number in flight, so memory does not grow with
corpus size; the result is cached under a key of the files, the tokenizer and the settings.
"""

from __future__ import annotations

import copy
import hashlib
import json
import multiprocessing
import os
import shutil
import sys
import time
from collections import deque
from collections.abc import Iterator

import numpy as np

from ..atomic import atomic_directory, stale
from ..errors import BertforgeError
from ..paths import file_identities
from .tokenizer import Tokenizer
from .corpus import FileReport, find_files, read_units, split_sentences

FORMAT_VERSION = 1
CHUNK_CHARS = 1 << 18  # text per task sent to a worker


class Shards:
    """Read-only view of a shard directory; the arrays are memory-mapped, not loaded."""

    def __init__(self, directory: str):
        self.directory = directory
        try:
            with open(os.path.join(directory, "meta.json"), encoding="utf-8") as f:
                self.meta = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            raise BertforgeError(f"{directory}: not a shard directory ({e})") from None
        self.tokens = np.memmap(os.path.join(directory, "tokens.bin"), dtype=self.meta["dtype"], mode="r")
        self.sentences = np.memmap(os.path.join(directory, "sentences.bin"), dtype=np.int64, mode="r")
        self.documents = np.memmap(os.path.join(directory, "documents.bin"), dtype=np.int64, mode="r")

    @property
    def num_tokens(self) -> int:
        return int(self.meta["num_tokens"])

    @property
    def num_documents(self) -> int:
        return len(self.documents) - 1

    def document(self, index: int) -> list[np.ndarray]:
        """The token ids of each sentence of document `index`."""
        first, last = self.documents[index], self.documents[index + 1]
        bounds = self.sentences[first: last + 1]
        return [self.tokens[bounds[i]: bounds[i + 1]] for i in range(len(bounds) - 1)]

    def document_tokens(self) -> np.ndarray:
        """The number of tokens of each document (D,)."""
        documents = np.asarray(self.documents)
        return np.asarray(self.sentences[documents[1:]]) - np.asarray(self.sentences[documents[:-1]])

    def sentence_starts(self, index: int) -> np.ndarray:
        """Where each sentence of document `index` starts, in tokens from the document's start, and
        its end: the places it can be cut."""
        bounds = np.asarray(self.sentences[self.documents[index]: self.documents[index + 1] + 1])
        return bounds - bounds[0]

    def cut(self, cuts: np.ndarray) -> tuple[Shards, np.ndarray, np.ndarray]:
        """Each document cut in two `cuts[d]` tokens in (at a sentence start; 0 or its length: not
        cut). -> (a view whose documents are the pieces, the pieces before the cuts, those after).
        Without a cut inside a document, the view is these shards and their documents' indices."""
        documents = np.asarray(self.documents, dtype=np.int64)
        firsts, lasts = documents[:-1], documents[1:]
        at = np.searchsorted(np.asarray(self.sentences), np.asarray(self.sentences[firsts]) + cuts)  # sentence indices
        inside = (at > firsts) & (at < lasts)
        view = self
        if inside.any():
            view = copy.copy(self)
            view.documents = np.sort(np.concatenate([documents, at[inside]]))
        starts = np.asarray(view.documents[:-1])
        after = starts >= at[np.searchsorted(documents, starts, side="right") - 1]
        return view, np.flatnonzero(~after), np.flatnonzero(after)


def shard_key(files: list[str], tokenizer: Tokenizer, layout: str, text_field: str) -> str:
    """A digest of everything the shards depend on: file identities, the tokenizer, the settings."""
    h = hashlib.sha256()
    h.update(json.dumps({"version": FORMAT_VERSION, "layout": layout, "text_field": text_field}).encode())
    h.update(file_identities(files).encode())
    h.update(tokenizer.backend.to_str().encode())
    return h.hexdigest()[:20]


def _remove_dead_builds(cache: str) -> None:
    """Temporary folders of shard builds that were killed: untouched for ten minutes (a live build
    writes all the time; another process may be building other shards in the same cache)."""
    if os.path.isdir(cache):
        for name in os.listdir(cache):
            full = os.path.join(cache, name)
            if ".tmp-" in name and os.path.isdir(full) and stale(full, 600):
                shutil.rmtree(full, ignore_errors=True)


def default_cache_dir() -> str:
    return os.environ.get("BERTFORGE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "bertforge")


def build_shards(corpus: str | list[str], tokenizer: Tokenizer, cache_dir: str | None = None,
                 layout: str = "auto", text_field: str = "text", workers: int | None = None,
                 progress: bool = True) -> Shards:
    """Tokenize `corpus` (files, folders, globs) into shards, or reuse cached ones.

    Prints what was repaired in each file. `workers` defaults to the number of CPU cores.
    """
    files = find_files(corpus)
    key = shard_key(files, tokenizer, layout, text_field)
    directory = os.path.join(cache_dir or default_cache_dir(), "shards", key)
    if os.path.exists(os.path.join(directory, "meta.json")):
        shards = Shards(directory)
        _log(progress, f"shards: reusing {directory} ({shards.num_tokens:,} tokens, "
                       f"{shards.num_documents:,} documents)")
        return shards
    _remove_dead_builds(os.path.dirname(directory))
    workers = workers or os.cpu_count() or 1
    start = time.perf_counter()
    with atomic_directory(directory) as tmp:
        meta = _write_shards(tmp, files, tokenizer, layout, text_field, workers, progress)
        meta["seconds"] = round(time.perf_counter() - start, 2)
        with open(os.path.join(tmp, "meta.json"), "w", encoding="utf-8") as f:
            json.dump(meta, f, indent=1)
    for report in meta["files"]:
        if report["repairs"]:
            _log(progress, "  " + FileReport(**report).summary())
    shards = Shards(directory)
    mb = sum(os.path.getsize(p) for p in files) / 1e6
    _log(progress, f"shards: {shards.num_tokens:,} tokens, {len(shards.sentences) - 1:,} sentences, "
                   f"{shards.num_documents:,} documents from {len(files)} files ({mb:.1f} MB) "
                   f"in {meta['seconds']:.1f}s -> {directory}")
    return shards


def _write_shards(tmp: str, files: list[str], tokenizer: Tokenizer, layout: str, text_field: str,
                  workers: int, progress: bool) -> dict:
    from ..progress import progress as progress_bar

    dtype = np.uint16 if tokenizer.vocab_size <= 1 << 16 else np.uint32
    reports = [FileReport(path) for path in files]
    total = sum(os.path.getsize(p) for p in files)
    counts = {"tokens": 0, "sentences": 0, "documents": 0}
    carry = False  # a document began in an earlier chunk but has no sentence yet
    bar = progress_bar(total=total, unit="B", unit_scale=True, desc="tokenizing", disable=not progress)
    with open(os.path.join(tmp, "tokens.bin"), "wb") as tokens_f, \
            open(os.path.join(tmp, "sentences.bin"), "wb") as sentences_f, \
            open(os.path.join(tmp, "documents.bin"), "wb") as documents_f:
        sentences_f.write(np.zeros(1, dtype=np.int64).tobytes())

        def write(result):
            nonlocal carry
            ids, lengths, starts, trailing = result
            if len(lengths):
                starts[0] |= carry
                carry = False
            carry = carry or trailing
            tokens_f.write(ids.astype(dtype, copy=False).tobytes())
            ends = counts["tokens"] + np.cumsum(lengths, dtype=np.int64)
            sentences_f.write(ends.tobytes())
            documents_f.write((counts["sentences"] + np.flatnonzero(starts)).astype(np.int64).tobytes())
            counts["tokens"] += int(lengths.sum())
            counts["sentences"] += len(lengths)
            counts["documents"] += int(starts.sum())

        chunks = _chunks(files, reports, layout, text_field)
        context = multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")
        with context.Pool(workers, initializer=_init_worker, initargs=(tokenizer.backend.to_str(),)) as pool:
            pending = deque()
            for chunk, size in chunks:
                pending.append(pool.apply_async(_tokenize_chunk, (chunk,)))
                bar.update(size)
                if len(pending) >= 2 * workers:  # bounded: at most this many chunks in memory
                    write(pending.popleft().get())
            while pending:
                write(pending.popleft().get())
        documents_f.write(np.array([counts["sentences"]], dtype=np.int64).tobytes())
    bar.close()
    if counts["tokens"] == 0:
        raise BertforgeError(f"{', '.join(files[:3])}{' ...' if len(files) > 3 else ''}: no text found "
                             "(the corpus is empty after reading)")
    return {
        "format_version": FORMAT_VERSION, "dtype": np.dtype(dtype).name, "vocab_size": tokenizer.vocab_size,
        "num_tokens": counts["tokens"], "num_sentences": counts["sentences"], "num_documents": counts["documents"],
        "layout": layout, "text_field": text_field,
        "files": [r.__dict__ for r in reports],
    }


def _chunks(files, reports, layout, text_field) -> Iterator[tuple[list, int]]:
    chunk, size = [], 0
    for path, report in zip(files, reports):
        for unit in read_units(path, report, layout, text_field):
            chunk.append(unit)
            size += len(unit[1]) + 1
            if size >= CHUNK_CHARS:
                yield chunk, size
                chunk, size = [], 0
    if chunk:
        yield chunk, size


_backend = None
_by_words = False
# Normalizers and pre-tokenizer under which tokenizing word by word is exact (see `encode_sentences`).
LOCAL_NORMALIZERS = {"BertNormalizer", "Lowercase", "StripAccents", "NFD", "NFC", "NFKD", "NFKC"}


def word_local(tokenizer_json: str) -> bool:
    """Whether the pipeline acts within space-free stretches of text (BERT's does)."""
    spec = json.loads(tokenizer_json)
    normalizer = spec.get("normalizer") or {}
    parts = normalizer.get("normalizers", [normalizer]) if normalizer.get("type") == "Sequence" else [normalizer]
    return ((spec.get("pre_tokenizer") or {}).get("type") == "BertPreTokenizer"
            and all(not n or n.get("type") in LOCAL_NORMALIZERS for n in parts))


def _init_worker(tokenizer_json: str) -> None:
    global _backend, _by_words
    from tokenizers import Tokenizer as Backend

    # Each worker is one process; the Rust library's own threads would only compete with the others.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    _backend = Backend.from_str(tokenizer_json)
    _by_words = word_local(tokenizer_json)


def _tokenize_chunk(units: list[tuple[bool, str, bool]]):
    """Split paragraphs into sentences and tokenize them. Returns the ids, each sentence's length,
    whether each sentence starts a document, and whether a document start is still unclaimed."""
    sentences, starts = [], []
    pending = False
    for new_document, text, is_paragraph in units:
        pending = pending or new_document
        for sentence in (split_sentences(text) if is_paragraph else [text]):
            sentences.append(sentence)
            starts.append(pending)
            pending = False
    ids, lengths = encode_sentences(_backend, sentences, _by_words)
    # Sentences with no tokens (only control characters, say) are dropped; a document start they
    # carried moves to the next sentence that has tokens.
    kept_starts, carry = [], False
    for length, start in zip(lengths, starts):
        carry = carry or start
        if length:
            kept_starts.append(carry)
            carry = False
    return ids, lengths[lengths > 0], np.array(kept_starts, dtype=bool), carry or pending


def encode_sentences(backend, sentences: list[str], by_words: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """The token ids of `sentences` back to back, and each sentence's length.

    With `by_words`, each distinct space-separated word of the batch is tokenized once and the
    sentences are assembled from their words' ids: natural text repeats its words so much that this
    cuts the tokenizer's work about fivefold. It is exact for BERT's pipeline (`word_local`), where
    every step (cleaning, accent and case folding, splitting on whitespace and punctuation,
    WordPiece) acts within a space-free stretch of text, so a sentence's pieces are the
    concatenation of its words' pieces.
    """
    if not by_words:
        encoded = [e.ids for e in backend.encode_batch_fast(sentences, add_special_tokens=False)]
        lengths = np.array([len(ids) for ids in encoded], dtype=np.int64)
        return np.fromiter((i for ids in encoded for i in ids), dtype=np.int64, count=int(lengths.sum())), lengths
    if not sentences:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    words = " ".join(sentences).split(" ")  # every sentence's words in order ("" between double spaces)
    words_per_sentence = np.array([sentence.count(" ") + 1 for sentence in sentences], dtype=np.int64)
    unique = list(set(words))
    index = {word: i for i, word in enumerate(unique)}
    occurrence = np.array([index[word] for word in words], dtype=np.int64)  # the distinct word at each place
    # One call on the distinct words joined by spaces: per-input overhead makes thousands of tiny
    # inputs slower than one long one. Each token is given back to its word by its offset.
    encoding = backend.encode(" ".join(unique), add_special_tokens=False)
    starts = np.cumsum([0] + [len(word) + 1 for word in unique[:-1]])
    offsets = np.fromiter((start for start, _ in encoding.offsets), dtype=np.int64, count=len(encoding))
    owner = np.searchsorted(starts, offsets, side="right") - 1  # the word of each token, ascending
    count = np.bincount(owner, minlength=len(unique))  # pieces of each distinct word
    first = np.cumsum(count) - count
    # Gather each occurrence's pieces: position k of the output is piece (k - its word's start)
    # of that word.
    pieces = count[occurrence]
    ends = np.cumsum(pieces)
    where = np.repeat(first[occurrence] - (ends - pieces), pieces) + np.arange(int(ends[-1]) if len(ends) else 0)
    ids = np.array(encoding.ids, dtype=np.int64)[where]
    lengths = np.add.reduceat(pieces, np.cumsum(words_per_sentence) - words_per_sentence)
    return ids, lengths


def _log(enabled: bool, message: str) -> None:
    if enabled:
        print(message, file=sys.stderr)
