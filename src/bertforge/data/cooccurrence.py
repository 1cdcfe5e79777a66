"""Word co-occurrence counts for GloVe, in bounded memory.

As GloVe's `cooccur` tool counts them: words outside the vocabulary are dropped first (they take no
place in the window), and, given `keep`, each occurrence of word k is kept with probability keep[k]
(word2vec's subsampling of frequent words, applied before the window as Levy et al. 2015's "dirty"
subsampling, so that the window reaches past the dropped words); then a symmetric window of
`window` words on each side, each pair weighted 1/distance, the window never crossing a unit of the
corpus reader (a line or paragraph).
The counts are symmetric, so only the upper triangle (i <= j) is kept; `Cooccurrences.both_ways`
gives the trainer each entry in both directions, the diagonal doubled (GloVe adds a repeated word
to X[i][i] once from each side).

Counting goes block by block of words with numpy: keys i * V + j, sorted and summed. Sorted runs
stay in memory while they fit in a quarter of `memory_mb` and are otherwise spilled to disk; at the
end the runs are merged one key range at a time (so that corpora far larger than memory count in
the same bound, as GloVe's tool does) into `cooccurrence.bin`: (i, j, x) entries sorted by key,
described by `cooccurrence.json`.
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np

from ..atomic import atomic_file
from ..errors import BertforgeError

ENTRY = np.dtype([("i", "<i4"), ("j", "<i4"), ("x", "<f4")])
BYTES_PER_HELD = 16  # an int64 key and a float64 sum per entry while counting
FILE, INFO = "cooccurrence.bin", "cooccurrence.json"


def count(units, index: dict[str, int], folder: str, window: int = 10, memory_mb: float = 1024,
          bar=None, keep: np.ndarray | None = None, seed: int = 0, draws: int = 1) -> dict:
    """Count the co-occurrences of the words of `units` (an iterable of word lists, one per unit; words
    not in `index` are dropped, and word k is kept with probability `keep[k]` if given, drawn from a
    generator seeded `seed`) into `folder`; returns the description also written to
    `folder/cooccurrence.json`. Blocks are cut every `block_words` words, inside a unit if need be
    (the last `window` words are carried over), so that no unit, however long, exceeds the bound.
    `draws` > 1 reads `units` that many times (it must be re-iterable: a list, or an object that reads
    its files again), each pass subsampled anew, and writes the mean of the passes' counts: one draw's
    counts are a noisy sample of what subsampling keeps on average."""
    if window < 1:
        raise BertforgeError(f"window must be at least 1, got {window}")
    if not memory_mb > 0:
        raise BertforgeError(f"memory_mb must be positive, got {memory_mb}")
    passes = draws if keep is not None else 1  # without subsampling every pass would count the same
    if passes > 1 and iter(units) is units:
        raise BertforgeError("draws > 1 reads the units again: give a list or a re-iterable, not a generator")
    vocab = len(index)
    budget = int(memory_mb * 2**20)
    runs = _Runs(os.path.join(folder, "runs"), budget // 4 // BYTES_PER_HELD, vocab)
    # the raw pairs of a block take ~40 bytes each while sorted: a block's words x window x 40 <= budget / 4
    block_words = max(100, budget // 4 // (window * 40))
    ids, unit_of, unit_number, words_seen = [], [], 0, 0
    carry = (np.empty(0, np.int64), np.empty(0, np.int64))  # the last `window` words of the previous block
    rng = np.random.default_rng(seed)  # one draw per word in the vocabulary, in corpus order
    for words in (words for _ in range(passes) for words in units):
        words_seen += len(words)
        if bar is not None:
            bar.update(len(words))
        kept = [index[w] for w in words if w in index]
        if keep is not None and kept:
            ids_here = np.asarray(kept)
            kept = ids_here[rng.random(len(ids_here)) < keep[ids_here]].tolist()
        for start in range(0, len(kept), block_words):
            piece = kept[start:start + block_words]
            ids.extend(piece)
            unit_of.extend([unit_number] * len(piece))
            if len(ids) >= block_words:
                carry = _count_block(ids, unit_of, carry, window, vocab, runs)
                ids, unit_of = [], []
        unit_number += 1
    _count_block(ids, unit_of, carry, window, vocab, runs)
    entries = runs.merge_into(os.path.join(folder, FILE), scale=1 / passes)
    info = {"vocab": vocab, "window": window, "entries": entries, "words": words_seen // passes, "draws": passes,
            "format": "upper triangle", "dtype": "i int32, j int32, x float32"}
    with atomic_file(os.path.join(folder, INFO)) as f:
        json.dump(info, f, indent=1)
    return info


def _count_block(ids: list[int], unit_of: list[int], carry, window: int, vocab: int, runs: "_Runs"):
    """Add the pairs whose later word is in this block (earlier ones may be in `carry`) to `runs`;
    returns the carry for the next block."""
    first = len(carry[0])
    ids_a = np.concatenate([carry[0], np.asarray(ids, np.int64)])
    unit_a = np.concatenate([carry[1], np.asarray(unit_of, np.int64)])
    keys, sums = [], []
    for d in range(1, window + 1):
        left, right = ids_a[:-d], ids_a[d:]
        ok = unit_a[:-d] == unit_a[d:]
        ok[:max(first - d, 0)] = False  # both words in the carry: counted with the previous block
        low, high = np.minimum(left[ok], right[ok]), np.maximum(left[ok], right[ok])
        keys.append(low * vocab + high)
        sums.append(np.full(len(low), 1.0 / d))
    if keys:
        runs.add(*reduce(np.concatenate(keys), np.concatenate(sums)))
    return ids_a[-window:], unit_a[-window:]


def read(folder: str) -> tuple[np.ndarray, dict]:
    """The counted entries (memory-mapped) and their description."""
    with open(os.path.join(folder, INFO)) as f:
        info = json.load(f)
    path = os.path.join(folder, FILE)
    if os.path.getsize(path) != info["entries"] * ENTRY.itemsize:
        raise BertforgeError(f"{path}: {os.path.getsize(path)} bytes, not the {info['entries']} entries "
                             f"{INFO} describes; delete the folder to count again")
    if info["entries"] == 0:
        return np.empty(0, ENTRY), info
    return np.memmap(path, dtype=ENTRY, mode="r", shape=(info["entries"],)), info


def both_ways(entries: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(i, j, x) of the full symmetric matrix from upper-triangle entries: (j, i) added beside
    each off-diagonal (i, j), and diagonal counts doubled."""
    i, j, x = entries["i"], entries["j"], entries["x"].astype(np.float32)
    off = i != j
    return (np.concatenate([i, j[off]]), np.concatenate([j, i[off]]),
            np.concatenate([np.where(off, x, 2 * x), x[off]]))


