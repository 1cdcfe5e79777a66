"""Masked-LM corruption (Devlin et al., 2019): pick 15% of the tokens, replace 80% of those with
[MASK], 10% with a random token, and leave 10% unchanged; the model must predict all of them.

A pure function of its inputs and a seeded generator, applied to each batch as it is drawn
("dynamic masking"), vectorised over the batch.
"""

from __future__ import annotations

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
