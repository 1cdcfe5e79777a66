"""GloVe word vectors (Pennington et al., 2014): `bertforge word-vectors`.

Three stages, each saved in the run's folder (`OUT.run/` beside the vectors) so that `--resume`
continues where a run stopped:
1. the vocabulary: words (lowercased by default) seen at least `min_count` times, most frequent
   first (`vocab.txt`, `word count`, as GloVe's `vocab_count` writes it);
2. the co-occurrence counts (`data/cooccurrence.py`: a symmetric window, 1/distance, bounded memory),
   frequent words subsampled first as word2vec does (each occurrence of a word of frequency f kept with
   probability sqrt(t / f), Mikolov et al. 2013; GloVe's tool keeps every word: `subsample` 0);
3. the weighted least-squares fit: J = sum f(X_ij) (w_i . c_j + b_i + b~_j - log X_ij)^2 with
   f(x) = min(1, x / x_max)^alpha (x_max 10, as GloVe's demo for a corpus of this size), by AdaGrad
   on shuffled mini-batches of entries, each word's gradient summed over its entries (`Glove.step`
   says how this departs from GloVe's tool). The vectors written are w + c (GloVe's default
   `-model 2`), or w alone (`vectors="word"`, its `-model 1`), their mean and dominant directions taken
   away if asked (`remove_directions`, Mu & Viswanath's "all-but-the-top").
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch

from .atomic import atomic_file
from .checks import COMMAND_RULES, check
from .data import cooccurrence
from .data.corpus import FileReport, find_files, read_units
from .data.words import split_words
from .errors import BertforgeError
from .formats.tensors import read_safetensors
from .formats.word_vectors import write_vectors
from .paths import check_apart, check_fingerprint, fingerprint
from .progress import progress as progress_bar

STATE, VOCAB, METRICS = "state.safetensors", "vocab.txt", "metrics.jsonl"
VECTORS = ("sum", "word")  # GloveOptions.vectors
PIECE = 1 << 16  # entries read together from the counts when shuffling
CLIP = 100.0  # the largest gradient element, as GloVe's tool clips


@dataclass
class GloveOptions:
    dim: int = 300
    window: int = 10  # words on each side (the paper's 10)
    min_count: int = 5
    max_vocab: int | None = None
    lowercase: bool = True
    # word2vec's (and gensim's) default t. On the 5.7M-word Gutenberg corpus (100-d, 6 epochs) it raised
    # WordSim-353 from 0.22 to 0.32 and analogies from 14.8% to 15.3%; 3e-4 gave 0.34 and 13.0%, 1e-4 0.31
    # and 9.8%: the frequent words it drops ("the", "of", "and") widen every window over the others
    subsample: float = 1e-3
    # Subsampling's draws averaged: one draw's counts are a noisy sample of what it keeps on average (on
    # Gutenberg two draws' counts gave WordSim-353 0.29-0.32 and 0.23-0.25 whatever the fit's seed); each
    # draw reads and counts the corpus again (docs/cove.md, "Subsampling's draws averaged")
    draws: int = 1
    # GloVe's demo.sh value, for corpora of millions of words; the paper's 100 is for billions (on the
    # 5.7M-word Gutenberg corpus 10 gave WordSim-353 0.25 and analogies 12.0% against 0.13 and 5.4%)
    x_max: float = 10.0
    alpha: float = 0.75
    lr: float = 0.2  # AdaGrad's (on Gutenberg, 5 epochs: 0.05 WordSim 0.11, 0.2 0.26, 0.4 0.24)
    epochs: int = 15  # GloVe's demo (the paper: 50 below 300 dimensions, 100 at 300)
    batch_size: int = 65536  # entries per update (8,192 scored the same per epoch, 1.3x slower)
    memory_mb: int = 1024  # the bound of counting and of the shuffled entries held while training
    max_minutes: float | None = None  # the whole run, counting included; the vectors are written at the end
    seed: int = 0
    # What is written: "sum", w + c (GloVe's -model 2), or "word", w alone (-model 1). w_i . c_j fits
    # log X_ij, so the cosine of two sums holds how often the two words occur together: relatedness,
    # which WordSim-353 rewards, and which analogies, asking for words used alike, do not (on Gutenberg,
    # 100-d: sum 0.294 and 13.8%, word 0.245 and 18.1%; Levy et al. 2015 found the same of w + c)
    vectors: str = "sum"
    # Take the written vectors' mean away, then their top D principal directions (Mu & Viswanath, 2018:
    # they carry word frequency more than meaning; their rule is D = dim / 100). 0 writes the fit as it is
    # (docs/cove.md, "The dominant direction removed")
    remove_directions: int = 0

    def __post_init__(self):
        for name, value in asdict(self).items():
            if name not in ("lowercase", "vectors"):
                check(name, value, COMMAND_RULES["word-vectors"].get(name))
        if self.vectors not in VECTORS:
            raise BertforgeError(f"--vectors must be one of {', '.join(VECTORS)}, got {self.vectors!r}")
        if self.remove_directions >= self.dim:
            raise BertforgeError(f"--remove-directions must be below --dim ({self.dim}), got {self.remove_directions}")


def word_vectors(corpus, output: str, *, dim: int = GloveOptions.dim, window: int = GloveOptions.window,
                 min_count: int = GloveOptions.min_count, max_vocab: int | None = GloveOptions.max_vocab,
                 cased: bool = False, subsample: float = GloveOptions.subsample, draws: int = GloveOptions.draws,
                 x_max: float = GloveOptions.x_max, alpha: float = GloveOptions.alpha,
                 lr: float = GloveOptions.lr, epochs: int = GloveOptions.epochs,
                 batch_size: int = GloveOptions.batch_size, memory_mb: int = GloveOptions.memory_mb,
                 max_minutes: float | None = GloveOptions.max_minutes, layout: str = "auto",
                 seed: int = GloveOptions.seed, vectors: str = GloveOptions.vectors,
                 remove_directions: int = GloveOptions.remove_directions, resume: bool = False,
                 progress: bool = True) -> dict:
    """`bertforge word-vectors` from Python: GloVe vectors learned from `corpus` (files, folders or
    patterns) into `output` (GloVe's text format; `.vec` word2vec text, `.bin` word2vec binary), the
    run's state in `output.run/`. Every keyword is the command's option of the same name (its
    argparse dest), with the command's default (`GloveOptions`'); `progress` is the Python API's own.
    Returns `train_word_vectors`'s summary."""
    options = GloveOptions(dim=dim, window=window, min_count=min_count, max_vocab=max_vocab, lowercase=not cased,
                           subsample=subsample, draws=draws, x_max=x_max, alpha=alpha, lr=lr, epochs=epochs,
                           batch_size=batch_size, memory_mb=memory_mb, max_minutes=max_minutes, seed=seed,
                           vectors=vectors, remove_directions=remove_directions)
    return train_word_vectors(corpus, output, options, layout=layout, resume=resume, progress=progress)


