"""How many steps a minutes budget buys, planned throughout the run.

The learning-rate schedule is a pure function of the step and the planned total, so a total is
planned before the first step, from a few timed passes, and planned again every 1% of the run
(`REPLANS`) and whenever the plan runs out, from the pace of the recent steps (`Pace`: the last 2%
of the run's steps, at least `WINDOW` of them, and enough to span 5% of the budget). A pace that
changes during the run (a contended start, a laptop that throttles, a neighbour's job that ends)
moves the plan within a few percent of the run, so the run ends when its minutes do, neither early
nor late: the fixed plans of the past, made from early steps, trained 24 s of a 3-minute budget
after a busy start and 27.8 of 45 minutes after a slow one.

The plan is part of the run's state: the total, the seconds of the recent steps and where the budget
began are in every checkpoint, so a resumed run plans exactly as the uninterrupted one would have at
the same pace. Every process plans rank 0's number, or their collectives would pair up wrongly.
"""

from __future__ import annotations

import functools
import time
from collections import deque
from contextvars import ContextVar

import torch
import torch.distributed as dist

REPLANS = 100  # plans per run: one every 1% of its steps
WINDOW = 10  # the pace is the mean of the last 2% of the run's steps, and of at least this many,
WINDOW_TIME = 0.05  # and of enough of them to span 5% of the budget (a busy machine's steps vary),
KEPT = 1000  # and of at most this many
LEAST_MEASURED = 3  # steps measured before the first plan from the real pace


# When the command began (time.perf_counter): `--max-minutes` is the whole command's budget, so the
# trainer spends the time taken to read and prepare the data from it too.
_COMMAND_START: ContextVar[float | None] = ContextVar("command_start", default=None)


def whole_command(function):
    """Decorate a command's function (pretrain, finetune, train_translation, ...): its minutes budget
    counts from its call. The outermost call counts (pretrain calling pretrain_recurrent)."""

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        token = _COMMAND_START.set(time.perf_counter()) if _COMMAND_START.get() is None else None
        try:
            return function(*args, **kwargs)
        finally:
            if token is not None:
                _COMMAND_START.reset(token)

    return wrapper


def command_started() -> float | None:
    """time.perf_counter() when the command running now began, or None outside one."""
    return _COMMAND_START.get()


class Pace:
    """The seconds of the recent steps (training only: evaluations and checkpoints are apart)."""

    def __init__(self, seconds=()):
        self.seconds = deque((float(s) for s in seconds), maxlen=KEPT)

    def add(self, seconds: float) -> None:
        self.seconds.append(seconds)

    def per_step(self, total_steps: int, budget_seconds: float = 0.0, least: int = LEAST_MEASURED) -> float | None:
        """The mean seconds of a step over the window for a run of `total_steps` in `budget_seconds`
        (the recent steps: 2% of them and at least `WINDOW`, or more to span 5% of the budget); None
        before `least` steps (the first steps carry one-time costs)."""
        if len(self.seconds) < max(least, 1):
            return None
        steps, spanned, count = max(WINDOW, total_steps // 50), 0.0, 0
        for seconds in reversed(self.seconds):
            if count >= steps and spanned >= WINDOW_TIME * budget_seconds:
                break
            spanned, count = spanned + seconds, count + 1
        return spanned / count

    def state(self) -> list[float]:
        return list(self.seconds)


def due(step: int, total_steps: int) -> bool:
    """Whether to plan again after `step`: at steps 4, 8, 16, ... (a first plan far off, made from
    passes without the optimizer and the data, is corrected within the first steps), every 1% of the
    run, and when the plan is done (the budget may buy more)."""
    early = step > LEAST_MEASURED and step & (step - 1) == 0
    return early or step >= total_steps or step % max(1, total_steps // REPLANS) == 0


def estimate_steps(net, batch: dict, autocast, o, device, world: int, clock=time.perf_counter) -> int:
    """Time three forward+backward passes of `batch` (without updating) against `o`, the run's
    TrainOptions: the steps that fit `o.max_minutes`."""
    timings = []
    for _ in range(3):
        begin = clock()
        with autocast:
            losses, _ = net(batch)
            loss = sum(losses.values())
        loss.backward()
        timings.append(clock() - begin)
    net.zero_grad(set_to_none=True)
    step_seconds = min(timings[1:]) * o.accum * 1.1  # the optimizer update and data add ~10%
    return _agreed(int(o.max_minutes * 60 / max(_with_evaluations(step_seconds, o), 1e-9)), 1, o, device, world)


def replan(step: int, step_seconds: float, elapsed: float, o, device, world: int, least: int | None = None) -> int:
    """The total number of steps that fits the minutes budget, `elapsed` seconds of it spent, at
    `step_seconds` a step; at least `least` (default: one more step)."""
    left = max(0.0, o.max_minutes * 60 - elapsed)
    steps = step + int(left / max(_with_evaluations(step_seconds, o), 1e-9))
    return _agreed(steps, step + 1 if least is None else least, o, device, world)


def replanned_warmup(step: int, warmup: int, o, total_steps: int) -> int:
    """The warm-up of a new plan of `total_steps` at `step`: the plan's share while still warming up;
    once warm (`step` past `warmup`), the same, so that the rate never goes back to a ramp."""
    return max(warmup_steps(o, total_steps), step) if step < warmup else warmup


def warmup_steps(o, total_steps: int) -> int:
    """`o.warmup` as a number of steps: a fraction of them below 1."""
    return int(o.warmup * total_steps) if o.warmup < 1 else int(o.warmup)


def _with_evaluations(step_seconds: float, o) -> float:
    """A step's seconds with its share of the evaluations (a forward is ~1/3 of a step)."""
    share = (o.eval_batches / (3 * o.eval_every)) if o.eval_every else 0.0
    return step_seconds * (1 + share)


def _agreed(steps: int, least: int, o, device, world: int) -> int:
    """`steps` within `o.steps` and at least `least`; rank 0's number in every process."""
    if o.steps:
        steps = min(steps, o.steps)
    planned = torch.tensor(max(steps, least), device=device)
    if world > 1:
        dist.broadcast(planned, 0)
    return int(planned)