def reduce(keys: np.ndarray, sums: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique keys and the sum of each one's values (a stable sort: the same sums everywhere)."""
    if len(keys) == 0:
        return keys, sums
    order = np.argsort(keys, kind="stable")
    keys, sums = keys[order], sums[order]
    starts = np.flatnonzero(np.concatenate([[True], keys[1:] != keys[:-1]]))
    return keys[starts], np.add.reduceat(sums, starts)


class _Runs:
    """Sorted runs of (keys, sums): in memory up to `limit` entries, merged there when more, and
    spilled to `folder` when the merged run is still over half the limit."""

    def __init__(self, folder: str, limit: int, vocab: int):
        self.folder, self.limit, self.vocab = folder, max(limit, 1), vocab
        self.held: list[tuple[np.ndarray, np.ndarray]] = []
        self.spilled: list[str] = []

    def add(self, keys: np.ndarray, sums: np.ndarray) -> None:
        self.held.append((keys, sums))
        if sum(len(k) for k, _ in self.held) > self.limit:
            self.held = [reduce(*_concatenate(self.held))]
            if len(self.held[0][0]) > self.limit // 2:
                self._spill(*self.held.pop())

    def _spill(self, keys: np.ndarray, sums: np.ndarray) -> None:
        os.makedirs(self.folder, exist_ok=True)
        stem = os.path.join(self.folder, f"run-{len(self.spilled)}")
        np.save(stem + ".keys.npy", keys)
        np.save(stem + ".sums.npy", sums)
        self.spilled.append(stem)

    def merge_into(self, path: str, scale: float = 1.0) -> int:
        """Write every run's entries, merged, to `path` (ENTRY records sorted by key), each sum times
        `scale`; returns how many."""
        if not self.spilled:
            keys, sums = reduce(*_concatenate(self.held)) if self.held else (np.empty(0, np.int64), np.empty(0))
            self.held = []
            with atomic_file(path, "wb") as f:
                _write_entries(f, keys, sums * scale, self.vocab)
            return len(keys)
        if self.held:
            self._spill(*reduce(*_concatenate(self.held)))
            self.held = []
        runs = [(np.load(s + ".keys.npy", mmap_mode="r"), np.load(s + ".sums.npy", mmap_mode="r")) for s in self.spilled]
        total = 0
        with atomic_file(path, "wb") as f:
            for low, high in _key_ranges(runs, self.limit):
                parts = [(k[np.searchsorted(k, low):np.searchsorted(k, high)],
                          s[np.searchsorted(k, low):np.searchsorted(k, high)]) for k, s in runs]
                keys, sums = reduce(*_concatenate(parts))
                _write_entries(f, keys, sums * scale, self.vocab)
                total += len(keys)
        shutil.rmtree(self.folder, ignore_errors=True)
        return total


def _concatenate(runs) -> tuple[np.ndarray, np.ndarray]:
    return np.concatenate([np.asarray(k) for k, _ in runs]), np.concatenate([np.asarray(s) for _, s in runs])


def _key_ranges(runs, limit: int):
    """[low, high) key ranges holding about `limit` entries of all runs together: boundaries taken at
    even steps through every run's sorted keys."""
    total = sum(len(k) for k, _ in runs)
    pieces = max(1, -(-total // limit))
    marks = np.unique(np.concatenate([np.asarray(k[np.linspace(0, len(k) - 1, pieces + 1).astype(np.int64)])
                                      for k, _ in runs if len(k)]))
    cuts = marks[np.linspace(0, len(marks) - 1, pieces + 1).astype(np.int64)][1:-1]
    bounds = [np.iinfo(np.int64).min, *cuts.tolist(), np.iinfo(np.int64).max]
    return [(bounds[b], bounds[b + 1]) for b in range(len(bounds) - 1) if bounds[b] < bounds[b + 1]]


def _write_entries(f, keys: np.ndarray, sums: np.ndarray, vocab: int) -> None:
    records = np.empty(len(keys), ENTRY)
    records["i"], records["j"] = np.divmod(keys, vocab)
    records["x"] = sums
    f.write(records.tobytes())
