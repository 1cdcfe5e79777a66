"""Where a command runs and in what precision: the decisions, factored out so that they are the
same for every command and testable without the hardware."""

from __future__ import annotations

import torch

from ..errors import BertforgeError


def resolve_device(name: str | None = "auto", precision: str | None = None) -> torch.device:
    """`auto` (a GPU when there is one, else the CPU), `cpu`, `cuda` or `cuda:N`, checked: asking for
    a GPU that is not there is an error, not a silent fall back to the CPU. For `precision` int8,
    whose kernels are the CPU's, `auto` is the CPU even where there is a GPU (cuda with int8 is
    refused where the model is quantized)."""
    if name in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() and precision != "int8" else "cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise BertforgeError(f"unknown device {name!r}; use auto, cpu, cuda or cuda:N") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            build = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
            raise BertforgeError(f"--device {name}: no CUDA GPU is visible to PyTorch (torch {torch.__version__}, "
                                 f"{build})")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise BertforgeError(f"--device {name}: there are {torch.cuda.device_count()} GPUs (cuda:0 to "
                                 f"cuda:{torch.cuda.device_count() - 1})")
    elif device.type != "cpu":
        raise BertforgeError(f"device {name!r} is not supported; use auto, cpu, cuda or cuda:N")
    return device


def native_bf16(device: torch.device) -> bool:
    """Whether bf16 matrix products are native here: Ampere or later GPUs (not the emulation
    `torch.cuda.is_bf16_supported()` also counts on a T4 or V100), or a CPU with AVX512-BF16/AMX."""
    if device.type == "cuda":
        return torch.cuda.get_device_capability(device)[0] >= 8
    return getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)()  # a private helper, hence the guard


def choose_precision(requested: str, device: torch.device, bf16: bool | None = None) -> str:
    """The precision `auto` (or an explicit request) resolves to on `device`: bf16 where it is
    native; on a GPU without it (T4, V100), fp16, which trains with a gradient scaler; else fp32.
    `bf16` overrides the hardware probe (for tests)."""
    if requested not in ("auto", "bf16", "fp16", "fp32"):
        raise BertforgeError(f"precision must be auto, bf16, fp16 or fp32, got {requested!r}")
    if requested != "auto":
        if requested == "fp16" and device.type != "cuda":
            raise BertforgeError("fp16 is for GPUs (it needs a gradient scaler and has no fast CPU kernels); "
                                 "use bf16 or fp32 on a CPU")
        return requested
    native = native_bf16(device) if bf16 is None else bf16
    if native:
        return "bf16"
    return "fp16" if device.type == "cuda" else "fp32"


def autocast(precision: str, device: torch.device):
    """The autocast context for a resolved precision (a no-op one for fp32)."""
    if precision == "fp32":
        return torch.autocast(device.type, enabled=False)
    return torch.autocast(device.type, dtype=torch.bfloat16 if precision == "bf16" else torch.float16)
