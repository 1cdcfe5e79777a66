"""A run's log: metrics.jsonl (one JSON record per logged step or evaluation), what produced the
run, and the loss curves drawn from the log."""

from __future__ import annotations

import json
import os
import sys

import torch

from ..atomic import atomic_file
from ..config import bertforge_version
from ..errors import BertforgeError


def versions() -> dict:
    """What produced a run: bertforge, torch and Python versions, and the git commit when bertforge
    runs from a checkout (with "+dirty" when it has uncommitted changes)."""
    import platform
    import subprocess

    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    commit = None
    try:
        git = ["git", "-C", package]
        top = subprocess.run([*git, "rev-parse", "--show-toplevel"], capture_output=True, text=True, timeout=5,
                             check=True).stdout.strip()
        if os.path.realpath(os.path.join(top, "src", "bertforge")) != os.path.realpath(package):
            raise OSError("an installed copy inside some other repository")
        commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                                check=True).stdout.strip()
        if subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True,
                          timeout=5).stdout.strip():
            commit += "+dirty"
    except (OSError, subprocess.SubprocessError):
        pass  # not a checkout, or no git: an installed package
    return {"bertforge": bertforge_version(), "torch": torch.__version__, "python": platform.python_version(),
            "git": commit}


def append_record(rank: int, out: str, record: dict) -> None:
    if rank == 0:
        path = os.path.join(out, "metrics.jsonl")
        try:  # a line cut short by a full disk is dropped when the run resumes (_truncate_metrics)
            with open(path, "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")
        except OSError as e:
            raise BertforgeError(f"{path}: could not be written ({e.strerror or e})") from None


def truncate_metrics(path: str, step: int) -> None:
    """On resume, drop records written after the checkpoint: they will be written again."""
    if not os.path.exists(path):
        return
    kept = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                if json.loads(line)["step"] <= step:
                    kept.append(line)
            except (json.JSONDecodeError, KeyError, TypeError):
                pass  # a line cut short by a crash
    with atomic_file(path) as f:
        f.writelines(kept)


def read_metrics(out: str) -> list[dict]:
    with open(os.path.join(out, "metrics.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def plot_metrics(out: str) -> str | None:
    """Draw the training and held-out loss curves to `loss.png` (needs matplotlib: the `plot` extra)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no loss plot: matplotlib is not installed (pip install 'bertforge[plot]')", file=sys.stderr)
        return None
    records = read_metrics(out)
    train = [r for r in records if "loss" in r]
    held = [r for r in records if r.get("eval")]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot([r["step"] for r in train], [r["loss"] for r in train], label="training loss")
    if held and "loss" in held[0]["eval"]:
        ax.plot([r["step"] for r in held], [r["eval"]["loss"] for r in held], "o-", label="held-out loss")
    elif held:  # fine-tuning: the task's dev metrics, on their own axis
        metrics_axis = ax.twinx()
        for name in held[0]["eval"]:
            metrics_axis.plot([r["step"] for r in held], [r["eval"][name] for r in held], "o--", label=f"dev {name}")
        metrics_axis.set_ylabel("dev metric")
        metrics_axis.legend(loc="center right")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.legend(loc="upper right")
    ax.grid(alpha=0.3)
    path = os.path.join(out, "loss.png")
    fig.tight_layout()
    with atomic_file(path, "wb") as f:
        fig.savefig(f, dpi=100, format="png")
    plt.close(fig)
    return path
