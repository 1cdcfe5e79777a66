"""From shards to masked pretraining batches: split documents into train and held-out, draw an
epoch's instances, collate them into padded tensors, and mask each batch as it is drawn.

Everything random is seeded by (seed, epoch) or (seed, epoch, position), so a batch is a pure
function of where it is in the run: resuming at a position reproduces the same batches, and every
process of a distributed run builds the same global batch and keeps its own rows.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch

from .errors import BertforgeError
from .instances import A_END, A_START, B_END, B_START, IS_RANDOM, create_instances
from .masking import IGNORE, mask_tokens
from .shards import Shards
from .tokenizer import Tokenizer


@dataclass
class MaskingOptions:
    mask_prob: float = 0.15
    replace_prob: float = 0.8
    random_prob: float = 0.1
    whole_word: bool = False


@dataclass
class Position:
    """Where the data stream is: the epoch and the index of the next instance in it."""

    epoch: int = 0
    index: int = 0


class PretrainingData:
    """Masked MLM + NSP batches over shards, for one process of `world` (rank `rank`).

    `batch_size` is the global batch of one optimizer step; each process gets its rows of it, cut
    into `accum` micro-batches. The whole step batch is masked at once, so how it is divided
    (processes, accumulation) changes nothing in what is computed.
    """

    def __init__(self, shards: Shards, tokenizer: Tokenizer, batch_size: int, max_seq_length: int = 128,
                 short_seq_prob: float = 0.1, masking: MaskingOptions | None = None, seed: int = 0,
                 eval_fraction: float = 0.02, rank: int = 0, world: int = 1, accum: int = 1):
        if batch_size % (world * accum):
            raise BertforgeError(f"the batch size {batch_size} must be divisible by the number of processes "
                                 f"({world}) times the accumulation steps ({accum})")
        self.accum = accum
        self.shards, self.batch_size, self.max_seq_length = shards, batch_size, max_seq_length
        self.short_seq_prob, self.masking, self.seed = short_seq_prob, masking or MaskingOptions(), seed
        self.rank, self.world = rank, world
        self.cls_id, self.sep_id, self.pad_id, self.mask_id = (
            tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id, tokenizer.mask_id)
        vocab = tokenizer.backend.get_vocab()
        special = np.zeros(tokenizer.vocab_size, dtype=bool)
        special[list(tokenizer.special_ids)] = True
        self.random_ids = torch.from_numpy(np.flatnonzero(~special))
        continuation = np.zeros(tokenizer.vocab_size, dtype=bool)
        continuation[[i for token, i in vocab.items() if token.startswith("##")]] = True
        self.continuation = torch.from_numpy(continuation)
        self.train_documents, self.eval_documents = split_documents(shards.num_documents, eval_fraction, seed)
        self._epoch_cache: tuple[int, np.ndarray] | None = None

    def epoch_instances(self, epoch: int) -> np.ndarray:
        if self._epoch_cache is None or self._epoch_cache[0] != epoch:
            rng = np.random.default_rng([self.seed, epoch])
            instances = create_instances(self.shards, self.train_documents, self.max_seq_length, rng,
                                         self.short_seq_prob)
            if len(instances) < self.batch_size:
                raise BertforgeError(f"the corpus makes only {len(instances)} training instances, fewer than "
                                     f"one batch of {self.batch_size}; use more text or a smaller batch")
            random_share = instances[:, IS_RANDOM].mean()
            if epoch == 0 and random_share > 0.7:
                # A one-sentence document can only be paired with a random B (as in the original),
                # so NSP degenerates into always answering "random".
                warnings.warn(f"{random_share:.0%} of the next-sentence pairs are random (50% expected): most "
                              "documents have a single sentence. If blank lines separate paragraphs rather than "
                              "documents, use --layout prose.", stacklevel=2)
            self._epoch_cache = (epoch, instances)
        return self._epoch_cache[1]

    def batches(self, start: Position):
        """Yield (position after the step, this process's micro-batches), forever, from `start`.
        An epoch's last incomplete batch is dropped so that every batch has the same size."""
        epoch, index = start.epoch, start.index
        while True:
            instances = self.epoch_instances(epoch)
            while index + self.batch_size <= len(instances):
                batch = self.collate(instances[index: index + self.batch_size], (self.seed, epoch, index))
                index += self.batch_size
                yield Position(epoch, index), batch
            epoch, index = epoch + 1, 0

    def eval_batches(self, max_batches: int):
        """The held-out micro-batches: the same instances and masks at every evaluation."""
        if len(self.eval_documents) == 0:
            return
        rng = np.random.default_rng([self.seed, 1 << 30])
        instances = create_instances(self.shards, self.eval_documents, self.max_seq_length, rng, self.short_seq_prob)
        for b, index in enumerate(range(0, len(instances), self.batch_size)):
            if b >= max_batches or len(instances) - index < self.world:  # every process needs a row
                break
            yield from self.collate(instances[index: index + self.batch_size], (self.seed, 1 << 30, index))

    def collate(self, instances: np.ndarray, seed: tuple[int, ...]) -> list[dict]:
        """Build and mask the global batch, then cut this process's rows into micro-batches."""
        tokens = self.shards.tokens
        lengths = (instances[:, A_END] - instances[:, A_START]) + (instances[:, B_END] - instances[:, B_START]) + 3
        T = int(lengths.max())
        ids = np.full((len(instances), T), self.pad_id, dtype=np.int64)
        types = np.zeros((len(instances), T), dtype=np.int64)
        for row, (a0, a1, b0, b1, _) in enumerate(instances):
            la, lb = a1 - a0, b1 - b0
            ids[row, 0] = self.cls_id
            ids[row, 1: 1 + la] = tokens[a0:a1]
            ids[row, 1 + la] = self.sep_id
            ids[row, 2 + la: 2 + la + lb] = tokens[b0:b1]
            ids[row, 2 + la + lb] = self.sep_id
            types[row, 2 + la: 3 + la + lb] = 1
        input_ids = torch.from_numpy(ids)
        attention_mask = (torch.arange(T)[None, :] < torch.from_numpy(lengths)[:, None]).long()
        maskable = (attention_mask == 1) & (input_ids != self.cls_id) & (input_ids != self.sep_id)
        generator = torch.Generator().manual_seed(_seed_int(seed))
        m = self.masking
        corrupted, labels = mask_tokens(
            input_ids, maskable, mask_id=self.mask_id, random_ids=self.random_ids, generator=generator,
            mask_prob=m.mask_prob, replace_prob=m.replace_prob, random_prob=m.random_prob,
            word_starts=~self.continuation[input_ids] if m.whole_word else None,
        )
        types, nsp = torch.from_numpy(types), torch.from_numpy(instances[:, IS_RANDOM].copy())
        mine = torch.arange(self.rank, len(instances), self.world)
        micro = []
        for rows in mine.chunk(self.accum):
            width = int(lengths[rows.numpy()].max())  # no wider than the longest row of this micro-batch
            micro.append(make_batch(corrupted[rows, :width], types[rows, :width], attention_mask[rows, :width],
                                    labels[rows, :width], nsp[rows]))
        return micro


def make_batch(input_ids, token_type_ids, attention_mask, mlm_labels, nsp_labels=None) -> dict:
    """A batch as the objectives read it. The masked positions are listed as flat indices, so the
    MLM head runs on those rows only and no data-dependent shape is computed on the device.
    `counts` are the denominators of each loss term (the trainer sums them over a whole step)."""
    flat = mlm_labels.reshape(-1)
    positions = torch.nonzero(flat != IGNORE).squeeze(1)
    batch = {
        "input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": attention_mask,
        "mlm_positions": positions, "mlm_targets": flat[positions],
        "counts": {"mlm": len(positions)},
        "tokens": int(attention_mask.sum()),
    }
    if nsp_labels is not None:
        batch["nsp_labels"] = nsp_labels
        batch["counts"]["nsp"] = len(nsp_labels)
    return batch


def split_documents(n: int, eval_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A seeded split of document indices into training and held-out.

    At least two documents are held out (with one, every held-out NSP negative would come from the
    same document), and at least two are left for training; below four documents nothing is held out.
    """
    order = np.random.default_rng([seed, 7]).permutation(n)
    held = 0 if n < 4 or eval_fraction <= 0 else min(n - 2, max(2, round(n * eval_fraction)))
    if eval_fraction > 0 and held == 0:
        warnings.warn(f"only {n} document(s): no held-out evaluation, and next-sentence negatives come from "
                      "the same document" if n == 1 else f"only {n} documents: no held-out evaluation", stacklevel=3)
    return np.sort(order[held:]), np.sort(order[:held])


def _seed_int(parts: tuple[int, ...]) -> int:
    return int(np.random.default_rng(list(parts)).integers(1 << 62))
