"""What every embedder shares: which of an encoder's layers make a vector (the last layer, the sum
or concatenation of the last four, all of them, or one layer by number), and the vectors handed
back."""

from __future__ import annotations

import numpy as np
import torch

from ..errors import BertforgeError

LAYER_CHOICES = ("last", "sum-last-4", "concat-last-4", "all")


def check_layers(layers: str | int, states: int | None = None) -> str | None:
    """`layers` checked before any text is run: a name this module knows, and with `states` (how many
    outputs the model has: its embeddings' and each layer's), a layer that exists. Returns what to
    tell the user when the last four are asked of a model with fewer outputs: all of them are
    taken then (a 2-layer model's 3), which is another thing than four."""
    if isinstance(layers, str) and layers.lstrip("-").isdigit():
        layers = int(layers)
    if not isinstance(layers, int) and layers not in LAYER_CHOICES:
        raise BertforgeError(f"layers must be a layer number or one of {', '.join(LAYER_CHOICES)}, got {layers!r}")
    if states is None:
        return None
    if isinstance(layers, int) and not -states <= layers < states:
        raise BertforgeError(f"layer {layers} does not exist: the model has layers 0 (embeddings) to {states - 1}")
    if layers in ("sum-last-4", "concat-last-4") and states < 4:
        return (f"{layers}: the model has {states} outputs (its embeddings' and {states - 1} layers'), so all "
                f"{states} are {'summed' if layers == 'sum-last-4' else 'concatenated'}")
    return None


def combine(hidden_states: tuple[torch.Tensor, ...], layers: str | int) -> torch.Tensor:
    """One tensor from the embedding output and every layer's output (L + 1 tensors of (B, T, H)):
    one of them, the last four summed or concatenated (all, if there are fewer), or their mean."""
    check_layers(layers, len(hidden_states))
    if isinstance(layers, int) or layers.lstrip("-").isdigit():
        return hidden_states[int(layers)]
    if layers == "last":
        return hidden_states[-1]
    if layers == "sum-last-4":
        return torch.stack(hidden_states[-4:]).sum(0)
    if layers == "concat-last-4":
        return torch.cat(hidden_states[-4:], dim=-1)  # (B, T, 4H)
    return torch.stack(hidden_states).mean(0)  # all


def handed_back(out: list[np.ndarray], pooling: str, normalize: bool) -> list[np.ndarray] | np.ndarray:
    """The vectors of each text: one (D,) row each stacked into (N, D), or with `tokens` pooling a
    (tokens, D) array per text; `normalize` as sentence-transformers' Normalize: v / max(|v|, 1e-12),
    per vector."""
    if normalize:
        out = [v / np.maximum(np.linalg.norm(v, axis=-1, keepdims=True), 1e-12) for v in out]
    return out if pooling == "tokens" else np.stack(out)