def train_word_vectors(corpus, out: str, options: GloveOptions | None = None, layout: str = "auto",
                       resume: bool = False, progress: bool = True) -> dict:
    """Learn GloVe vectors from the text files `corpus` (files, folders or patterns) into `out` (GloVe's
    text format; `.vec` word2vec text, `.bin` word2vec binary). Returns a summary: words, entries,
    epochs done, the last epoch's cost, seconds, and whether the run finished."""
    o = options or GloveOptions()
    start = time.perf_counter()
    files = find_files(corpus)
    if not files:
        raise BertforgeError(f"no text files in {corpus!r}")
    for written in (out, out + ".run"):  # before any work: never over, or inside, the text they come from
        check_apart(written, corpus, *files)
    folder = out + ".run"
    settings = {**asdict(o), "files": [os.path.abspath(f) for f in files], "layout": layout,
                "data": fingerprint(files)}
    _open_run(folder, settings, resume)
    elapsed = _seconds_so_far(folder)
    words, counts = _vocabulary(folder, files, o, layout, progress)
    index = {w: k for k, w in enumerate(words)}
    if not os.path.exists(os.path.join(folder, cooccurrence.INFO)):
        bar = progress_bar(desc="counting co-occurrences", unit="word", unit_scale=True, disable=not progress)
        cooccurrence.count(_Corpus(files, o.lowercase, layout), index, folder, o.window, o.memory_mb, bar,
                           keep=_kept_share(counts, o.subsample), seed=o.seed, draws=o.draws)
        bar.close()
    entries, info = cooccurrence.read(folder)
    counted = time.perf_counter() - start
    deadline = None if o.max_minutes is None else start + o.max_minutes * 60 - elapsed
    model = Glove(len(words), o.dim, o.seed)
    position = model.load(folder) if os.path.exists(os.path.join(folder, STATE)) else (0, 0, 0)
    status = _fit(model, entries, o, folder, position, deadline, progress, elapsed - start)
    write_vectors(out, words, all_but_the_top(model.vectors(o.vectors), o.remove_directions))
    summary = {"words": len(words), "entries": info["entries"], "corpus_words": info["words"],
               "epochs": model.epoch, "cost": model.cost, "status": status, "count_seconds": round(counted, 1),
               "seconds": round(elapsed + time.perf_counter() - start, 1)}
    with atomic_file(os.path.join(folder, "summary.json")) as f:
        json.dump(summary, f, indent=1)
    return summary


