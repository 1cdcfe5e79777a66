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

from .checks import check
from .data.padding import pad
from .errors import BertforgeError
from .nn.attention import KeyValues

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
    # sentences decoded together: at 128, beam 5 and greedy search run 5-10% faster than at 64 (a
    # step's fixed costs shared by more rows), no faster at 256 (the 5-minute Multi30k model, 2 cores)
    batch_size: int = 128
    # Tokens one batch may have the model read (`decode_tokens`, the service's estimate): batches are
    # cut to fit, and a sentence over it alone is refused (a beam of 50,000 grew to 24 GB). None: no
    # bound (the service bounds each request itself, by its --max-tokens).
    max_tokens: int | None = 32_768

    def __post_init__(self):
        for name in ("beam", "length_penalty", "max_len_a", "max_len_b", "batch_size", "max_tokens"):  # the CLI's rules
            check(name, getattr(self, name))
        if self.penalty not in PENALTIES:
            raise BertforgeError(f"length penalty form must be one of {', '.join(PENALTIES)}, got {self.penalty!r}")

    def penalise(self, score: float, length: int) -> float:
        base = (5 + length) / 6 if self.penalty == "gnmt" else length
        return score / base ** self.length_penalty


def longest(length: int, options: DecodeOptions, positions: int) -> int:
    """The most tokens a translation of a `length`-token source may have (as `_limits` cuts it)."""
    return max(1, min(int(options.max_len_a * length + options.max_len_b), positions - 1))


def decode_tokens(length: int, options: DecodeOptions, positions: int) -> int:
    """What decoding a `length`-token source costs, in tokens the model reads: the source, and every
    token each of the beam's hypotheses may decode (each holds the decoder's keys and values)."""
    return length + options.beam * longest(length, options, positions)


def _limits(source_mask: torch.Tensor, options: DecodeOptions, positions: int) -> torch.Tensor:
    lengths = source_mask.sum(1).float()
    return (options.max_len_a * lengths + options.max_len_b).long().clamp(1, positions - 1)


class Stopped(Exception):
    """Decoding given up between two steps: its `stop` was set (the service's request left)."""


def _check(stop) -> None:
    if stop is not None and stop.is_set():
        raise Stopped()


def decode(model, source: torch.Tensor, source_mask: torch.Tensor, options: DecodeOptions,
           stop=None) -> list[list[int]]:
    """The best translation of each source row as token ids (without the start and end tokens).
    `stop`: a `threading.Event`; once it is set, the next step raises `Stopped`."""
    hyps = decode_scored(model, source, source_mask, options, stop, scores=False)
    return [h[0][1] if h else [] for h in hyps]


@torch.no_grad()
def decode_scored(model, source: torch.Tensor, source_mask: torch.Tensor, options: DecodeOptions,
                  stop=None, scores: bool = True) -> list[list[tuple[float | None, list[int]]]]:
    """Every hypothesis the search ended for each source row, best first, as (score, token ids): the
    score is the summed log-probability of its tokens (the end token's included) over the length
    penalty, the number the search ranks by (`generate`'s `sequences_scores`). Greedy search ends one;
    with `scores` False its score is None: it picks by the logits and skips the log-softmax over the
    vocabulary (as `generate`'s greedy search does; 5-9% of a step). Beam search ranks by scores."""
    model.eval()
    limits = _limits(source_mask, options, model.config.max_position_embeddings)
    if options.beam == 1:
        return _greedy(model, source, source_mask, limits, options, stop, scores)
    return _beam(model, source, source_mask, limits, options, stop)


def _step(model, tokens: torch.Tensor, memory, mask, caches, t: int, last: torch.Tensor | None,
          log_probs: bool = True) -> torch.Tensor:
    """Log-probabilities (N, V) of the next token after position `t`, in fp32 (with `log_probs`
    False the logits: their arg max is the same and a pass over the vocabulary is saved); never the
    pad id (it starts every decoding and is no word). Where the config has a `forced_eos_token_id`
    (published OPUS-MT models do), rows at their last position (`last`, (N,) bool, or None where
    no row is) can only end, at no cost (log-probability 0), as `generate`'s forced end scores it."""
    states = model.decode(tokens, memory, mask, caches, start=t)
    x = model.logits(states[:, -1]).float()
    if log_probs:  # normalised over every word, the pad id's included, as `generate` does
        x = torch.log_softmax(x, dim=-1)
    x[:, model.config.pad_token_id] = float("-inf")
    forced = getattr(model.config, "forced_eos_token_id", None)
    if forced is not None and last is not None:
        x[last] = float("-inf")
        x[last, forced] = 0.0
    return x


