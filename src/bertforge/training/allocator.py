"""The process's memory allocator, tuned for training steps that free and re-allocate the same
large tensors every step."""

from __future__ import annotations

import ctypes
import sys

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters


def reuse_freed_memory() -> bool:
    """Ask glibc's malloc to keep freed memory for reuse rather than return it to the system.

    By default glibc serves blocks above its mmap threshold (at most 32 MB) with fresh mappings and
    unmaps them when freed, so every step pays page faults to touch its activations, casts and
    gradients anew: 11-15% of a pretraining step on this CPU (bert-mini and bert-base, measured with
    benchmarks/speed.py). The cost is that the process keeps its peak memory. Returns whether the
    setting was applied (glibc only; elsewhere nothing changes).
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc (musl, say)
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, 1 << 30)) and bool(libc.mallopt(M_TRIM_THRESHOLD, 1 << 31))
