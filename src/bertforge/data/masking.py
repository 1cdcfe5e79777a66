"""Masked-LM corruption (Devlin et al., 2019): pick 15% of the tokens, replace 80% of those with
[MASK], 10% with a random token, and leave 10% unchanged; the model must predict all of them.
The tokens are picked one by one, by whole words, or (`mask_spans`) as SpanBERT's spans and
ALBERT's n-grams.

A pure function of its inputs and a seeded generator, applied to each batch as it is drawn
("dynamic masking"), vectorised over the batch.
"""

from __future__ import annotations

import numpy as np
import torch

IGNORE = -100  # label of positions that are not predicted (PyTorch's cross-entropy default)


def mask_tokens(
    input_ids: torch.Tensor,
    maskable: torch.Tensor,
    *,
    mask_id: int,
    random_ids: torch.Tensor,
    generator: torch.Generator,
    mask_prob: float = 0.15,
    replace_prob: float = 0.8,
    random_prob: float = 0.1,
    word_starts: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Corrupt `input_ids` (B, T) for masked-LM training; return (corrupted ids, labels).

    `maskable` (B, T) is False for special tokens and padding, which are never chosen. Each row
    gets exactly round(mask_prob x its maskable tokens) predictions (at least one), as the original
    `create_pretraining_data` does. `random_ids` lists the ids a random replacement may take
    (normally every non-special token). With `word_starts` (B, T), True where a token begins a
    word, whole words are chosen: every piece of a chosen word is predicted ("whole-word masking"),
    and a row stops before the word that would take it past its budget.
    Labels hold the original id where a prediction is due and `IGNORE` elsewhere.
    """
    if not 0.0 <= mask_prob <= 1.0 or replace_prob < 0 or random_prob < 0 or replace_prob + random_prob > 1:
        raise ValueError("mask_prob must be in [0, 1] and replace_prob + random_prob at most 1")
    B, T = input_ids.shape
    budget = (maskable.sum(1) * mask_prob).round().clamp(min=1)  # (B,)
    noise = torch.rand(B, T, generator=generator)
    if word_starts is None:
        chosen = _lowest(noise, maskable, budget)
    else:
        chosen = _whole_words(noise, maskable, word_starts, budget)

    action = torch.rand(B, T, generator=generator)
    to_mask = chosen & (action < replace_prob)
    to_random = chosen & (action >= replace_prob) & (action < replace_prob + random_prob)
    replacements = random_ids[torch.randint(len(random_ids), (B, T), generator=generator)]
    corrupted = torch.where(to_mask, torch.full_like(input_ids, mask_id), input_ids)
    corrupted = torch.where(to_random, replacements.to(input_ids.dtype), corrupted)
    labels = torch.where(chosen, input_ids, torch.full_like(input_ids, IGNORE))
    return corrupted, labels


def _lowest(noise: torch.Tensor, maskable: torch.Tensor, budget: torch.Tensor) -> torch.Tensor:
    """In each row, the `budget` maskable positions with the lowest noise: a uniform sample
    without replacement."""
    scores = noise.masked_fill(~maskable, 2.0)  # noise is in [0, 1): unmaskable sorts last
    ranks = scores.argsort(dim=1).argsort(dim=1)  # (B, T) rank of each position in its row
    return (ranks < budget[:, None]) & maskable


def _whole_words(noise, maskable, word_starts, budget) -> torch.Tensor:
    """Choose whole words in random order while the row's token count stays within budget."""
    B, T = noise.shape
    positions = torch.arange(T).expand(B, T)
    # A piece right after a special token (a segment cut mid-word) starts a word of its own.
    after_special = torch.cat([torch.ones(B, 1, dtype=torch.bool), ~maskable[:, :-1]], dim=1)
    starts = word_starts | after_special | ~maskable
    # Each token takes the noise of its word's first piece, so a word's pieces sort together.
    first_piece = torch.where(starts, positions, torch.zeros_like(positions)).cummax(1).values
    scores = noise.gather(1, first_piece).masked_fill(~maskable, 2.0)
    order = scores.argsort(dim=1, stable=True)  # stable: a word's pieces stay in text order
    taken = maskable.gather(1, order).long().cumsum(1)  # tokens taken so far, in sorted order
    # A word fits if the count after its last piece is within budget: the largest count among
    # its pieces, gathered back through the word's first-piece position.
    count_at = torch.zeros_like(taken).scatter(1, order, taken)  # (B, T) in text order
    word_end = torch.zeros_like(taken).scatter_reduce(1, first_piece, count_at, reduce="amax")
    return (word_end.gather(1, first_piece) <= budget[:, None]) & maskable


def geometric_lengths(p: float = 0.2, max_length: int = 10) -> np.ndarray:
    """SpanBERT's span-length distribution: P(l) proportional to p (1 - p)^(l - 1), l = 1..max_length
    (mean 3.8 words with the paper's p = 0.2, max 10)."""
    weights = p * (1 - p) ** np.arange(max_length)
    return weights / weights.sum()


def ngram_lengths(max_n: int = 3) -> np.ndarray:
    """ALBERT's n-gram lengths: P(n) proportional to 1/n, n = 1..max_n (6/11, 3/11, 2/11 for n <= 3)."""
    weights = 1.0 / np.arange(1, max_n + 1)
    return weights / weights.sum()


def mask_spans(
    input_ids: torch.Tensor,
    maskable: torch.Tensor,
    word_starts: torch.Tensor,
    *,
    mask_id: int,
    random_ids: torch.Tensor,
    rng: np.random.Generator,
    lengths: np.ndarray,
    mask_prob: float = 0.15,
    replace_prob: float = 0.8,
    random_prob: float = 0.1,
    per_span: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Corrupt `input_ids` (B, T) by masking contiguous spans of whole words (SpanBERT; ALBERT's
    n-grams with `ngram_lengths`); return (corrupted ids, labels, span start, span end).

    Span lengths, counted in words, are drawn from `lengths` (`lengths[i]` = P(i + 1 words)); a
    span starts at a random word and stays inside its segment. Spans are added until
    round(mask_prob x maskable tokens) tokens are covered: a span that would overshoot is cut to
    the words that fit, and spans never overlap; a row whose words cannot fit the budget (fifty
    draws in a row fail) stays below it. [MASK] / random / unchanged (80/10/10) is decided once per
    span with `per_span` (SpanBERT: a span is corrupted as a whole), else per token (ALBERT's
    n-grams). `span start` and `span end` (B, T) give, for
    each predicted token, the position of its span's first token and the position just after its
    last (-1 elsewhere): the span-boundary objective reads the tokens at start - 1 and end.
    """
    if not 0.0 <= mask_prob <= 1.0 or replace_prob < 0 or random_prob < 0 or replace_prob + random_prob > 1:
        raise ValueError("mask_prob must be in [0, 1] and replace_prob + random_prob at most 1")
    ids, ok, starts = input_ids.numpy(), maskable.numpy(), word_starts.numpy()
    B, T = ids.shape
    corrupted, labels = ids.copy(), np.full_like(ids, IGNORE)
    span_start, span_end = np.full((B, T), -1, dtype=np.int64), np.full((B, T), -1, dtype=np.int64)
    random_pool = random_ids.numpy()
    for row in range(B):
        for s, e in _row_spans(ok[row], starts[row], rng, lengths, mask_prob):
            labels[row, s:e] = ids[row, s:e]
            span_start[row, s:e], span_end[row, s:e] = s, e
            action = np.full(e - s, rng.random()) if per_span else rng.random(e - s)
            to_mask, to_random = action < replace_prob, (action >= replace_prob) & (action < replace_prob + random_prob)
            corrupted[row, s:e][to_mask] = mask_id
            corrupted[row, s:e][to_random] = rng.choice(random_pool, size=int(to_random.sum()))
    return (torch.from_numpy(corrupted), torch.from_numpy(labels), torch.from_numpy(span_start),
            torch.from_numpy(span_end))


def _row_spans(maskable: np.ndarray, word_starts: np.ndarray, rng: np.random.Generator, lengths: np.ndarray,
               mask_prob: float, patience: int = 50) -> list[tuple[int, int]]:
    """Token ranges [start, end) of the spans chosen in one row."""
    positions = np.flatnonzero(maskable)
    if len(positions) == 0:
        return []
    budget = max(1, round(len(positions) * mask_prob))
    # Words: a word starts at a word-start token or after a non-maskable one (a cut word, a [SEP]).
    after_gap = np.r_[True, ~maskable[:-1]][positions]
    first = positions[word_starts[positions] | after_gap]  # first token of each word
    run_end = np.r_[np.flatnonzero(np.diff(positions) > 1), len(positions) - 1]  # last index of each run
    last_token = np.empty(len(first), dtype=np.int64)  # one past each word's last token
    last_token[:-1] = first[1:]
    last_token[-1] = positions[-1] + 1
    # A word followed by a gap ends at its run's end, not at the next word's start.
    run_of_word = np.searchsorted(positions[run_end], first)
    last_token = np.minimum(last_token, positions[run_end][run_of_word] + 1)
    taken = np.zeros(len(first), dtype=bool)
    run_stop = np.searchsorted(run_of_word, run_of_word, side="right")  # one past each word's run
    spans, covered, failures = [], 0, 0
    while covered < budget and failures < patience:
        n = int(rng.choice(len(lengths), p=lengths)) + 1
        # Draw anchors until the n words are free and inside one segment (cutting every span that
        # collides would skew the lengths short); after ten tries, cut the last one to what is free.
        for _ in range(10):
            a = int(rng.integers(len(first)))
            b = a + n  # words [a, b)
            if b <= run_stop[a] and not taken[a:b].any():
                break
        b = min(b, int(run_stop[a]))
        while b > a and (taken[a:b].any() or covered + last_token[b - 1] - first[a] > budget):
            b -= 1  # cut to the words that are free and fit the budget
        if b == a:
            failures += 1
            continue
        taken[a:b] = True
        spans.append((int(first[a]), int(last_token[b - 1])))
        covered += int(last_token[b - 1] - first[a])
    return spans
