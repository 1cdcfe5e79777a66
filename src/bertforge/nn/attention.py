"""Scaled dot-product attention on every device: the CPU's faster paths, the padded and the
unpadded (packed) batch, and the key/value cache of generation."""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from .layers import dropout


def attention_probs(q, k, mask) -> torch.Tensor:
    """softmax(q k^T / sqrt(D) + mask): how much each query attends to each key, (B, N, T, S). One
    batched product scales the scores and adds the mask (as a bias of 0 and -inf), so the score
    matrix is written once before the softmax, not three times."""
    *heads, T, D = q.shape
    S = k.shape[-2]
    q, kt = q.reshape(-1, T, D), k.reshape(-1, S, D).transpose(1, 2)  # (B*N, T, D), (B*N, D, S)
    if mask is None:
        scores = torch.bmm(q, kt).mul_(D ** -0.5)
    else:
        bias = torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill_(~mask, float("-inf"))
        rows = mask.shape[-2]  # 1: the same for every query; T: a mask per query (causal)
        scores = torch.baddbmm(bias.expand(*heads, rows, S).reshape(-1, rows, S), q, kt, alpha=D ** -0.5)
    return scores.softmax(-1).view(*heads, T, S)


def attention(q, k, v, mask, dropout_p: float):
    """softmax(q k^T / sqrt(D) + mask) v, written out. On a CPU this beats SDPA's kernels in bf16
    and whenever there is attention dropout (which sends SDPA to its slow reference path): forward
    + backward of a bert-mini layer's attention in bf16 takes 18 ms against SDPA's 43."""
    return dropout(attention_probs(q, k, mask), dropout_p, dropout_p > 0) @ v  # (B, N, T, D)


def attend(q, k, v, mask, dropout_p: float, causal: bool = False) -> torch.Tensor:
    """Attention (B, N, T, D) by the fastest path: written out on a CPU in bf16, with dropout, over
    at most 64 keys or for a single query (see `attention`), else SDPA. SDPA's CPU kernel costs more
    than the products themselves on short sequences: 1.27 against 0.34 ms at 12 tokens (32 x 12
    heads x 32), 3.4 against 2.3 at 48, even at 96; and for the one query of a decoding step at
    every length measured (320 rows x 4 heads x 64: 2.5 against 3.3 ms at 50 keys, 9.0 against 10.4
    at 200). `mask` is boolean (True: may attend) or None; with `causal` and no mask each query sees
    itself and the keys before it (GPT-1)."""
    if q.device.type == "cpu" and (dropout_p > 0 or q.dtype == torch.bfloat16 or k.shape[-2] <= 64
                                   or q.shape[-2] == 1):
        if mask is None and causal:
            mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
        return attention(q, k, v, mask, dropout_p)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p,
                                          is_causal=causal and mask is None)


class Packed(NamedTuple):
    """Where the real tokens of a padded (B, T) batch are, for the unpadded path: `index` (N',) their
    flat positions in B * T, `offsets` (B + 1,) int32 where each row's tokens start in the packed
    (N', ...) tensors, `mask` (B, 1, 1, T) for attention on the padded fallback, and B and T."""
    index: torch.Tensor
    offsets: torch.Tensor
    mask: torch.Tensor
    batch: int
    length: int

    @classmethod
    def of(cls, mask: torch.Tensor) -> "Packed":
        """From the (B, 1, 1, T) boolean attention mask."""
        B, T = mask.shape[0], mask.shape[-1]
        real = mask.view(B, T)
        offsets = F.pad(real.sum(1).cumsum(0), (1, 0)).to(torch.int32)
        index = real.reshape(-1).nonzero().squeeze(1)  # the one host sync of the unpadded path
        return cls(index, offsets, mask, B, T)

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, ...) -> (N, ...): the real tokens only."""
        return x.reshape(self.batch * self.length, *x.shape[2:]).index_select(0, self.index)

    def unpack(self, x: torch.Tensor) -> torch.Tensor:
        """(N, ...) -> (B, T, ...), zeros at the padding."""
        full = x.new_zeros(self.batch * self.length, *x.shape[1:]).index_copy_(0, self.index, x)
        return full.view(self.batch, self.length, *x.shape[1:])


def varlen_attention(q, k, v, packed: Packed, dropout_p: float) -> torch.Tensor | None:
    """Attention over packed (N, heads, D) queries, keys and values with FlashAttention's
    variable-length kernel (CUDA, bf16/fp16, no dropout), so that nothing is computed on padding;
    None where that kernel cannot run."""
    if q.device.type != "cuda" or q.dtype not in (torch.float16, torch.bfloat16) or dropout_p > 0:
        return None
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    # T bounds the longest row: reading the true longest would cost another host sync
    return varlen_attn(q, k, v, packed.offsets, packed.offsets, packed.length, packed.length)


class Cache:
    """A decoder's keys and values so far, one (B, N, P, D) pair per layer, for generation one
    position at a time; starts empty."""

    def __init__(self):
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []

    @property
    def length(self) -> int:
        return self.keys[0].shape[2] if self.keys else 0


class KeyValues:
    """A self-attention layer's keys and values of the positions decoded so far, (N, H, P, D) each,
    for a search that reorders its rows every step (beam search keeping and repeating hypotheses).
    Appending a position and reordering the rows each copy the whole cache; here the reorder
    writes the kept rows into new tensors one position longer, whose last position the next step's
    keys and values fill in place: one pass over the cache a step instead of two. (A step of a
    320-row beam reads and writes 40 MB of cache at 20 positions, more than the processor's cache
    holds: its time is memory traffic.)"""

    def __init__(self):
        self.keys: torch.Tensor | None = None
        self.values: torch.Tensor | None = None
        self.length = 0  # positions filled; the tensors hold one more after a reorder

    def add(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append positions (N, H, T, D); returns the keys and values of every position so far."""
        end = self.length + k.shape[2]
        if self.keys is not None and self.keys.shape[2] == end:  # the room a reorder left
            self.keys[:, :, self.length:] = k
            self.values[:, :, self.length:] = v
        elif self.keys is None:
            self.keys, self.values = k, v
        else:
            self.keys = torch.cat([self.keys[:, :, :self.length], k], dim=2)
            self.values = torch.cat([self.values[:, :, :self.length], v], dim=2)
        self.length = end
        return self.keys, self.values

    def keep(self, rows: torch.Tensor) -> None:
        """Keep (and repeat) the rows `rows`, leaving room for one more position."""
        if self.keys is None:
            return
        self.keys, self.values = (self._kept(x, rows) for x in (self.keys, self.values))

    def _kept(self, x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        out = x.new_empty(rows.shape[0], x.shape[1], self.length + 1, x.shape[3])
        torch.index_select(x[:, :, :self.length], 0, rows, out=out[:, :, :self.length])
        return out
