"""Pretraining instances as Google's `create_pretraining_data.py` makes them, drawn anew each epoch.

For each document, sentences are gathered until a target length is reached; a random cut makes
segment A; segment B is the rest of the gathered text or, half the time, text from a random other
document (the next-sentence-prediction negative); the pair is then trimmed to fit. ALBERT's
sentence-order pairs swap A and B instead; RoBERTa's full-sentence rows (`create_packed_instances`)
pack whole sentences across documents.

Because a document's sentences lie back to back in the shard's token array, every segment is a
plain range of it: a pair is five integers (first start, first end, second start, second end,
label: random next for NSP, swapped for SOP), which keeps a whole epoch's instances small whatever
the corpus size.
"""

from __future__ import annotations

from array import array

import numpy as np

from ..errors import BertforgeError
from .shards import Shards

A_START, A_END, B_START, B_END, IS_RANDOM = range(5)


def create_instances(shards: Shards, documents: np.ndarray, max_seq_length: int, rng: np.random.Generator,
                     short_seq_prob: float = 0.1, nsp_prob: float = 0.5, order: bool = False) -> np.ndarray:
    """Instances (N, 5) for one pass over `documents` (indices into the shards), in a random order.

    `max_seq_length` counts [CLS] and the two [SEP]s. With probability `short_seq_prob` a
    document's target length is drawn uniformly from [2, max - 3], so that the model also sees
    short sequences. `nsp_prob` is the share of B segments taken from another document.

    With `order` (ALBERT's sentence-order prediction), B always continues A and the last column
    says whether the two were swapped (half the time): both segments come from the same document,
    so topic gives nothing away. A chunk of a single sentence is cut inside it, for NSP as for SOP,
    so that labels are balanced at any `max_seq_length`.
    """
    max_tokens = max_seq_length - 3
    if max_tokens < 2:
        raise BertforgeError(f"max_seq_length must be at least 5, got {max_seq_length}")
    sentence_bounds, document_bounds = shards.sentences, shards.documents
    out = array("q")  # five int64 per instance, compact however many there are
    for doc in documents:
        first, last = int(document_bounds[doc]), int(document_bounds[doc + 1])
        bounds = np.asarray(sentence_bounds[first: last + 1])  # token offsets of this document's sentences
        n = last - first
        # As in the original: one target length per document (and per pass).
        target = max_tokens if rng.random() >= short_seq_prob else int(rng.integers(2, max_tokens + 1))
        chunk_start, i = 0, 0
        while i < n:
            if i == n - 1 or bounds[i + 1] - bounds[chunk_start] >= target:
                chunk_end = i + 1  # sentences [chunk_start, chunk_end) are gathered
                if order:
                    a, b, swapped = _ordered_pair(int(bounds[chunk_start]), int(bounds[chunk_end]),
                                                  bounds[chunk_start: chunk_end + 1], rng)
                    a, b = _truncate_pair(a, b, max_tokens, rng)
                    if a[1] > a[0] and b[1] > b[0]:
                        out.extend((*(b + a if swapped else a + b), swapped))
                    chunk_start = i + 1
                    i += 1
                    continue
                start, end = int(bounds[chunk_start]), int(bounds[chunk_end])
                if chunk_end - chunk_start >= 2:
                    a_cut = int(rng.integers(chunk_start + 1, chunk_end))
                    cut = int(bounds[a_cut])
                else:
                    # A one-sentence chunk is cut inside its sentence, so that it too can have its
                    # own continuation as B. The original always gave it a random B, which skews the
                    # labels (58% random at 64 tokens) and lets the head learn the majority class.
                    a_cut = chunk_end
                    cut = int(rng.integers(start + 1, end)) if end - start > 1 else end
                a = (start, cut)
                is_random = int(cut == end or rng.random() < nsp_prob)
                if is_random:
                    b = _random_segment(shards, documents, doc, target - (a[1] - a[0]), rng)
                    i = a_cut - 1  # the gathered sentences after the cut are used again
                else:
                    b = (cut, end)
                a, b = _truncate_pair(a, b, max_tokens, rng)
                if a[1] > a[0] and b[1] > b[0]:
                    out.extend((a[0], a[1], b[0], b[1], is_random))
                chunk_start = i + 1
            i += 1
    instances = np.frombuffer(out, dtype=np.int64).reshape(-1, 5)
    return instances[rng.permutation(len(instances))]


