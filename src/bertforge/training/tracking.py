"""Experiment trackers beside `metrics.jsonl`: a CSV file, TensorBoard, Weights & Biases.

The trainer hands every record it appends to `metrics.jsonl` (training logs and evaluations) to a
`Reporter`, on rank 0 only; `metrics.jsonl` stays the run's own record, and the trackers are views
of it. A record's nested evaluation (`{"step": 200, "eval": {"loss": ...}}`) is flattened to
`eval/loss`, the same name in every tracker.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import sys
import uuid

from ..atomic import atomic_file
from ..errors import BertforgeError

REPORTERS = ("csv", "tensorboard", "wandb")
# the package each tracker needs (its extra has the same name)
PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb"}


def check_reporters(names) -> tuple[str, ...]:
    """The names, checked before any work starts: each one known and its package installed (a
    one-line error with the install command otherwise). Repeats are dropped."""
    names = tuple(dict.fromkeys(names or ()))
    for name in names:
        if name not in REPORTERS:
            raise BertforgeError(f"report_to must be among {', '.join(REPORTERS)}, got {name!r}")
        package = PACKAGES.get(name)
        if package and not _installed(package):
            raise _missing(name)
    return names


def _installed(package: str) -> bool:
    if package in sys.modules:  # imported already, or blocked (None)
        return sys.modules[package] is not None
    try:  # without importing it: wandb and tensorboard take a second or more to import
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # a module set to None in sys.modules, or one without a spec
        return False


def _missing(name: str) -> BertforgeError:
    return BertforgeError(f"--report-to {name} needs the {PACKAGES[name]} package: pip install 'bertforge[{name}]'")


def flatten(record: dict, prefix: str = "") -> dict:
    """A record's nested dicts as `outer/inner` keys, in the record's order."""
    flat = {}
    for key, value in record.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}/"))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _scalars(record: dict) -> dict:
    """The record's numbers (a tracker's charts take nothing else), without the step."""
    return {k: v for k, v in flatten(record).items()
            if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)}


class Reporter:
    """What a tracker does: take each record as it is written, and close at the end of the run
    (`failed`: the run ended in an error). A context manager that closes on leaving."""

    def report(self, record: dict) -> None:
        raise NotImplementedError

    def close(self, failed: bool = False) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, kind, error, traceback):
        self.close(failed=kind is not None and not issubclass(kind, KeyboardInterrupt))


class CsvReporter(Reporter):
    """`metrics.csv` in the run directory: one row per record, the columns the union of the
    records' keys in the order first seen. It starts from `metrics.jsonl` as it stands when the run
    (re)starts, already cut back to the resumed checkpoint, so a resume neither loses nor repeats a
    row. Rows are appended; a record with a new key rewrites the file (atomically) with the wider
    header, which happens a handful of times a run."""

    def __init__(self, out: str):
        self.path = os.path.join(out, "metrics.csv")
        self.rows, self.columns = [], []
        for name in os.listdir(out):  # what a kill while rewriting left
            if name.startswith("metrics.csv.tmp-"):
                os.remove(os.path.join(out, name))
        jsonl = os.path.join(out, "metrics.jsonl")
        if os.path.exists(jsonl):
            with open(jsonl, encoding="utf-8") as f:
                for line in f:
                    if line.strip():
                        self._add(json.loads(line))
        self._rewrite()

    def _add(self, record: dict) -> bool:
        row = {k: json.dumps(v) if isinstance(v, (list, tuple)) else v for k, v in flatten(record).items()}
        new = [k for k in row if k not in self.columns]
        self.columns += new
        self.rows.append(row)
        return bool(new)

    def _rewrite(self) -> None:
        with atomic_file(self.path) as f:
            writer = csv.DictWriter(f, self.columns, lineterminator="\n")
            writer.writeheader()
            writer.writerows(self.rows)

    def report(self, record: dict) -> None:
        try:
            if self._add(record):
                self._rewrite()
            else:
                with open(self.path, "a", encoding="utf-8", newline="") as f:
                    csv.DictWriter(f, self.columns, lineterminator="\n").writerow(self.rows[-1])
        except OSError as e:
            raise BertforgeError(f"{self.path}: could not be written ({e.strerror or e})") from None


class TensorBoardReporter(Reporter):
    """Event files under `<run>/tensorboard`; on a resume, the events after the resumed step
    (written before the interruption, and about to be written again) are purged."""

    def __init__(self, out: str, resumed_step: int | None):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise _missing("tensorboard") from None
        purge = (resumed_step or 0) + 1  # a fresh run in a used directory purges the old events too
        self.writer = SummaryWriter(log_dir=os.path.join(out, "tensorboard"), purge_step=purge)

    def report(self, record: dict) -> None:
        for key, value in _scalars(record).items():
            self.writer.add_scalar(key, value, global_step=record["step"])
        self.writer.flush()

    def close(self, failed: bool = False) -> None:
        self.writer.close()


class WandbReporter(Reporter):
    """A Weights & Biases run, its files under the run directory. Its own environment variables
    (WANDB_MODE, WANDB_PROJECT, WANDB_ENTITY, ...) are left to it.

    The W&B run's id is kept in `wandb-run-id` in the run directory, so that a resume continues
    the same W&B run. The records between the resumed checkpoint and the interruption were sent
    already and are not sent again (W&B would drop them with a warning each; a resume repeats them
    exactly, timings aside)."""

    ID_FILE = "wandb-run-id"

    def __init__(self, out: str, run_config: dict, resumed_step: int | None):
        try:
            import wandb
        except ImportError:
            raise _missing("wandb") from None
        self.wandb = wandb
        project = os.environ.get("WANDB_PROJECT") or "bertforge"
        path = os.path.join(out, self.ID_FILE)
        run_id = None
        if resumed_step is not None and os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                run_id = f.read().strip() or None
        if run_id is None:  # a new run: WANDB_RUN_ID if the user chose one
            run_id = os.environ.get("WANDB_RUN_ID") or uuid.uuid4().hex[:12]
            with atomic_file(path) as f:
                f.write(run_id + "\n")
        run = wandb.init(project=project, dir=out, config=run_config, id=run_id, resume="allow")
        self.first_step = getattr(run, "starting_step", 0) or 0  # a resumed W&B run's next step

    def report(self, record: dict) -> None:
        if record["step"] >= self.first_step:
            self.wandb.log(_scalars(record), step=record["step"])

    def close(self, failed: bool = False) -> None:
        self.wandb.finish(exit_code=1 if failed else 0)


class Reporters(Reporter):
    """Several trackers as one (none: does nothing)."""

    def __init__(self, reporters: list[Reporter]):
        self.reporters = reporters

    def report(self, record: dict) -> None:
        for reporter in self.reporters:
            reporter.report(record)

    def close(self, failed: bool = False) -> None:
        for reporter in self.reporters:
            reporter.close(failed)


def open_reporters(names, out: str, run_config: dict, resumed_step: int | None = None) -> Reporters:
    """The trackers `names` (of REPORTERS) for the run in `out`; call after `metrics.jsonl` has
    been cut back to the resumed step. `run_config` is what wandb shows as the run's config."""
    made = []
    try:
        for name in check_reporters(names):
            if name == "csv":
                made.append(CsvReporter(out))
            elif name == "tensorboard":
                made.append(TensorBoardReporter(out, resumed_step))
            else:
                made.append(WandbReporter(out, run_config, resumed_step))
    except BaseException:
        Reporters(made).close(failed=True)
        raise
    return Reporters(made)
