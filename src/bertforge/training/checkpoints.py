"""A run's checkpoints: `checkpoints/step-NNNNNNN` directories, each an HF model directory plus
the trainer state that resumes it exactly (optimizer, data position, RNG, the step's averages). Each is
written inside an atomic directory, so a kill leaves either a complete checkpoint or nothing that a
listing takes for one; the newest `keep` are kept."""

from __future__ import annotations

import json
import os
import re
import shutil

import torch
import torch.distributed as dist

from ..atomic import atomic_directory
from ..data.batches import Position
from ..errors import BertforgeError, TrainingStopped
from ..paths import check_fingerprint
from ..checkpoint import read_config
from ..formats.hf import load_parts, write_parts

STATE_FILE = "trainer_state.pt"
CHECKPOINT = re.compile(r"^step-(\d+)$")


def latest_checkpoint(out: str) -> str | None:
    """The newest complete checkpoint of the run in `out`, or None."""
    found = _list(os.path.join(out, "checkpoints"))
    return found[-1] if found else None


def all_checkpoints(out: str) -> list[str]:
    """The complete checkpoints of the run in `out`, oldest first."""
    return _list(os.path.join(out, "checkpoints"))


def check_same_settings(out: str, settings: dict) -> None:
    """Refuse to resume the run in `out` with data settings other than those its run_config.json saved."""
    path = os.path.join(out, "run_config.json")
    try:
        with open(path, encoding="utf-8") as f:
            saved = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise BertforgeError(f"{path}: cannot be read ({e})") from None
    changed = [f"{k} ({saved.get(k)!r} then, {v!r} now)" for k, v in settings.items()
               if k != "data" and saved.get(k) != v]
    if changed:
        raise BertforgeError(f"{out}: resuming needs the same settings; changed: {'; '.join(changed)}")
    if "data" in settings:  # the data files' fingerprint (paths.fingerprint): the same paths may hold other text
        check_fingerprint(out, saved.get("data"), settings["data"], "data files")


def remove_incomplete(directory: str) -> None:
    """What a kill can leave in the checkpoints folder: temporary directories of interrupted writes,
    and checkpoints half-removed while pruning (they lack the trainer state, which every complete
    checkpoint has, since it is written inside the atomic directory)."""
    if os.path.isdir(directory):
        for name in os.listdir(directory):
            full = os.path.join(directory, name)
            if ".tmp-" in name or ".old-" in name or ".pruned" in name or (
                    CHECKPOINT.match(name) and not os.path.exists(os.path.join(full, STATE_FILE))):
                shutil.rmtree(full, ignore_errors=True)


def _check_finite(model, step: int, out: str) -> None:
    """Refuse to save weights that are not all finite (a learning rate so large that one update
    overflowed them); the checkpoint named "last good" has therefore always passed this check."""
    bad = [name for name, p in model.named_parameters() if not torch.isfinite(p).all()]
    if bad:
        latest = latest_checkpoint(out)
        raise TrainingStopped(
            f"the weights became non-finite by step {step} ({len(bad)} tensors, {bad[0]} first); nothing was "
            "saved. " + (f"The last good checkpoint is {latest}. " if latest else "No checkpoint was written yet. ")
            + "Lower the learning rate (--lr) or use --precision fp32.")


def _list(directory: str) -> list[str]:
    """The complete checkpoints in `directory`, oldest first."""
    if not os.path.isdir(directory):
        return []
    found = [(int(m.group(1)), name) for name in os.listdir(directory) if (m := CHECKPOINT.match(name))
             and os.path.exists(os.path.join(directory, name, STATE_FILE))]
    return [os.path.join(directory, name) for _, name in sorted(found)]


def write_model(model, tokenizer, directory: str, step: int) -> None:
    """The final model directory (HF files only, no trainer state), if its weights are finite."""
    _check_finite(model, step, os.path.dirname(directory))
    with atomic_directory(directory) as tmp:
        write_parts(model, tmp, tokenizer)


def save_checkpoint(rank, model, optimizer, tokenizer, directory, step, position, elapsed, total_steps, keep, window,
                    best, scaler, budget: dict | None = None) -> None:
    """Write `directory`/step-NNNNNNN (rank 0) and prune all but the newest `keep`. `budget` is the
    state of a minutes budget's plan (training.budget): the recent steps' seconds and where it began."""
    _check_finite(model, step, os.path.dirname(directory))  # on every process: all stop together
    if rank == 0:
        with atomic_directory(os.path.join(directory, f"step-{step:07d}")) as tmp:
            write_parts(model, tmp, tokenizer)
            state = {
                "step": step, "epoch": position.epoch, "index": position.index, "elapsed": elapsed,
                "total_steps": total_steps, "optimizer": optimizer.state_dict(), "torch_rng": torch.get_rng_state(),
                "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
                "window": window, "best": best, "scaler": scaler.state_dict(), "budget": budget,
                # what a recurrent objective carries from one batch to the next (its hidden state)
                "carried": model.carried() if hasattr(model, "carried") else None,
            }
            torch.save(state, os.path.join(tmp, STATE_FILE))
        for old in _list(directory)[:-keep]:
            # renamed first, so that a kill while deleting leaves a name no listing takes for a checkpoint
            pruned = f"{old}.pruned"
            os.rename(old, pruned)
            shutil.rmtree(pruned, ignore_errors=True)
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def restore_checkpoint(model, optimizer, directory: str, device, scaler):
    """Load the newest checkpoint in `directory` into `model`, `optimizer`, `scaler` and the RNGs;
    returns (step, data position, elapsed seconds, total steps, the record window, the best score,
    the budget's state: {} in checkpoints from before it was saved)."""
    found = _list(directory)
    if not found:
        raise BertforgeError(f"{directory}: no checkpoint to resume from")
    latest = found[-1]
    saved = read_config(latest).to_dict()
    asked = model.backbone.config.to_dict()
    differ = [f"{k}={saved[k]} there, {asked[k]} asked" for k in asked if k != "architectures" and asked[k] != saved[k]]
    if differ:
        raise BertforgeError(f"{latest}: the checkpoint is of a different model ({'; '.join(differ)})")
    load_parts(model, latest)
    try:
        state = torch.load(os.path.join(latest, STATE_FILE), map_location=device, weights_only=True)
    except Exception as e:
        raise BertforgeError(f"{os.path.join(latest, STATE_FILE)}: cannot be read ({e})") from None
    optimizer.load_state_dict(state["optimizer"])
    if state.get("scaler") and scaler.is_enabled():
        scaler.load_state_dict(state["scaler"])
    torch.set_rng_state(state["torch_rng"].cpu())
    if state.get("cuda_rng") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda_rng"]])
    if state.get("carried") and hasattr(model, "carry"):
        model.carry(state["carried"])
    window = state.get("window") or (None, 0)
    return (state["step"], Position(state["epoch"], state["index"]), state["elapsed"], state["total_steps"], window,
            state.get("best"), state.get("budget") or {})