def _ordered_pair(start: int, end: int, bounds: np.ndarray, rng: np.random.Generator):
    """Cut tokens [start, end) into A and the B that follows it, at a sentence boundary (inside the
    sentence when there is one), and flip a coin for swapping them."""
    cuts = bounds[1:-1]
    cut = int(rng.choice(cuts)) if len(cuts) else int(rng.integers(start + 1, end)) if end - start > 1 else end
    return (start, cut), (cut, end), int(rng.random() < 0.5)


def _random_segment(shards: Shards, documents: np.ndarray, doc: int, length: int,
                    rng: np.random.Generator) -> tuple[int, int]:
    """Sentences from a random other document of the same split (held-out text never leaks into
    training), from a random sentence on, up to `length` tokens."""
    other = doc
    for _ in range(10):  # the original tries ten times; a one-document split must reuse itself
        other = int(documents[rng.integers(len(documents))])
        if other != doc:
            break
    first, last = int(shards.documents[other]), int(shards.documents[other + 1])
    start = int(rng.integers(first, last))
    bounds = shards.sentences
    end = start + 1
    while end < last and bounds[end] - bounds[start] < length:
        end += 1
    return int(bounds[start]), int(bounds[end])


def _truncate_pair(a, b, max_tokens: int, rng: np.random.Generator):
    """BERT's `truncate_seq_pair`: drop tokens one at a time from the longer segment (B on a tie),
    each from its front or back by a coin flip, until the pair fits. Counted in closed form: the
    longer side first loses the difference, then B and A alternate, B first."""
    a_len, b_len = a[1] - a[0], b[1] - b[0]
    excess = a_len + b_len - max_tokens
    if excess <= 0:
        return a, b
    from_longer = min(excess, abs(a_len - b_len))
    rest = excess - from_longer
    cut_a = (from_longer if a_len > b_len else 0) + rest // 2
    cut_b = (from_longer if a_len <= b_len else 0) + rest - rest // 2
    front_a = int(rng.binomial(cut_a, 0.5))
    front_b = int(rng.binomial(cut_b, 0.5))
    return (a[0] + front_a, a[1] - (cut_a - front_a)), (b[0] + front_b, b[1] - (cut_b - front_b))


def create_packed_instances(shards: Shards, documents: np.ndarray, max_seq_length: int,
                            rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """RoBERTa's FULL-SENTENCES inputs for one pass: whole sentences packed up to `max_seq_length`
    (counting [CLS] and the final [SEP]), crossing document boundaries with a [SEP] between
    documents. Documents are taken in a random order each pass; only a sentence longer than a
    whole row is cut.

    Returns (rows (N, 2), pieces (P, 3)): row i is pieces[rows[i, 0]:rows[i, 1]], each piece a
    token range (start, end) and whether a document separator comes before it. Rows come in a
    random order.
    """
    max_tokens = max_seq_length - 2
    if max_tokens < 1:
        raise BertforgeError(f"max_seq_length must be at least 3, got {max_seq_length}")
    sentence_bounds, document_bounds = shards.sentences, shards.documents
    pieces, rows = array("q"), array("q")
    row_start, row_length = 0, 0
    for doc in rng.permutation(documents):
        first, last = int(document_bounds[doc]), int(document_bounds[doc + 1])
        bounds = np.asarray(sentence_bounds[first: last + 1])
        new_document = True
        for k in range(last - first):
            start, end = int(bounds[k]), int(bounds[k + 1])
            while start < end:
                separator = int(new_document and row_length > 0)
                room = max_tokens - row_length - separator
                if row_length > 0 and (room <= 0 or end - start > room):  # full: the sentence opens the next row
                    rows.extend((row_start, len(pieces) // 3))
                    row_start, row_length = len(pieces) // 3, 0
                    continue
                take = min(end - start, room)
                if not separator and row_length > 0 and pieces[-2] == start:
                    pieces[-2] = start + take  # the next sentence of the same document: one range
                else:
                    pieces.extend((start, start + take, separator))
                row_length += take + separator
                start += take
                new_document = False
    if row_length > 0:
        rows.extend((row_start, len(pieces) // 3))
    rows = np.frombuffer(rows, dtype=np.int64).reshape(-1, 2)
    return rows[rng.permutation(len(rows))], np.frombuffer(pieces, dtype=np.int64).reshape(-1, 3)