def row_argmax(x: torch.Tensor, block: int = 64) -> torch.Tensor:
    """`x.argmax(-1)` of a (N, V) tensor, the first of equal maxima, by way of the maxima of blocks
    of `block` columns: PyTorch's CPU arg max is a scalar loop, its max a vector one (a greedy step
    of 128 rows over 8,000 words: 137 against 854 us). A width not a multiple of `block` is padded
    with -inf (a copy)."""
    blocks = _in_blocks(x, block)  # (N, blocks, block)
    first = blocks.amax(-1).argmax(-1)  # (N,): the first block holding the row's maximum
    return first * block + blocks[torch.arange(len(x), device=x.device), first].argmax(-1)


def _in_blocks(x: torch.Tensor, block: int) -> torch.Tensor:
    """`x` (..., V) viewed as (..., ceil(V / block), block), the last block padded with -inf (a copy
    where V is not a multiple of `block`)."""
    if -x.shape[-1] % block:
        x = torch.nn.functional.pad(x, (0, -x.shape[-1] % block), value=float("-inf"))
    return x.view(*x.shape[:-1], -1, block)


def top_candidates(logp: torch.Tensor, scores: torch.Tensor, n: int, block: int = 64):
    """The `n` best of each sentence's continuations, (values, indices) as `(logp + scores[..., None])
    .view(m, w * V).topk(n)` gives them, for `logp` (m, w, V) (its rows' log-probabilities, changed
    here) and `scores` (m, w). By way of the maxima of blocks of `block` words: every one of the n best
    lies in a block whose maximum is at least its own value, so in one of the n blocks of greatest
    maxima; a top-k over those n x `block` candidates replaces one over w x V, and the scores are
    added to those alone (a beam-5 profile of 256 sentences x 8,000 words: 37 against 110 ms).
    Equal values may come in another order than `topk` over the whole row gives them."""
    m, w, vocab = logp.shape
    blocks = -(-vocab // block)
    if w * blocks < n:  # fewer blocks than candidates: over the whole rows
        return logp.add_(scores[:, :, None]).view(m, w * vocab).topk(n)
    padded = _in_blocks(logp, block)  # (m, w, blocks, block)
    maxima = padded.amax(-1).add_(scores[:, :, None]).view(m, w * blocks)
    best = maxima.topk(n).indices  # (m, n): the blocks that hold the n best
    found = padded.view(m, w * blocks, block).gather(1, best[:, :, None].expand(-1, -1, block))
    found += scores.gather(1, best // blocks)[:, :, None]
    top, at = found.view(m, n * block).topk(n)
    column = best.gather(1, at // block) * block + at % block  # in the padded rows, w x blocks x block
    word = (column % (blocks * block)).clamp(max=vocab - 1)  # a padding column is -inf: taken only among equals
    return top, column // (blocks * block) * vocab + word


def _select(rows: torch.Tensor, *tensors):
    return [x.index_select(0, rows) for x in tensors]


def _reorder(caches: list[dict], rows: torch.Tensor, cross_rows: torch.Tensor | None = None) -> None:
    """Keep (and repeat) the cached rows `rows`: every cached tensor is batch-first (the Transformer's
    keys and values, an LSTM decoder's states). An entry named "cross" (the keys and values of the
    encoder's states, what depends on the source alone) is kept by `cross_rows` instead, and left as
    it is where that is None: a beam's reorder only moves hypotheses within a sentence."""
    for cache in caches:
        for key, value in cache.items():
            kept = cross_rows if key == "cross" else rows
            if kept is None:
                continue
            if isinstance(value, KeyValues):
                value.keep(kept)  # in place, with room for the next position
            elif isinstance(value, tuple):
                cache[key] = tuple(x.index_select(0, kept) for x in value)
            else:
                cache[key] = value.index_select(0, kept)


def _at_limit(limit: list[int], alive: list[int], t: int, device) -> tuple[list[bool], torch.Tensor | None]:
    """Which alive sentences reach their length limit with the token of step `t`, as a list and
    as a (rows,) tensor, None where none does (most steps: the search's bookkeeping is kept in
    Python lists, one transfer a step, not a tensor operation per sentence)."""
    at = [i >= 0 and limit[i] <= t + 1 for i in alive]  # -1: a finished sentence's row kept (greedy)
    return at, (torch.tensor(at, device=device) if any(at) else None)


ROWS = 8  # greedy search's rows stay a multiple of this as sentences finish (see `_greedy`)


def _greedy(model, source, source_mask, limits, options: DecodeOptions,
            stop=None, scores: bool = True) -> list[list[tuple[float | None, list[int]]]]:
    c, device = model.config, source.device
    memory = model.encode(source, source_mask)
    caches = model.cross_caches(memory)
    alive, limit = list(range(source.shape[0])), limits.tolist()
    out: list[list[int]] = [[] for _ in alive]
    ended: list[list[tuple[float, list[int]]]] = [[] for _ in alive]
    summed = torch.zeros(len(alive), device=device)  # log-probability of each row's tokens so far
    tokens = torch.full((len(alive), 1), c.decoder_start_token_id, dtype=torch.long, device=device)
    for t in range(max(limit)):
        _check(stop)
        at_limit, last = _at_limit(limit, alive, t, device)
        logp = _step(model, tokens, memory, source_mask, caches, t, last, log_probs=scores)
        best = row_argmax(logp)  # (N,)
        if scores:
            summed = summed + logp.gather(1, best[:, None]).squeeze(1)
        picked = best.tolist()
        for i, token in zip(alive, picked):
            if i >= 0 and token != c.eos_token_id:
                out[i].append(token)
        done = [i >= 0 and (token == c.eos_token_id or at) for i, token, at in zip(alive, picked, at_limit)]
        if any(done):
            total = summed.tolist() if scores else None
            for row in (r for r, d in enumerate(done) if d):
                score = options.penalise(total[row], t + 1) if scores else None
                ended[alive[row]].append((score, out[alive[row]]))
            alive = [-1 if d else i for i, d in zip(alive, done)]
            going = [r for r, i in enumerate(alive) if i >= 0]
            if not going:
                break
            # Finished sentences leave the batch, but the rows stay a multiple of ROWS (finished ones
            # kept to fill): each new count of rows costs oneDNN a new kernel for every product
            rows = min(len(alive), -(-len(going) // ROWS) * ROWS)
            if rows < len(alive):
                kept = going + [r for r, i in enumerate(alive) if i < 0][:rows - len(going)]
                alive = [alive[r] for r in kept]
                keep = torch.tensor(kept, device=device)
                best, summed, memory, source_mask = _select(keep, best, summed, memory, source_mask)
                _reorder(caches, keep, keep)
        tokens = best[:, None]
    return ended


def _beam(model, source, source_mask, limits, options: DecodeOptions,
          stop=None) -> list[list[tuple[float, list[int]]]]:
    c, k, device = model.config, options.beam, source.device
    n = source.shape[0]
    memory = model.encode(source, source_mask)
    # What each hypothesis has of its own starts as k copies. The encoder's side (its states, the
    # mask, the cache's "cross" entries) stays one row per sentence where the model reads it once
    # for the sentence's k hypotheses (`shares_source`), and is repeated k times where it does not.
    # Such a model also runs the first step on one row per sentence (its k hypotheses are alike
    # until then, as CTranslate2 does): `width` is the rows a sentence has in a step.
    share = getattr(model, "shares_source", False)
    caches = model.cross_caches(memory)
    width = 1 if share and 2 * k <= c.vocab_size else k  # the first step's 2k candidates from one row
    if width > 1:
        repeat = torch.arange(n, device=device).repeat_interleave(k)
        _reorder(caches, repeat, None if share else repeat)
        if not share:
            memory, source_mask = _select(repeat, memory, source_mask)
    alive, limit = list(range(n)), limits.tolist()
    sequences = torch.full((n * width, 1), c.decoder_start_token_id, dtype=torch.long, device=device)
    scores = torch.zeros(n, width, device=device)
    scores[:, 1:] = float("-inf")  # the first step draws from one beam only
    ended: list[list[tuple[float, list[int]]]] = [[] for _ in range(n)]
    for t in range(max(limit)):
        _check(stop)
        at_limit, last = _at_limit(limit, alive, t, device)
        logp = _step(model, sequences[:, -1:], memory, source_mask, caches, t,
                     None if last is None else last.repeat_interleave(width))  # (m*width, V)
        m, vocab = len(alive), logp.shape[-1]
        top, index = top_candidates(logp.view(m, width, vocab), scores, 2 * k)  # (m, 2k) of width x vocab
        origin = torch.arange(m, device=device)[:, None] * width + index // vocab  # the row each continues
        token = index % vocab
        ends = token == c.eos_token_id
        if last is not None:
            ends |= last[:, None]
        _end(ended, alive, ends[:, :k], top, origin, token, sequences, t, options, c.eos_token_id)
        done = [len(ended[i]) >= k or at for i, at in zip(alive, at_limit)]
        if all(done):
            break
        scores, pick = top.masked_fill(ends, float("-inf")).topk(k)  # the best k that go on
        rows, token = origin.gather(1, pick), token.gather(1, pick)  # (m, k)
        sides = None  # the encoder's side: kept as it is
        if any(done):  # finished sentences leave the batch, in the same copy as the reorder
            kept = [r for r, d in enumerate(done) if not d]
            alive = [alive[r] for r in kept]
            keep = torch.tensor(kept, device=device)
            rows, token, scores = _select(keep, rows, token, scores)
            sides = keep if share else (keep[:, None] * k + torch.arange(k, device=device)).view(-1)
            memory, source_mask = _select(sides, memory, source_mask)
        rows, width = rows.view(-1), k
        sequences = torch.cat([sequences.index_select(0, rows), token.view(-1, 1)], dim=1)
        _reorder(caches, rows, sides)
    return [sorted(hyps, key=lambda h: -h[0]) for hyps in ended]  # stable: of equal scores, the first ended


def _end(ended, alive, ends, top, origin, token, sequences, t: int, options: DecodeOptions, eos: int) -> None:
    """End the hypotheses of the first k candidates (m, k) where `ends` is set: each sentence's
    ended list gets (score over the length penalty, its tokens), read from the tensors at once.
    `origin` (m, 2k): the row of `sequences` each candidate continues."""
    hits = ends.nonzero()  # (h, 2): row, candidate
    if hits.shape[0] == 0:
        return
    i, j = hits.unbind(1)
    paths = sequences.index_select(0, origin[i, j])[:, 1:].tolist()
    for row, path, tok, score in zip(i.tolist(), paths, token[i, j].tolist(), top[i, j].tolist()):
        if tok != eos:  # at the length limit: the last token is kept
            path.append(tok)
        ended[alive[row]].append((options.penalise(score, t + 1), path))


def translate(model, tokenizer, sentences: list[str], options: DecodeOptions | None = None,
              source: str = "input", stop=None) -> list[str]:
    """Translate `sentences` (plain text) in batches of similar length, in their order; a blank
    line is answered with a blank line (a model asked to translate nothing invents something).
    `stop`: see `decode`."""
    scored = translate_scored(model, tokenizer, sentences, options, 1, source, stop, scores=False)
    return [hyps[0][0] for hyps in scored]


def translate_scored(model, tokenizer, sentences: list[str], options: DecodeOptions | None = None, n_best: int = 1,
                     source: str = "input", stop=None, scores: bool = True) -> list[list[tuple[str, float | None]]]:
    """The `n_best` best translations of each sentence (at most the beam's width), best first, each
    with its score (`decode_scored`'s; None from greedy search with `scores` False); a blank line gets
    one blank translation scored 0."""
    options = options or DecodeOptions()
    if not 1 <= n_best <= options.beam:
        raise BertforgeError(f"--n-best {n_best}: from 1 to the beam's width ({options.beam}); a beam search keeps "
                             "that many hypotheses")
    device = next(model.parameters()).device
    ids = tokenizer.encode_source_batch(sentences)
    limit = model.config.max_position_embeddings
    for line, row in enumerate(ids, 1):
        if len(row) > limit:
            raise BertforgeError(f"{source}:{line}: {len(row)} tokens, more than the model's {limit} positions")
    order = sorted((i for i in range(len(ids)) if sentences[i].strip()), key=lambda i: len(ids[i]))
    out: list[list[tuple[str, float | None]]] = [[("", 0.0)] for _ in ids]
    costs = [decode_tokens(len(row), options, limit) for row in ids]
    over = [i for i in order if options.max_tokens is not None and costs[i] > options.max_tokens]
    if over:  # said before any work, for the first such line
        first = min(over)
        raise BertforgeError(f"{source}:{first + 1}: decoding it with --beam {options.beam} may read {costs[first]:,} "
                             f"tokens, over the limit of {options.max_tokens:,} (each holds the decoder's keys and "
                             "values): give a smaller --beam or --max-len-a/--max-len-b, or raise --max-tokens")
    for chunk in _batches(order, costs, options):
        batch, mask = pad([ids[i] for i in chunk], tokenizer.pad_id, device)
        for i, hyps in zip(chunk, decode_scored(model, batch, mask, options, stop, scores)):
            out[i] = [(tokenizer.decode(ids), score) for score, ids in hyps[:n_best]] or [("", float("-inf"))]
    return out


def _batches(order: list[int], costs: list[int], options: DecodeOptions):
    """`order` cut into batches of at most `batch_size` sentences and `max_tokens` of cost."""
    chunk, total = [], 0
    for i in order:
        if chunk and (len(chunk) == options.batch_size
                      or options.max_tokens is not None and total + costs[i] > options.max_tokens):
            yield chunk
            chunk, total = [], 0
        chunk.append(i)
        total += costs[i]
    if chunk:
        yield chunk
