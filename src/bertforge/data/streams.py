"""Language-model batches for truncated back-propagation through time (AWD-LSTM, ULMFiT, ELMo).

Each epoch the training documents (in a seeded order, as fastai shuffles them) are concatenated
into one stream of word ids, and the stream is cut into `batch_size` contiguous rows. A batch is the
next chunk of every row: row b of batch k+1 continues row b of batch k, so the model carries its
hidden state from one batch to the next (detached: gradients stop at the chunk boundary) and only
resets it where a batch says `reset` (the first chunk of an epoch). Chunk lengths vary as in
AWD-LSTM: `bptt` with probability 0.95, else bptt / 2, then drawn from a normal of sd 5 (at least
5), so that every word is, over the epochs, at every distance from a chunk boundary. Each length is
a pure function of (seed, epoch, offset), so a resumed run cuts the same chunks.

About `eval_fraction` of the words are held out (held_out.py: whole documents, or the ends of few,
long ones, cut after a word of `sentence_ends`) and form their own stream, read in order with chunks
of exactly `bptt`.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

from ..errors import BertforgeError
from ..progress import progress
from .batches import Position
from .corpus import FileReport, read_units
from .held_out import hold_out


def read_documents(files: list[str], encode, begin: list[int], layout: str = "auto", text_field: str = "text",
                   show_progress: bool = False) -> list[np.ndarray]:
    """Every document of the corpus as word ids: `begin` (AWD-LSTM: `xxbos`), then each unit of
    text (a line, or a paragraph with `is_paragraph`) as `encode(text, is_paragraph)` gives it."""
    documents, current = [], []
    bar = progress(total=len(files), disable=not show_progress, desc="reading words", unit="files")
    for path in files:
        for new_document, text, is_paragraph in read_units(path, FileReport(path), layout, text_field):
            if new_document and current:
                documents.append(np.array(current, dtype=np.int32))
                current = []
            if not current:
                current += begin
            current += encode(text, is_paragraph)
        if current:  # a file never continues the previous file's document
            documents.append(np.array(current, dtype=np.int32))
            current = []
        bar.update(1)
    bar.close()
    return documents


def chunk_length(bptt: int, seed: int, epoch: int, offset: int) -> int:
    """AWD-LSTM's variable BPTT length for the chunk starting at `offset` of `epoch`."""
    rng = np.random.default_rng([seed, epoch, offset, 11])
    base = bptt if rng.random() < 0.95 else bptt / 2
    return max(5, int(rng.normal(base, 5)))


