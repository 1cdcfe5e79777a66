"""What the speed suite (speed.py) and its inference peers (peers.py) share: where the data is, the
SST-2 sentences they time, and a process's peak memory."""

from __future__ import annotations

import os
import resource

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.normpath(os.path.join(HERE, "..", "..", "shared", "data"))


def peak_rss_mb() -> float:
    """This process's peak resident memory. Linux's `ru_maxrss` carries the parent's peak across
    fork and exec (a child of a 1.3 GB parent reports at least 1.3 GB), so the kernel's own
    high-water mark of this address space is read instead where there is one."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def sst2_sentences(n: int, seed: int) -> tuple[list[str], list[int]]:
    """`n` sentences of SST-2's training set and their labels, drawn without replacement by `seed`."""
    import numpy as np

    with open(os.path.join(DATA, "glue", "SST-2", "train.tsv"), encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f][1:]
    chosen = np.random.default_rng(seed).choice(len(rows), n, replace=False)
    return [rows[i][0] for i in chosen], [int(rows[i][1]) for i in chosen]