def _open_run(folder: str, settings: dict, resume: bool) -> None:
    """Make the run's folder, or check that the one resumed was made with the same settings."""
    path = os.path.join(folder, "settings.json")
    if os.path.exists(path) and not resume:
        raise BertforgeError(f"{folder} holds a run already: --resume to continue it, or delete it to start again")
    if resume:
        if not os.path.exists(path):
            raise BertforgeError(f"nothing to resume: {path} does not exist")
        with open(path) as f:
            saved = {"draws": 1, **json.load(f)}  # a run from before --draws counted one draw
        # what a resumed run may change: how long it runs, and which of its vectors it writes
        changed = [k for k in settings if k not in ("epochs", "max_minutes", "data", "vectors", "remove_directions")
                   and saved.get(k) != settings[k]]
        if changed:
            raise BertforgeError(f"--resume with other settings than the run in {folder}: {', '.join(changed)}")
        # the same paths may hold other text now (a run from before fingerprints has none: not checked)
        check_fingerprint(folder, saved.get("data"), settings["data"], "corpus files")
        return
    os.makedirs(folder, exist_ok=True)
    with atomic_file(path) as f:
        json.dump(settings, f, indent=1)


def _seconds_so_far(folder: str) -> float:
    """The seconds the run had trained when its state was last saved (0 before any)."""
    from safetensors import safe_open

    path = os.path.join(folder, STATE)
    if not os.path.exists(path):
        return 0.0
    with safe_open(path, "pt") as f:
        return float(f.metadata().get("elapsed_s", 0.0))


def _units(files: list[str], lowercase: bool, layout: str):
    """The corpus as word lists, one per line or paragraph (the window never crosses one)."""
    for path in files:
        for _, text, _ in read_units(path, FileReport(path), layout):
            yield split_words(text.lower() if lowercase else text)


class _Corpus:
    """`_units` of the files, read again at every pass (subsampling's draws)."""

    def __init__(self, files: list[str], lowercase: bool, layout: str):
        self.files, self.lowercase, self.layout = files, lowercase, layout

    def __iter__(self):
        return _units(self.files, self.lowercase, self.layout)


def _kept_share(counts: list[int], t: float) -> np.ndarray | None:
    """Each word's chance to be kept by subsampling: sqrt(t / f) for a word of frequency f above t,
    frequency among the words kept in the vocabulary (word2vec's first formula)."""
    if not t:
        return None
    frequency = np.asarray(counts, np.float64) / sum(counts)
    return np.minimum(1.0, np.sqrt(t / frequency))


def _vocabulary(folder: str, files: list[str], o: GloveOptions, layout: str,
                progress: bool) -> tuple[list[str], list[int]]:
    """The words kept, most frequent first (ties alphabetical), and their counts, read from `vocab.txt`
    once counted."""
    path = os.path.join(folder, VOCAB)
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            lines = [line.rsplit(" ", 1) for line in f]
        return [w for w, _ in lines], [int(n) for _, n in lines]
    counts: dict[str, int] = {}
    bar = progress_bar(desc="counting words", unit="word", unit_scale=True, disable=not progress)
    for words in _units(files, o.lowercase, layout):
        for w in words:
            counts[w] = counts.get(w, 0) + 1
        bar.update(len(words))
    bar.close()
    kept = sorted((w for w, n in counts.items() if n >= o.min_count), key=lambda w: (-counts[w], w))
    kept = kept[:o.max_vocab] if o.max_vocab else kept
    if not kept:
        raise BertforgeError(f"no word occurs {o.min_count} times in the corpus; lower --min-count")
    with atomic_file(path) as f:
        f.writelines(f"{w} {counts[w]}\n" for w in kept)
    return kept, [counts[w] for w in kept]


def glove_cost(w, c, bw, bc, i, j, x, x_max: float, alpha: float):
    """Per entry: (the weighted difference f(x) * diff, the cost 0.5 * f(x) * diff^2)."""
    return _cost(w[i], c[j], bw[i], bc[j], x, x_max, alpha)


def _cost(wi, cj, bwi, bcj, x, x_max: float, alpha: float):
    diff = torch.linalg.vecdot(wi, cj) + bwi + bcj - torch.log(x)  # (N,)
    weighted = torch.clamp(x / x_max, max=1.0).pow(alpha) * diff
    return weighted, 0.5 * weighted * diff


