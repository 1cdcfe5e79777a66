"""Decoding a translation Transformer: greedy search and beam search, batched, with a key/value
cache (the decoder's own keys and values grow by one position a step; the encoder states' keys and
values are computed once per sentence), and finished sentences leave the batch.

Beam search follows `transformers`' `generate(num_beams=k, early_stopping=True)`, so that the same
settings give the same translations: at each step the 2k best continuations of the k beams are
drawn; an end-of-sentence among the first k ends a hypothesis, scored by its summed log-probability
over a length penalty; the best k others continue; a sentence is done once k hypotheses have ended
(or at its length limit, where every candidate ends). Length penalty: HF's and fairseq's len**alpha,
or GNMT's ((5 + len) / 6)**alpha (Wu et al., 2016).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .errors import BertforgeError

PENALTIES = ("hf", "gnmt")


@dataclass
class DecodeOptions:
    """How to decode. `beam` 1 is greedy search. The length limit of a sentence is
    `max_len_a` x its source length + `max_len_b` tokens (fairseq's), within the model's positions.
    """

    beam: int = 5
    length_penalty: float = 1.0
    penalty: str = "hf"
    max_len_a: float = 1.5
    max_len_b: int = 10
    batch_size: int = 64

    def __post_init__(self):
        if not (isinstance(self.beam, int) and self.beam >= 1):
            raise BertforgeError(f"beam must be a positive integer, got {self.beam!r}")
        if self.penalty not in PENALTIES:
            raise BertforgeError(f"length penalty form must be one of {', '.join(PENALTIES)}, got {self.penalty!r}")
        if self.max_len_a < 0 or self.max_len_b < 1 or self.batch_size < 1:
            raise BertforgeError("max_len_a must be >= 0, max_len_b and batch_size >= 1")

    def penalise(self, score: float, length: int) -> float:
        base = (5 + length) / 6 if self.penalty == "gnmt" else length
        return score / base ** self.length_penalty


def _limits(source_mask: torch.Tensor, options: DecodeOptions, positions: int) -> torch.Tensor:
    lengths = source_mask.sum(1).float()
    return (options.max_len_a * lengths + options.max_len_b).long().clamp(1, positions - 1)


@torch.no_grad()
def decode(model, source: torch.Tensor, source_mask: torch.Tensor, options: DecodeOptions) -> list[list[int]]:
    """The best translation of each source row as token ids (without the start and end tokens)."""
    model.eval()
    limits = _limits(source_mask, options, model.config.max_position_embeddings)
    if options.beam == 1:
        return _greedy(model, source, source_mask, limits)
    return _beam(model, source, source_mask, limits, options)


def _step(model, tokens: torch.Tensor, memory, mask, caches, t: int) -> torch.Tensor:
    """Log-probabilities (N, V) of the next token after position `t`, in fp32; never the pad id
    (it starts every decoding and is no word)."""
    states = model.decode(tokens, memory, mask, caches, start=t)
    logp = torch.log_softmax(model.logits(states[:, -1]).float(), dim=-1)
    logp[:, model.config.pad_token_id] = float("-inf")
    return logp


def _select(rows: torch.Tensor, *tensors):
    return [x.index_select(0, rows) for x in tensors]


def _reorder(caches: list[dict], rows: torch.Tensor) -> None:
    """Keep (and repeat) the cached rows `rows`: every cached tensor is batch-first (the Transformer's
    keys and values, an LSTM decoder's states)."""
    for cache in caches:
        for key, value in cache.items():
            cache[key] = tuple(x.index_select(0, rows) for x in value) if isinstance(value, tuple) \
                else value.index_select(0, rows)


def _greedy(model, source, source_mask, limits) -> list[list[int]]:
    c = model.config
    memory = model.encode(source, source_mask)
    caches = model.cross_caches(memory)
    alive = torch.arange(source.shape[0])
    out: list[list[int]] = [[] for _ in range(source.shape[0])]
    tokens = torch.full((source.shape[0], 1), c.decoder_start_token_id, dtype=torch.long, device=source.device)
    for t in range(int(limits.max())):
        best = _step(model, tokens, memory, source_mask, caches, t).argmax(-1)  # (N,)
        for i, token in zip(alive.tolist(), best.tolist()):
            if token != c.eos_token_id:
                out[i].append(token)
        done = (best == c.eos_token_id).cpu() | (limits[alive] <= t + 1).cpu()
        if done.all():
            break
        if done.any():  # finished sentences leave the batch
            keep = (~done).nonzero().squeeze(1)
            alive = alive[keep]
            keep = keep.to(source.device)
            best, memory, source_mask = _select(keep, best, memory, source_mask)
            _reorder(caches, keep)
        tokens = best[:, None]
    return out


def _beam(model, source, source_mask, limits, options: DecodeOptions) -> list[list[int]]:
    c, k, device = model.config, options.beam, source.device
    n = source.shape[0]
    memory = model.encode(source, source_mask).repeat_interleave(k, 0)  # (n*k, S, d)
    mask = source_mask.repeat_interleave(k, 0)
    caches = model.cross_caches(memory)
    alive = torch.arange(n)
    sequences = torch.full((n * k, 1), c.decoder_start_token_id, dtype=torch.long, device=device)
    scores = torch.zeros(n, k, device=device)
    scores[:, 1:] = float("-inf")  # the first step draws from one beam only
    ended: list[list[tuple[float, list[int]]]] = [[] for _ in range(n)]
    for t in range(int(limits.max())):
        logp = _step(model, sequences[:, -1:], memory, mask, caches, t)  # (m*k, V)
        m, vocab = alive.shape[0], logp.shape[-1]
        top, index = (logp.view(m, k, vocab) + scores[:, :, None]).view(m, k * vocab).topk(2 * k)  # (m, 2k)
        origin, token = index // vocab, index % vocab
        at_limit = (limits[alive] <= t + 1).to(device)[:, None]
        ends = (token == c.eos_token_id) | at_limit
        for i, j in (ends[:, :k]).nonzero().tolist():  # only the first k candidates may end a hypothesis
            path = sequences[i * k + origin[i, j], 1:].tolist() + ([] if token[i, j] == c.eos_token_id else [int(token[i, j])])
            ended[int(alive[i])].append((options.penalise(float(top[i, j]), t + 1), path))
        scores, pick = top.masked_fill(ends, float("-inf")).topk(k)  # the best k that go on
        rows = (torch.arange(m, device=device)[:, None] * k + origin.gather(1, pick)).view(-1)
        sequences = torch.cat([sequences.index_select(0, rows), token.gather(1, pick).view(-1, 1)], dim=1)
        _reorder(caches, rows)
        done = torch.tensor([len(ended[int(i)]) >= k for i in alive]) | at_limit[:, 0].cpu()
        if done.all():
            break
        if done.any():  # finished sentences leave the batch
            keep = (~done).nonzero().squeeze(1)
            alive = alive[keep]
            keep = keep.to(device)
            beams = (keep[:, None] * k + torch.arange(k, device=device)).view(-1)
            scores = scores.index_select(0, keep)
            sequences, memory, mask = _select(beams, sequences, memory, mask)
            _reorder(caches, beams)
    return [max(hyps, key=lambda h: h[0])[1] if hyps else [] for hyps in ended]


def translate(model, tokenizer, sentences: list[str], options: DecodeOptions | None = None,
              source: str = "input") -> list[str]:
    """Translate `sentences` (plain text) in batches of similar length, in their order."""
    options = options or DecodeOptions()
    device = next(model.parameters()).device
    ids = tokenizer.encode_source_batch(sentences)
    limit = model.config.max_position_embeddings
    for line, row in enumerate(ids, 1):
        if len(row) > limit:
            raise BertforgeError(f"{source}:{line}: {len(row)} tokens, more than the model's {limit} positions")
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    out: list[str] = [""] * len(ids)
    for start in range(0, len(order), options.batch_size):
        chunk = order[start:start + options.batch_size]
        batch, mask = pad([ids[i] for i in chunk], tokenizer.pad_id, device)
        for i, hyp in zip(chunk, decode(model, batch, mask, options)):
            out[i] = tokenizer.decode(hyp)
    return out


def pad(rows: list[list[int]], pad_id: int, device="cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of ids padded into (B, T), and the mask of real tokens (by length: a source vocabulary
    of its own may use the target's pad id as a word)."""
    width = max(len(r) for r in rows)
    batch = torch.full((len(rows), width), pad_id, dtype=torch.long)
    for i, r in enumerate(rows):
        batch[i, :len(r)] = torch.tensor(r, dtype=torch.long)
    mask = torch.arange(width)[None, :] < torch.tensor([len(r) for r in rows])[:, None]
    return batch.to(device), mask.to(device)
