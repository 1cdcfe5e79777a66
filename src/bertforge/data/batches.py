"""From shards to masked pretraining batches: split the text into train and held-out, draw an
epoch's instances (sentence pairs, or packed full sentences), collate them into padded tensors,
and mask each batch as it is drawn (tokens, whole words, spans or n-grams).

Everything random is seeded by (seed, epoch) or (seed, epoch, position), so a batch is a pure
function of where it is in the run: resuming at a position reproduces the same batches, and every
process of a distributed run builds the same global batch and keeps its own rows.
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass

import numpy as np
import torch

from ..checks import RATE, check
from ..errors import BertforgeError
from .tokenizer import Tokenizer
from .held_out import hold_out
from .instances import A_END, A_START, B_END, B_START, IS_RANDOM, create_instances, create_packed_instances
from .masking import IGNORE, geometric_lengths, mask_spans, mask_tokens, ngram_lengths
from .shards import Shards


@dataclass
class MaskingOptions:
    """How tokens are chosen for prediction. `scheme`: "token" (BERT; with `whole_word`, all pieces
    of a word together), "span" (SpanBERT: whole-word spans of geometric length, p = `span_p`,
    at most `max_span` words) or "ngram" (ALBERT: whole-word n-grams, n <= `max_ngram`, P(n) ~ 1/n)."""

    mask_prob: float = 0.15
    replace_prob: float = 0.8
    random_prob: float = 0.1
    whole_word: bool = False
    scheme: str = "token"
    span_p: float = 0.2
    max_span: int = 10
    max_ngram: int = 3

    def __post_init__(self):
        check("mask_prob", self.mask_prob, RATE)  # 0 for objectives that mask nothing (GPT-1)
        check("replace_prob", self.replace_prob)
        check("random_prob", self.random_prob)
        if self.replace_prob + self.random_prob > 1:
            raise BertforgeError(f"replace_prob + random_prob must be at most 1, got {self.replace_prob} + "
                                 f"{self.random_prob}")
        if self.scheme not in ("token", "span", "ngram"):
            raise BertforgeError(f"unknown masking scheme {self.scheme!r}; choose token, span or ngram")
        if not 0 < self.span_p <= 1 or self.max_span < 1 or self.max_ngram < 1:
            raise BertforgeError("span_p must be in (0, 1], max_span and max_ngram at least 1")


@dataclass
class Position:
    """Where the data stream is: the epoch and the index of the next instance in it."""

    epoch: int = 0
    index: int = 0


# Held-out text is always scored at BERT's rate.
EVAL_MASK_PROB = 0.15

# The loss terms the data can feed. nsp and sop need sentence pairs with a label (random next;
# swapped); without either, rows are full sentences packed across documents. lm (GPT-1) predicts
# each next token of such rows, unmasked.
TERMS = ("mlm", "nsp", "sop", "sbo", "rtd", "lm")


class PretrainingData:
    """Masked pretraining batches over shards, for one process of `world` (rank `rank`).

    `terms` are the objective's loss terms: with "nsp" or "sop" an instance is a sentence pair
    (Google's `create_pretraining_data`; SOP swaps instead of drawing a random B), otherwise a
    row of whole sentences packed across documents (RoBERTa's FULL-SENTENCES). "sbo" adds each
    masked token's span boundaries; "rtd" counts every real token.

    `batch_size` is the global batch of one optimizer step; each process gets its rows of it, cut
    into `accum` micro-batches. The whole step batch is masked at once, so how it is divided
    (processes, accumulation) changes nothing in what is computed.
    """

    def __init__(self, shards: Shards, tokenizer: Tokenizer, batch_size: int, max_seq_length: int = 128,
                 short_seq_prob: float = 0.1, masking: MaskingOptions | None = None, seed: int = 0,
                 eval_fraction: float = 0.02, rank: int = 0, world: int = 1, accum: int = 1,
                 terms: tuple[str, ...] = ("mlm", "nsp")):
        if batch_size % (world * accum):
            raise BertforgeError(f"the batch size {batch_size} must be divisible by the number of processes "
                                 f"({world}) times the accumulation steps ({accum})")
        unknown = set(terms) - set(TERMS)
        if unknown or ("mlm" in terms) == ("lm" in terms) or {"nsp", "sop"} <= set(terms) \
                or "lm" in terms and len(terms) > 1:
            raise BertforgeError(f"cannot build data for the terms {terms}: lm alone, or mlm with at most one "
                                 "of nsp/sop and any of sbo, rtd")
        self.accum, self.terms = accum, tuple(terms)
        self.sentence_term = next((t for t in terms if t in ("nsp", "sop")), None)
        self.shards, self.batch_size, self.max_seq_length = shards, batch_size, max_seq_length
        self.short_seq_prob, self.masking, self.seed = short_seq_prob, masking or MaskingOptions(), seed
        if "sbo" in terms and self.masking.scheme != "span":
            raise BertforgeError("the span-boundary objective needs span masking (scheme 'span')")
        self.rank, self.world = rank, world
        self.cls_id, self.sep_id, self.pad_id, self.mask_id = (
            tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id, tokenizer.mask_id)
        special = np.zeros(tokenizer.vocab_size, dtype=bool)
        special[list(tokenizer.special_ids)] = True
        self.random_ids = torch.from_numpy(np.flatnonzero(~special))
        # Word starts, for whole-word and span masking: WordPiece and byte-level BPE mark the pieces
        # that continue a word; GPT-1's BPE marks the piece that ends one, so a word starts after it.
        self.marks_ends = tokenizer.kind == "bpe"
        marked = np.zeros(tokenizer.vocab_size, dtype=bool)
        marked[tokenizer.word_end_ids() if self.marks_ends else tokenizer.continuation_ids()] = True
        if self.marks_ends:
            marked |= special
        self.marked = torch.from_numpy(marked)
        # About eval_fraction of the text held out: whole documents, or the ends of few, long ones
        # (held_out.py); each side of a cut is a document of the view `self.shards`.
        self.held_out = hold_out(shards.document_tokens(), eval_fraction, seed, shards.sentence_starts)
        self.shards, self.train_documents, self.eval_documents = shards.cut(self.held_out.cuts)
        self._epoch_cache: tuple[int, np.ndarray, np.ndarray | None] | None = None

    def split_facts(self) -> dict:
        """The documents trained on and held out whole, and what was held out (for run_config.json
        and the run's first lines: `held_out.describe`)."""
        bounds = np.asarray(self.shards.documents)
        sentences = int((bounds[self.eval_documents + 1] - bounds[self.eval_documents]).sum())
        return {"train_documents": self.held_out.train_documents, "eval_documents": self.held_out.eval_documents,
                "held_out": self.held_out.facts("tokens", sentences, "sentences")}

    def _instances(self, documents: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray | None]:
        """(instances, pieces): sentence pairs (N, 5) and None, or packed rows (N, 2) and their pieces."""
        if self.sentence_term is None:
            return create_packed_instances(self.shards, documents, self.max_seq_length, rng)
        return create_instances(self.shards, documents, self.max_seq_length, rng, self.short_seq_prob,
                                order=self.sentence_term == "sop"), None

    def epoch_instances(self, epoch: int) -> tuple[np.ndarray, np.ndarray | None]:
        if self._epoch_cache is None or self._epoch_cache[0] != epoch:
            instances, pieces = self._instances(self.train_documents, np.random.default_rng([self.seed, epoch]))
            if len(instances) < self.batch_size:
                raise BertforgeError(f"the corpus makes only {len(instances)} training instances, fewer than "
                                     f"one batch of {self.batch_size}; use more text or a smaller batch")
            docs = self.train_documents
            single = np.mean(self.shards.documents[docs + 1] - self.shards.documents[docs] == 1)
            if epoch == 0 and self.sentence_term == "nsp" and single > 0.7:
                # A one-sentence document's pairs are cut inside its sentence: NSP then learns little
                # about sentences, and the corpus layout was probably misread.
                warnings.warn(f"{single:.0%} of the documents have a single sentence, so next-sentence pairs "
                              "are cut inside sentences. If blank lines separate paragraphs rather than "
                              "documents, use --layout prose.", stacklevel=2)
            self._epoch_cache = (epoch, instances, pieces)
        return self._epoch_cache[1], self._epoch_cache[2]

    def batches(self, start: Position):
        """Yield (position after the step, this process's micro-batches), forever, from `start`.
        An epoch's last incomplete batch is dropped so that every batch has the same size."""
        epoch, index = start.epoch, start.index
        while True:
            instances, pieces = self.epoch_instances(epoch)
            while index + self.batch_size <= len(instances):
                batch = self.collate(instances[index: index + self.batch_size], pieces, (self.seed, epoch, index))
                index += self.batch_size
                yield Position(epoch, index), batch
            epoch, index = epoch + 1, 0

    def eval_batches(self, max_batches: int):
        """The held-out micro-batches: the same instances and masks at every evaluation, with 15% of
        the tokens masked whatever the training rate, so that runs at any rate compare."""
        if len(self.eval_documents) == 0:
            return
        instances, pieces = self._instances(self.eval_documents, np.random.default_rng([self.seed, 1 << 30]))
        for b, index in enumerate(range(0, len(instances), self.batch_size)):
            if b >= max_batches or len(instances) - index < self.world:  # every process needs a row
                break
            yield from self.collate(instances[index: index + self.batch_size], pieces, (self.seed, 1 << 30, index),
                                    dataclasses.replace(self.masking, mask_prob=EVAL_MASK_PROB))

    def rows(self, instances: np.ndarray, pieces: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Token ids (N, T), token types (N, T) and lengths (N,) of instances, [CLS] and [SEP]s added."""
        tokens = self.shards.tokens
        if pieces is None:
            lengths = (instances[:, A_END] - instances[:, A_START]) + (instances[:, B_END] - instances[:, B_START]) + 3
        else:
            spans = [pieces[first:last] for first, last in instances]
            lengths = np.array([int((p[:, 1] - p[:, 0] + p[:, 2]).sum()) + 2 for p in spans], dtype=np.int64)
        T = int(lengths.max())
        ids = np.full((len(instances), T), self.pad_id, dtype=np.int64)
        types = np.zeros((len(instances), T), dtype=np.int64)
        ids[:, 0] = self.cls_id
        ids[np.arange(len(instances)), lengths - 1] = self.sep_id
        if pieces is None:
            for row, (a0, a1, b0, b1, _) in enumerate(instances):
                la, lb = a1 - a0, b1 - b0
                ids[row, 1: 1 + la] = tokens[a0:a1]
                ids[row, 1 + la] = self.sep_id
                ids[row, 2 + la: 2 + la + lb] = tokens[b0:b1]
                types[row, 2 + la: 3 + la + lb] = 1
        else:
            for row, parts in enumerate(spans):
                at = 1
                for start, end, separator in parts:
                    if separator:  # between two documents
                        ids[row, at] = self.sep_id
                        at += 1
                    ids[row, at: at + end - start] = tokens[start:end]
                    at += end - start
        return ids, types, lengths

    def collate(self, instances: np.ndarray, pieces: np.ndarray | None, seed: tuple[int, ...],
                masking: MaskingOptions | None = None) -> list[dict]:
        """Build and mask the global batch (with `masking`, else the data's own), then cut this
        process's rows into micro-batches."""
        ids, types, lengths = self.rows(instances, pieces)
        T = ids.shape[1]
        input_ids = torch.from_numpy(ids)
        attention_mask = (torch.arange(T)[None, :] < torch.from_numpy(lengths)[:, None]).long()
        mine = torch.arange(self.rank, len(instances), self.world)
        if "lm" in self.terms:  # nothing to mask: every next token is a target
            widths = [int(lengths[rows.numpy()].max()) for rows in mine.chunk(self.accum)]
            return [next_token_batch(input_ids[rows, :width], attention_mask[rows, :width])
                    for rows, width in zip(mine.chunk(self.accum), widths)]
        maskable = (attention_mask == 1) & (input_ids != self.cls_id) & (input_ids != self.sep_id)
        m = masking or self.masking
        if self.marks_ends:
            word_starts = torch.ones_like(input_ids, dtype=torch.bool)
            word_starts[:, 1:] = self.marked[input_ids[:, :-1]]
        else:
            word_starts = ~self.marked[input_ids]
        spans = None
        if m.scheme == "token":
            generator = torch.Generator().manual_seed(_seed_int(seed))
            corrupted, labels = mask_tokens(
                input_ids, maskable, mask_id=self.mask_id, random_ids=self.random_ids, generator=generator,
                mask_prob=m.mask_prob, replace_prob=m.replace_prob, random_prob=m.random_prob,
                word_starts=word_starts if m.whole_word else None,
            )
        else:
            lengths_p = geometric_lengths(m.span_p, m.max_span) if m.scheme == "span" else ngram_lengths(m.max_ngram)
            corrupted, labels, *spans = mask_spans(
                input_ids, maskable, word_starts, mask_id=self.mask_id, random_ids=self.random_ids,
                rng=np.random.default_rng(_seed_int(seed)), lengths=lengths_p, mask_prob=m.mask_prob,
                replace_prob=m.replace_prob, random_prob=m.random_prob, per_span=m.scheme == "span")
        types = torch.from_numpy(types)
        # Pairs carry their NSP / SOP label in the last column; packed rows have none.
        sentence = torch.from_numpy(instances[:, IS_RANDOM].copy()) if self.sentence_term else None
        micro = []
        for rows in mine.chunk(self.accum):
            width = int(lengths[rows.numpy()].max())  # no wider than the longest row of this micro-batch
            micro.append(make_batch(
                corrupted[rows, :width], types[rows, :width], attention_mask[rows, :width], labels[rows, :width],
                terms=self.terms, sentence_labels=None if sentence is None else sentence[rows],
                spans=[s[rows, :width] for s in spans] if spans and "sbo" in self.terms else None))
        return micro


def make_batch(input_ids, token_type_ids, attention_mask, mlm_labels, terms=("mlm",), sentence_labels=None,
               spans=None) -> dict:
    """A batch as the objectives read it. The masked positions are listed as flat indices, so the
    MLM head runs on those rows only and no data-dependent shape is computed on the device.
    `counts` are the denominators of each loss term (the trainer sums them over a whole step).

    `sentence_labels` (B,) feed NSP or SOP. `spans` = (span start, span end) (B, T) from
    `mask_spans` give each masked token's boundary tokens, as flat indices, for SpanBERT's SBO.
    """
    flat = mlm_labels.reshape(-1)
    positions = torch.nonzero(flat != IGNORE).squeeze(1)
    tokens = int(attention_mask.sum())
    batch = {
        "input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": attention_mask,
        "mlm_positions": positions, "mlm_targets": flat[positions],
        "counts": {"mlm": len(positions)},
        "tokens": tokens,
    }
    for term in terms:
        if term in ("nsp", "sop"):
            batch["sentence_labels"] = sentence_labels
            batch["counts"][term] = len(sentence_labels)
        elif term == "sbo":
            T = input_ids.shape[1]
            start, end = (s.reshape(-1)[positions] for s in spans)
            row_base = positions - positions % T
            batch["sbo_left"], batch["sbo_right"] = row_base + start - 1, row_base + end
            batch["sbo_offsets"] = positions % T - start
            batch["counts"]["sbo"] = len(positions)
        elif term == "rtd":
            batch["counts"]["rtd"] = tokens
    return batch


def next_token_batch(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> dict:
    """A left-to-right LM batch: every real position whose next token is real predicts it. The
    positions are flat indices into (B, T), as the masked LM's are."""
    B, T = input_ids.shape
    has_next = torch.zeros_like(attention_mask, dtype=torch.bool)
    has_next[:, :-1] = attention_mask[:, 1:].bool()
    positions = torch.nonzero(has_next.reshape(-1)).squeeze(1)
    return {"input_ids": input_ids, "token_type_ids": torch.zeros_like(input_ids), "attention_mask": attention_mask,
            "lm_positions": positions, "lm_targets": input_ids.reshape(-1)[positions + 1],
            "counts": {"lm": len(positions)}, "tokens": int(attention_mask.sum())}


def _seed_int(parts: tuple[int, ...]) -> int:
    return int(np.random.default_rng(list(parts)).integers(1 << 62))
