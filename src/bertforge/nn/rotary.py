"""Rotary position embeddings (Su et al., 2021), in the two layouts checkpoints use.

Queries and keys are turned, pair of dimensions by pair, by an angle proportional to the position,
so that attention scores depend on the distance between tokens alone. Which dimensions pair up is
the one difference between the layouts, and a model must use its checkpoints' layout exactly:

- interleaved (RoFormer): dimensions 2i and 2i+1 pair up (`rotary_tables`, `rotate`);
- halves (GPT-NeoX, LLaMA, ModernBERT): dimension i pairs with i + D/2 (`rotary_halves`,
  `rotate_halves`); GPT-NeoX may turn only the first `rotary_dims` of a head (`rotate_part`).

Tables are cos and sin (..., D), made for the positions given and broadcast against (..., D).
"""

from __future__ import annotations

import torch


def rotary_tables(positions: torch.Tensor, head_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin (..., D) of RoFormer's angles at `positions` (...): pair i of a head (dimensions
    2i and 2i+1) turns by position * 10000^(-2i/D). Computed in float64 on the CPU, as HF's
    sinusoidal table is, then kept in float32."""
    i = torch.arange(0, head_size, 2, dtype=torch.float64)
    angles = positions.to("cpu", torch.float64)[..., None] * 10000.0 ** (-i / head_size)  # (..., D/2)
    angles = angles.repeat_interleave(2, dim=-1)  # (..., D): each angle for both members of its pair
    return angles.cos().to(positions.device, torch.float32), angles.sin().to(positions.device, torch.float32)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Turn each pair (x_2i, x_2i+1) of the last dimension of `x` by its angle; `cos` and `sin`
    broadcast against it. Computed in x's precision (bf16 stays bf16)."""
    pairs = x.unflatten(-1, (-1, 2))  # (..., D/2, 2)
    turned = torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)  # (-x_2i+1, x_2i)
    return x * cos.to(x.dtype) + turned * sin.to(x.dtype)


def rotary_halves(positions: torch.Tensor, head_size: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin (..., D) at `positions` (...) in the halves layout: dimension i pairs with
    i + D/2, turning by position * theta^(-2i/D). Float32, as HF computes them (`head_size`: the
    rotated width, which GPT-NeoX may make less than the head's)."""
    inverse = 1.0 / theta ** (torch.arange(0, head_size, 2, dtype=torch.float32, device=positions.device) / head_size)
    angles = positions.float()[..., None] * inverse  # (..., D/2)
    angles = torch.cat((angles, angles), dim=-1)  # (..., D)
    return angles.cos(), angles.sin()


def rotate_halves(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Turn each pair (x_i, x_i+D/2) of the last dimension of `x` by its angle; in fp32, as HF does."""
    first, second = x.float().chunk(2, dim=-1)
    turned = torch.cat((-second, first), dim=-1)
    return (x.float() * cos + turned * sin).to(x.dtype)


def rotate_part(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """`rotate_halves` on the first `cos.shape[-1]` dimensions of `x`, the rest passed through
    (GPT-NeoX's partial rotary, `rotary_pct` < 1)."""
    width = cos.shape[-1]
    if width == x.shape[-1]:
        return rotate_halves(x, cos, sin)
    return torch.cat((rotate_halves(x[..., :width], cos, sin), x[..., width:]), dim=-1)
