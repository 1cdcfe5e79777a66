"""Tensor I/O shared by every checkpoint format: safetensors files (and old pickled ones, read
without running code) with errors that name the file, every tensor checked finite, and a state
copied into a module with every missing, unexpected or mis-shaped key named."""

from __future__ import annotations

import os
import pickle
import warnings

import torch
from torch import nn

from ..errors import BertforgeError
from ..paths import why_missing


def read_safetensors(path: str) -> dict[str, torch.Tensor]:
    """Every tensor of a safetensors file; a missing, truncated or corrupt file is an error naming it."""
    from safetensors.torch import load_file

    return _safetensors(path, load_file)


def tensor_names(path: str) -> list[str]:
    """The names of a safetensors file's tensors, from its header alone: no tensor is read."""
    from safetensors import safe_open

    def names(path: str) -> list[str]:
        with safe_open(path, framework="pt") as f:
            return list(f.keys())

    return _safetensors(path, names)


def _safetensors(path: str, read):
    """`read(path)`, with a missing, truncated or corrupt file an error naming it."""
    if not os.path.isfile(path):  # (safetensors says "No such device" of a directory)
        raise BertforgeError(f"{path}: {why_missing(path)}")
    try:
        return read(path)
    except FileNotFoundError:
        raise BertforgeError(f"{path}: {why_missing(path)}") from None
    except Exception as e:  # SafetensorError and OSError: truncated, corrupt or unreadable
        raise BertforgeError(f"{path}: corrupted or truncated safetensors file ({e})") from None


def read_pickled(path: str) -> dict[str, torch.Tensor]:
    """The tensors of an old `pytorch_model.bin`, read by `torch.load(weights_only=True)`, which
    refuses any object but tensors and plain containers: whatever else the pickle holds could run
    code as it loads, so the file is refused whole, in one line (not PyTorch's advice to load it
    with weights_only=False)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Detected pickle protocol 4": PyTorch's aside, not ours
            tensors = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise BertforgeError(f"{path}: no such file") from None
    except pickle.UnpicklingError:
        raise BertforgeError(f"{path}: refused: it holds more than tensors, and loading it could execute code "
                             "(convert it to safetensors where it came from)") from None
    except Exception as e:  # truncated or not a torch file at all: PyTorch's first sentence says which
        reason = " ".join(str(e).split()).split(". ")[0]
        raise BertforgeError(f"{path}: corrupted or not a PyTorch weights file ({reason})") from None
    if not isinstance(tensors, dict) or not all(isinstance(v, torch.Tensor) for v in tensors.values()):
        raise BertforgeError(f"{path}: not a dictionary of tensors")
    return tensors


def check_finite(tensors: dict[str, torch.Tensor], path: str) -> None:
    """Refuse weights holding NaN or infinity, naming the file and the first such tensor: every
    output of the model would be NaN too, silently. BERTFORGE_ALLOW_NONFINITE=1 lets them through,
    to debug the model that made them."""
    if os.environ.get("BERTFORGE_ALLOW_NONFINITE") == "1":
        return
    for name, tensor in tensors.items():
        if tensor.is_floating_point() and not torch.isfinite(tensor).all():
            raise BertforgeError(f"{path}: {name} holds NaN or infinite values, so every output would too "
                                 "(BERTFORGE_ALLOW_NONFINITE=1 loads it anyway, to debug)")


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
