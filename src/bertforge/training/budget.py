"""How many steps a minutes budget buys. The learning-rate schedule is a pure function of the step,
so the number of steps is fixed before the first one: estimated from a few timed passes, then
planned again from the pace of the real steps (`REPLAN_STEPS` and its doublings). Every process
plans the same number, or their collectives would pair up wrongly."""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

REPLAN_STEPS = 20


def estimate_steps(net, batch: dict, autocast, o, device, world: int) -> int:
    """Time three forward+backward passes of `batch` (without updating) against `o`, the run's
    TrainOptions: the steps that fit `o.max_minutes`."""
    timings = []
    for _ in range(3):
        begin = time.perf_counter()
        with autocast:
            losses, _ = net(batch)
            loss = sum(losses.values())
        loss.backward()
        timings.append(time.perf_counter() - begin)
    net.zero_grad(set_to_none=True)
    step_seconds = min(timings[1:]) * o.accum * 1.1  # the optimizer update and data add ~10%
    return _agreed(int(o.max_minutes * 60 / _with_evaluations(step_seconds, o)), 1, o, device, world)


def replan(step: int, step_seconds: float, elapsed: float, o, device, world: int) -> int:
    """The total number of steps that fits the minutes budget at the pace of the steps so far."""
    steps = step + int((o.max_minutes * 60 - elapsed) / _with_evaluations(step_seconds, o))
    return _agreed(steps, step + 1, o, device, world)


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
