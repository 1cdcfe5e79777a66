"""What the speed suite (speed.py), its inference peers (peers.py) and the translation benchmark
share: where the data is, the SST-2 sentences they time, the machine's matrix-product peak and an
encoder's FLOPs, a process's peak memory, and the provenance line."""

from __future__ import annotations

import os
import resource
import sys
import time

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


def cpu_has_bf16() -> bool:
    """Whether this CPU multiplies bf16 matrices in hardware (AVX512-BF16 or AMX); without it bf16 is
    emulated and many times slower than fp32, so benchmarks run fp32 alone."""
    import torch

    return getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)()


def matmul_peak() -> dict:
    """Best GFLOP/s of square matrix products in bf16 and fp32 (the machine's practical peak): in fp32
    the better of `a @ b` (MKL) and oneDNN's product, both in PyTorch (on an AMD processor with
    AVX-512, MKL runs its AVX2 code at half oneDNN's speed: see src/bertforge/nn/linear.py)."""
    import torch

    def onednn(a, b):
        return torch.ops.mkldnn._linear_pointwise(a, b, None, "none", [], "")

    out = {}
    for dtype in (torch.bfloat16, torch.float32) if cpu_has_bf16() else (torch.float32,):
        best = 0.0
        products = [torch.matmul] + ([onednn] if dtype == torch.float32 and torch.backends.mkldnn.is_available() else [])
        for n, product in ((n, p) for n in (1024, 2048) for p in products):
            a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
            for _ in range(2):
                product(a, b)
            reps = 5
            start = time.perf_counter()
            for _ in range(reps):
                product(a, b)
            best = max(best, 2 * n ** 3 * reps / (time.perf_counter() - start) / 1e9)
        out[str(dtype).removeprefix("torch.")] = round(best, 1)
    return out


def config_json(directory: str) -> dict:
    """A model directory's config.json, as a dict."""
    import json

    with open(os.path.join(directory, "config.json"), encoding="utf-8") as f:
        return json.load(f)


def encoder_flops(config: dict, lengths: list[int]) -> float:
    """Forward FLOPs of a BERT encoder (its config.json) over sentences of `lengths` real tokens: the
    matrix products it needs, 2 a multiply-add (the four attention projections, the feed-forward
    pair, attention's two products over the sentence); no head. The same number for every
    implementation, so that each one's share of the matrix-product peak compares."""
    H, I, L = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    return L * sum(n * 2 * (4 * H * H + 2 * H * I) + 2 * 2 * n * n * H for n in lengths)


def provenance(argv: list[str]) -> dict:
    """Where a result came from: the command, the commit (with "+dirty" for uncommitted changes), the
    date (UTC), the CPU and whether it has bf16, the threads and the library versions."""
    import datetime
    import platform
    import shlex
    import subprocess

    import torch

    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=HERE, capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return ""

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    if git("status", "--porcelain", "--untracked-files=no"):
        commit += "+dirty"
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            fields = dict(line.split(":", 1) for line in f.read().split("\n\n")[0].splitlines() if ":" in line)
        fields = {k.strip(): v.strip() for k, v in fields.items()}
        # a virtual machine may name two generations alike ("AMD EPYC"): family and model tell them apart
        cpu = f"{fields['model name']} (family {fields['cpu family']}, model {fields['model']})"
    except (OSError, KeyError):
        pass
    try:
        import transformers
        hf = transformers.__version__
    except ImportError:
        hf = None
    return {"command": "python " + " ".join(shlex.quote(a) for a in [os.path.relpath(argv[0]), *argv[1:]]),
            "commit": commit, "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "cpu": cpu, "bf16": cpu_has_bf16(), "threads": torch.get_num_threads(), "torch": torch.__version__,
            "transformers": hf}


def provenance_line(p: dict) -> str:
    """`provenance` as the one line above a results table."""
    return (f"`{p['command']}` at {p['commit']}, {p['date']}; {p['cpu']}, {p['threads']} threads, "
            f"bf16 {'yes' if p['bf16'] else 'no (fp32 only)'}; torch {p['torch']}, transformers {p['transformers']}")


def save_table(path: str, table: str) -> None:
    """`table` under its provenance line (this process's command, commit, date and machine), written
    to `path` and printed: a table is never separated from where it came from."""
    text = f"{provenance_line(provenance(sys.argv))}\n\n{table}\n"
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    print(text, end="")
