"""Tensor I/O shared by every checkpoint format: safetensors files read with errors that name the
file, and a state copied into a module with every missing, unexpected or mis-shaped key named."""

from __future__ import annotations

import warnings

import torch
from torch import nn

from ..errors import BertforgeError


def read_safetensors(path: str) -> dict[str, torch.Tensor]:
    """Every tensor of a safetensors file; a missing, truncated or corrupt file is an error naming it."""
    from safetensors.torch import load_file

    try:
        return load_file(path)
    except FileNotFoundError:
        raise BertforgeError(f"{path}: no such file") from None
    except Exception as e:  # SafetensorError and OSError: truncated, corrupt or unreadable
        raise BertforgeError(f"{path}: corrupted or truncated safetensors file ({e})") from None


def load_state(module: nn.Module, state: dict[str, torch.Tensor], source: str,
               unexpected: list[str] = (), allowed_missing: set[str] = frozenset(),
               quiet: set[str] = frozenset()) -> None:
    """Copy `state` into `module`, failing with every missing, unexpected and mis-shaped key named."""
    expected = module.state_dict()
    problems = []
    missing = [k for k in expected if k not in state and k not in allowed_missing]
    if missing:
        problems.append(f"missing weights: {_names(missing)}")
    if unexpected:
        problems.append(f"unexpected weights: {_names(unexpected)}")
    shapes = [f"{k} {tuple(v.shape)} (the model needs {tuple(expected[k].shape)})"
              for k, v in state.items() if k in expected and v.shape != expected[k].shape]
    if shapes:
        problems.append(f"wrong shapes: {_names(shapes)}")
    if problems:
        raise BertforgeError(f"{source}: " + "; ".join(problems))
    skipped = [k for k in expected if k not in state and k not in quiet]
    if skipped:
        warnings.warn(f"{source}: no weights for {', '.join(skipped)}; they keep their fresh initialisation",
                      stacklevel=3)
    with torch.no_grad():
        for k, v in state.items():
            expected[k].copy_(v)


def _names(keys: list[str], limit: int = 12) -> str:
    shown = ", ".join(keys[:limit])
    return shown + (f" and {len(keys) - limit} more" if len(keys) > limit else "")
