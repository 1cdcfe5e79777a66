"""Rows of ids made into padded batches for inference: in order of length, padded with their mask."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch


def in_length_order(features: list, batch_size: int, length: Callable = len) -> Iterator[list[int]]:
    """Indices of `features` in batches of similar length, for fast inference."""
    order = sorted(range(len(features)), key=lambda i: length(features[i]))
    for start in range(0, len(order), batch_size):
        yield order[start: start + batch_size]


def pad(rows: list[list[int]], pad_id: int, device="cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of ids padded into (B, T), and the mask of real tokens (by length: a source vocabulary
    of its own may use the target's pad id as a word)."""
    width = max(len(r) for r in rows)
    batch = torch.full((len(rows), width), pad_id, dtype=torch.long)
    for i, r in enumerate(rows):
        batch[i, :len(r)] = torch.tensor(r, dtype=torch.long)
    mask = torch.arange(width)[None, :] < torch.tensor([len(r) for r in rows])[:, None]
    return batch.to(device), mask.to(device)