class Glove:
    """The parameters and AdaGrad sums of one GloVe fit, and its position (epoch, piece group)."""

    def __init__(self, vocab: int, dim: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        self.w = (torch.rand(vocab, dim, generator=g) - 0.5) / dim  # GloVe's initialisation
        self.c = (torch.rand(vocab, dim, generator=g) - 0.5) / dim
        self.bw = (torch.rand(vocab, generator=g) - 0.5) / dim
        self.bc = (torch.rand(vocab, generator=g) - 0.5) / dim
        self.sums = {name: torch.ones_like(getattr(self, name)) for name in ("w", "c", "bw", "bc")}
        # Each word's summed gradient is gathered here, then its rows set back to zero: a scatter
        # into the whole table is cheaper than sorting the batch's words (torch.unique) to compact it.
        self.summed = {name: torch.zeros_like(getattr(self, name)) for name in ("w", "c", "bw", "bc")}
        self.epoch, self.cost = 0, None

    def step(self, i: torch.Tensor, j: torch.Tensor, x: torch.Tensor, lr: float, x_max: float, alpha: float):
        """One AdaGrad update on the entries (i, j, x): each word's gradient summed over its entries,
        its squares added to the word's sums, then the step lr x gradient / sqrt(sums). (GloVe's tool
        puts lr inside the sums and divides by them before adding: fine one entry at a time, but on a
        batch's summed gradients the first steps of frequent words were unbounded and 300-d vectors
        diverged.) Returns the entries' summed cost."""
        wi, cj = self.w[i], self.c[j]  # gathered once: the cost and both gradients read them
        weighted, cost = _cost(wi, cj, self.bw[i], self.bc[j], x, x_max, alpha)
        grads = {"w": (weighted[:, None] * cj).clamp_(-CLIP, CLIP), "c": (weighted[:, None] * wi).clamp_(-CLIP, CLIP),
                 "bw": weighted, "bc": weighted}
        for rows, names in ((i, ("w", "bw")), (j, ("c", "bc"))):
            touched = torch.bincount(rows, minlength=len(self.w)).nonzero().squeeze(1)  # the words, sorted
            for name in names:
                summed = self.summed[name].index_add_(0, rows, grads[name])
                g = summed[touched]
                summed[touched] = 0
                sums = self.sums[name].index_add_(0, touched, g * g)
                getattr(self, name).index_add_(0, touched, g.div_(sums[touched].sqrt_()), alpha=-lr)
        return cost.sum()

    def vectors(self, kind: str = "sum") -> np.ndarray:
        return (self.w + self.c if kind == "sum" else self.w).numpy()

    def save(self, folder: str, position: tuple[int, int, int], elapsed_s: float) -> None:
        """Parameters, sums, the position (epoch, group, batch) to continue from and the seconds
        trained so far, atomically."""
        from safetensors.torch import save

        tensors = {name: getattr(self, name) for name in ("w", "c", "bw", "bc")}
        tensors.update({f"sum.{name}": t for name, t in self.sums.items()})
        meta = {"position": json.dumps(list(position)), "epoch": str(self.epoch), "cost": json.dumps(self.cost),
                "elapsed_s": str(round(elapsed_s, 1))}
        with atomic_file(os.path.join(folder, STATE), "wb") as f:
            f.write(save(tensors, metadata=meta))

    def load(self, folder: str) -> tuple[int, int, int]:
        """The saved parameters and sums; returns the position to continue from."""
        from safetensors import safe_open

        path = os.path.join(folder, STATE)
        tensors = read_safetensors(path)
        for name in ("w", "c", "bw", "bc"):
            if tensors[name].shape != getattr(self, name).shape:
                raise BertforgeError(f"{path}: {name} has shape {tuple(tensors[name].shape)}, the run needs "
                                     f"{tuple(getattr(self, name).shape)}")
            setattr(self, name, tensors[name])
            self.sums[name] = tensors[f"sum.{name}"]
        with safe_open(path, "pt") as f:
            meta = f.metadata()
        self.epoch, self.cost = int(meta["epoch"]), json.loads(meta["cost"])
        return tuple(json.loads(meta["position"]))


def all_but_the_top(vectors: np.ndarray, count: int) -> np.ndarray:
    """All-but-the-top (Mu & Viswanath, 2018): the vectors' mean taken away, then their `count` top
    principal directions (of the centred vectors), which in trained word vectors follow how frequent a
    word is more than what it means. `count` 0 returns the vectors untouched."""
    if count == 0:
        return vectors
    centred = vectors.astype(np.float64) - vectors.mean(0, dtype=np.float64)
    # the principal directions from the dim x dim scatter matrix: no words x dim factor as an SVD would make
    directions = np.linalg.eigh(centred.T @ centred)[1]  # by eigenvalue, ascending
    top = directions[:, ::-1][:, :count].T  # rows: the directions, unit length
    return (centred - (centred @ top.T) @ top).astype(vectors.dtype)


def shuffled_groups(entries: int, seed: int, epoch: int, group_entries: int) -> list[np.ndarray]:
    """Epoch `epoch`'s order: pieces of PIECE consecutive entries (which are sorted by word) in a
    seeded order, taken a group at a time; a group's entries are then shuffled together. With the
    whole file in one group (when it fits `group_entries`) this is a full shuffle."""
    pieces = -(-entries // PIECE)
    order = np.random.default_rng([seed, epoch]).permutation(pieces)
    per = max(1, group_entries // PIECE)
    return [order[k:k + per] for k in range(0, pieces, per)]


def _group(entries: np.ndarray, pieces: np.ndarray, seed: int, epoch: int, number: int):
    """A group's entries in both directions, shuffled: (i, j, x) tensors."""
    chunk = np.concatenate([entries[p * PIECE:(p + 1) * PIECE] for p in np.sort(pieces)])
    i, j, x = cooccurrence.both_ways(chunk)
    order = np.random.default_rng([seed, epoch, number]).permutation(len(i))
    return torch.from_numpy(i[order].astype(np.int64)), torch.from_numpy(j[order].astype(np.int64)), \
        torch.from_numpy(x[order])


def _fit(model: Glove, entries: np.ndarray, o: GloveOptions, folder: str, position: tuple[int, int, int],
         deadline: float | None, progress: bool, offset: float) -> str:
    """Train from `position` (epoch, group, batch) until `o.epochs` or the deadline; saves the state
    after every epoch, and at the deadline or an interrupt (Ctrl-C, taken between batches), so that
    a resumed run continues exactly. Returns why it stopped: done, time budget or interrupted."""
    group_entries = o.memory_mb * 2**20 // 4 // 64  # a group in both directions, shuffled, as tensors
    groups_per_epoch = len(shuffled_groups(len(entries), o.seed, 0, group_entries))
    directed = 2 * len(entries) - int(np.count_nonzero(entries["i"] == entries["j"])) if len(entries) else 0
    epoch, first_group, first_batch = position
    bar = progress_bar(total=o.epochs * groups_per_epoch, initial=epoch * groups_per_epoch + first_group,
                       desc="training", unit="group", disable=not progress)
    with _interrupts() as interrupted:
        while epoch < o.epochs:
            groups = shuffled_groups(len(entries), o.seed, epoch, group_entries)
            total = 0.0 if (first_group, first_batch) == (0, 0) else None  # a resumed epoch has no whole cost
            for number in range(first_group, len(groups)):
                i, j, x = _group(entries, groups[number], o.seed, epoch, number)
                for at in range(first_batch * o.batch_size, len(i), o.batch_size):
                    part = slice(at, at + o.batch_size)
                    cost = float(model.step(i[part], j[part], x[part], o.lr, o.x_max, o.alpha))
                    total = None if total is None else total + cost
                    stop = "interrupted" if interrupted() else None
                    if deadline is not None and time.perf_counter() > deadline:
                        stop = "time budget"
                    if stop:
                        model.save(folder, (epoch, number, at // o.batch_size + 1), time.perf_counter() + offset)
                        bar.close()
                        return stop
                first_batch = 0
                bar.update(1)
            epoch, first_group = epoch + 1, 0
            model.epoch, model.cost = epoch, None if total is None else total / max(directed, 1)
            model.save(folder, (epoch, 0, 0), time.perf_counter() + offset)
            _record(folder, {"epoch": epoch, "cost": model.cost, "elapsed_s": round(time.perf_counter() + offset, 1)})
            bar.set_postfix(cost=f"{model.cost:.4f}" if model.cost is not None else "-")
    bar.close()
    return "done"


@contextlib.contextmanager
def _interrupts():
    """Ctrl-C sets a flag read between batches instead of stopping mid-update (main thread only)."""
    seen = []
    if threading.current_thread() is not threading.main_thread():
        yield lambda: False
        return
    previous = signal.signal(signal.SIGINT, lambda *_: seen.append(True))
    try:
        yield lambda: bool(seen)
    finally:
        signal.signal(signal.SIGINT, previous)


def _record(folder: str, record: dict) -> None:
    with open(os.path.join(folder, METRICS), "a") as f:
        f.write(json.dumps(record) + "\n")