class LMStreams:
    """The training and held-out streams of a corpus's documents (see the module's docstring).

    `backwards` reverses every document (ULMFiT's backward model reads right to left); `variable`
    draws AWD-LSTM's chunk lengths (else every chunk is `bptt` long); `bidirectional` adds the
    reversed stream ELMo's backward LSTMs read; `encode` turns each batch into the model's inputs
    (ELMo: characters and softmax ids). With several processes each takes its own `batch_size` rows.
    A document's held-out end begins after one of the ids `sentence_ends` (any word without them);
    it is the same text read either way."""

    def __init__(self, documents: list[np.ndarray], batch_size: int, bptt: int, seed: int = 0,
                 eval_fraction: float = 0.02, rank: int = 0, world: int = 1, accum: int = 1,
                 backwards: bool = False, variable: bool = True, source: str = "the corpus",
                 bidirectional: bool = False, encode=None, sentence_ends: tuple[int, ...] = ()):
        ends = np.array(sentence_ends, dtype=np.int64)

        def boundaries(d: int) -> np.ndarray:
            doc = documents[d]
            inside = np.flatnonzero(np.isin(doc, ends)) + 1 if len(ends) else np.arange(1, len(doc))
            return np.unique(np.concatenate([[0], inside, [len(doc)]]))

        self.held_out = hold_out(np.array([len(d) for d in documents]), eval_fraction, seed, boundaries)
        cuts = self.held_out.cuts
        self.train_documents = [d[:c] for d, c in zip(documents, cuts) if c > 0]
        self.eval_documents = [d[c:] for d, c in zip(documents, cuts) if c < len(d)]
        if backwards:
            self.train_documents = [d[::-1].copy() for d in self.train_documents]
            self.eval_documents = [d[::-1].copy() for d in self.eval_documents]
        self.batch_size, self.bptt, self.seed, self.accum = batch_size, bptt, seed, accum
        self.rank, self.world, self.variable = rank, world, variable
        # ELMo's biLM: a second stream of the documents reversed (in another order), read by the
        # backward LSTMs with their own carried state, as bilm-tf's BidirectionalLMDataset.
        self.bidirectional, self.encode = bidirectional, encode or (lambda batch: batch)
        rows = batch_size * world
        per_row = sum(len(d) for d in self.train_documents) // rows
        if per_row < bptt + 1:
            raise BertforgeError(f"{source}: {per_row * rows:,} words to train on make rows of {per_row} words for "
                                 f"{rows} streams, too short for a BPTT length of {bptt}; lower --bptt or "
                                 "--batch-size, or give more text")

    def split_facts(self) -> dict:
        """The documents trained on and held out whole, and what was held out (for run_config.json
        and the run's first lines: `held_out.describe`)."""
        held = self.held_out
        return {"train_documents": held.train_documents, "eval_documents": held.eval_documents,
                "held_out": held.facts("words", held.held, "words")}

    def _rows(self, documents: list[np.ndarray]) -> np.ndarray:
        """This process's rows (batch_size, n) of the documents concatenated in the given order."""
        stream = np.concatenate(documents) if documents else np.zeros(0, dtype=np.int32)
        rows = self.batch_size * self.world
        n = len(stream) // rows
        grid = stream[:n * rows].reshape(rows, n)
        return grid[self.rank * self.batch_size:(self.rank + 1) * self.batch_size]

    def _grids(self, documents: list[np.ndarray], epoch: int | None) -> list[np.ndarray]:
        """The rows of each direction: the documents in a seeded order per epoch (in order for
        held-out ones); for the backward direction, each document reversed, in another order."""
        grids = []
        for direction in range(2 if self.bidirectional else 1):
            order = np.arange(len(documents)) if epoch is None else \
                np.random.default_rng([self.seed, epoch, 5 + direction]).permutation(len(documents))
            grids.append(self._rows([documents[i][::-1] if direction else documents[i] for i in order]))
        return grids

    def batches(self, position: Position) -> Iterator[tuple[Position, list[dict]]]:
        """From `position` (epoch, offset in each row) on: (the position after, `accum` chunks) per step."""
        epoch, offset = position.epoch, position.index
        grids = self._grids(self.train_documents, epoch)
        while True:
            micro = []
            for _ in range(self.accum):
                if offset + 2 > grids[0].shape[1]:  # no next word left to predict in this epoch
                    epoch, offset = epoch + 1, 0
                    grids = self._grids(self.train_documents, epoch)
                length = chunk_length(self.bptt, self.seed, epoch, offset) if self.variable else self.bptt
                length = min(length, grids[0].shape[1] - 1 - offset)
                micro.append(self.encode(chunk(grids, offset, length, reset=offset == 0, stream="train")))
                offset += length
            yield Position(epoch, offset), micro

    def eval_batches(self, max_batches: int) -> Iterator[dict]:
        """The held-out stream from its start, in chunks of `bptt` (at most `max_batches`)."""
        grids = self._grids(self.eval_documents, None)
        offset = 0
        for _ in range(max_batches):
            length = min(self.bptt, grids[0].shape[1] - 1 - offset)
            if length < 1:
                return
            yield self.encode(chunk(grids, offset, length, reset=offset == 0, stream="eval"))
            offset += length


def chunk(grids: list[np.ndarray], offset: int, length: int, reset: bool, stream: str) -> dict:
    """The batch of words [offset, offset + length) of every row, each predicting the word after
    it; with a second (backward) grid, its chunk under `backward_input_ids` and `backward_labels`."""
    batch = {"reset": reset, "stream": stream}
    for grid, prefix in zip(grids, ("", "backward_")):
        piece = torch.from_numpy(grid[:, offset:offset + length + 1].astype(np.int64))  # (B, L + 1)
        batch[prefix + "input_ids"], batch[prefix + "labels"] = piece[:, :-1], piece[:, 1:]
    rows = grids[0].shape[0]
    size = rows * length
    if len(grids) == 2:
        batch["counts"] = {"forward": size, "backward": size}
    else:
        batch["counts"] = {"lm": size, "ar": size, "tar": rows * (length - 1)}
    batch["tokens"] = size * len(grids)
    return batch
