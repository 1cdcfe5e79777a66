"""What pretraining holds out for evaluation: about `eval_fraction` of the text, never trained on.

Where the corpus has many small documents, whole documents are held out, drawn with the run's seed:
the held-out text then shares no document with the training text. Where documents are few or long,
a whole document would be a large share of the text (two of a user's five novels: 40% never trained
on), so the ends of documents are held out instead: the last sentences of each, about
`eval_fraction` of it, cut at a sentence boundary (where documents are short, the last sentences of
some of them, so that each held-out stretch is long enough to be read in context). Each side of a
cut is read as a document of its own, so no instance (a sentence pair, a packed row, a stream)
crosses it, and a random next sentence is drawn within its own side. A corpus so small that its
share is less than a sentence holds out the shortest last sentences of two documents, if they are
at most a fifth of it (as the split by documents did, a tiny corpus still gets an evaluation).

The split is a pure function of the documents' sizes, the fraction and the seed: it is computed
each time the data is opened (never cached with the shards), and a resumed run, whose data settings
are checked to be the same, holds out the same text.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..errors import BertforgeError

LEAST_FALLBACK = 0.2  # the most of a tiny corpus's text held out when its share is less than a sentence
LEAST_SPAN = 128  # units (tokens, words) a held-out end is long enough at to be read in context: BERT's sequence


@dataclass
class HeldOut:
    """Where each document's held-out text begins, as an offset into it in `sizes`' units: 0 holds
    out the whole document, its size none of it. `whole`: whole documents were held out (else the
    ends of documents)."""

    cuts: np.ndarray  # (D,)
    sizes: np.ndarray  # (D,)
    whole: bool

    @property
    def held(self) -> int:
        """Units of text held out."""
        return int((self.sizes - self.cuts).sum())

    @property
    def share(self) -> float:
        return self.held / max(int(self.sizes.sum()), 1)

    @property
    def train_documents(self) -> int:
        """Documents with text to train on."""
        return int((self.cuts > 0).sum())

    @property
    def eval_documents(self) -> int:
        """Documents held out whole."""
        return int(((self.cuts == 0) & (self.sizes > 0)).sum())

    @property
    def ended_documents(self) -> int:
        """Documents whose end is held out (and the rest trained on)."""
        return int(((self.cuts > 0) & (self.cuts < self.sizes)).sum())

    def facts(self, counted: str, pieces: int, piece_name: str) -> dict:
        """What was held out, for run_config.json and the run's first lines: its share of the text
        (`counted`: tokens, words) and `pieces` of it (`piece_name`: sentences, words)."""
        return {"share": round(self.share, 4), counted: self.held, piece_name: pieces,
                "whole_documents": self.eval_documents, "ended_documents": self.ended_documents}


def describe(held: dict) -> str:
    """`held out for evaluation: 2.0% of the text (1,234 sentences from the ends of 5 documents)`."""
    pieces = next(k for k in ("sentences", "words") if k in held)
    parts = []
    if held["whole_documents"]:
        parts.append(f"{_count(held['whole_documents'], 'whole document')}")
    if held["ended_documents"]:
        parts.append(f"{held[pieces]:,} {pieces} from the ends of {_count(held['ended_documents'], 'document')}")
    if not parts:
        return "nothing held out for evaluation"
    return f"held out for evaluation: {100 * held['share']:.1f}% of the text ({' and '.join(parts)})"


def _count(n: int, thing: str) -> str:
    return f"{n:,} {thing}{'' if n == 1 else 's'}"


def hold_out(sizes: np.ndarray, eval_fraction: float, seed: int,
             boundaries: Callable[[int], np.ndarray]) -> HeldOut:
    """About `eval_fraction` of the text held out (see the module's docstring). `sizes` are the
    documents' sizes (tokens, words); `boundaries(d)` the offsets in document d where its text may
    be cut (sentence starts), ascending, from 0 to its size.

    Whole documents when a seeded draw of them comes to the share (`_whole_documents`: at least two,
    at most 2.5 times the share: 5% at the default 2%); else the ends of documents, error-diffused over the documents in
    order so that the total comes to the share even when each document is only a few sentences long
    (then some documents give an end, of at least a quarter of the share or `LEAST_SPAN`, and the
    others none).
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    total = int(sizes.sum())
    nothing = HeldOut(sizes.copy(), sizes, whole=True)
    if eval_fraction <= 0 or total == 0:
        return nothing
    target = eval_fraction * total
    held = _whole_documents(sizes, target, seed)
    if held is not None:
        cuts = sizes.copy()
        cuts[held] = 0
        return HeldOut(cuts, sizes, whole=True)
    # A tail is at least a quarter of the share (or LEAST_SPAN): where documents are short, some of
    # them give a stretch of text long enough to be read in context, rather than each a word or two.
    least = min(target / 4, LEAST_SPAN)
    cuts, taken, seen = sizes.copy(), 0, 0
    for d, size in enumerate(sizes.tolist()):
        seen += size
        want = eval_fraction * seen - taken  # this document's tail brings the total to the share
        if size == 0 or 2 * want < least:
            continue
        offsets = np.asarray(boundaries(d), dtype=np.int64)
        tails = size - offsets  # each cut's tail, longest first
        best = int(np.argmin(np.abs(tails - max(want, least))))
        if tails[best] == size and len(offsets) > 2:
            best += 1  # a document of several sentences keeps at least its first to train on
        cuts[d] = offsets[best]
        taken += size - int(offsets[best])
    if taken == 0:  # the share is less than a sentence: the least text that can be evaluated on
        cuts = _last_sentences(sizes, boundaries)
    split = HeldOut(cuts, sizes, whole=False)
    if split.held == 0:
        n = len(sizes)
        warnings.warn(f"only {n} document(s), too short to hold out {eval_fraction:.1%} of the text: no held-out "
                      "evaluation" + (", and next-sentence negatives come from the same document" if n == 1 else ""),
                      stacklevel=3)
    return split


def _last_sentences(sizes: np.ndarray, boundaries: Callable[[int], np.ndarray]) -> np.ndarray:
    """The cuts that hold out the shortest last sentences of two documents (of one, in a corpus of
    one document), if they are at most `LEAST_FALLBACK` of the text; else none."""
    lasts = sorted((size - int(boundaries(d)[-2]), d) for d, size in enumerate(sizes.tolist()) if size)
    cuts = sizes.copy()
    for length, d in lasts[:2]:
        if (sizes - cuts).sum() + length > LEAST_FALLBACK * sizes.sum():
            break
        cuts[d] -= length
    return cuts


def _whole_documents(sizes: np.ndarray, target: float, seed: int) -> np.ndarray | None:
    """A seeded draw of whole documents whose sizes add up to the target (as close as whole
    documents come): at least two (with one, every held-out NSP negative would come from the same
    document), at most 2.5 times the target in all, leaving at least two to train on; None where
    the documents are too few or too long for that."""
    order = np.random.default_rng([seed, 7]).permutation(len(sizes))
    small = order[(sizes[order] > 0) & (sizes[order] <= 1.5 * target)]
    totals = np.cumsum(sizes[small])
    if len(totals) < 2 or totals[-1] < target:
        return None
    k = int(np.searchsorted(totals, target)) + 1  # the first k reach the target
    if k > 2 and target - totals[k - 2] < totals[k - 1] - target:
        k -= 1  # one fewer is closer
    k = max(k, 2)
    if totals[k - 1] > 2.5 * target or len(sizes) - k < 2:
        return None
    return small[:k]


def check_resumable(out: str, saved: dict) -> None:
    """Refuse to resume a run made before this split (its run_config.json has no `held_out`) that
    held text out: it held out whole documents only, and the split here would move text between its
    training and its evaluation, so it would no longer continue as it began."""
    if "held_out" not in saved and saved.get("eval_fraction", 0.02) and saved.get("eval_documents"):
        raise BertforgeError(f"{out}: a run made before held-out text was cut inside documents (it held out "
                             f"{saved['eval_documents']} whole document(s)); resumed here it would train on other "
                             "text: start a new run (or resume it with the bertforge that began it)")
