"""The training loop: one function (`_train`), each of its steps a named function beside it. Learning
rate is a pure function of the step.

What it does each step: draw `accum` micro-batches, divide each loss term by its count summed over
the whole step (and over processes), backpropagate, clip, update. Around that: progress, a JSONL
log, periodic held-out evaluation, atomic checkpoints with everything needed to resume exactly,
budgets in steps and minutes (budget.py), Ctrl-C that saves first, and a stop on a non-finite
loss (nonfinite.py); several processes through distributed.py. Every reading of time goes through
the run's clock (`train`'s `clock`), so that tests can give it one whose steps take any time.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass, field

import torch
import torch.distributed as dist

from ..atomic import atomic_file, remove_leftovers_in
from ..card import write_card
from ..checks import check
from ..data.batches import Position
from ..data.held_out import describe
from ..errors import BertforgeError
from ..formats.hf import check_vocab_fits
from ..metrics import format_scores
from ..progress import progress
from .allocator import reuse_freed_memory
from .budget import (LEAST_MEASURED, Pace, command_started, due, estimate_steps, replan, replanned_warmup,
                     warmup_steps)
from .checkpoints import latest_checkpoint, remove_incomplete, restore_checkpoint, save_checkpoint, write_model
from .device import autocast as precision_autocast
from .device import choose_precision
from .distributed import all_sum, device_sum, distributed_setup, host_group, host_sum
from .nonfinite import NonFinite, poison_gradients, update
from .optim import SCHEDULES, layer_groups, lr_at, make_optimizer
from .run_log import append_record, plot_metrics, truncate_metrics, versions
from .tracking import check_reporters, open_reporters


@dataclass
class TrainOptions:
    out: str
    steps: int | None = None  # optimizer steps; with max_minutes, whichever comes first
    max_minutes: float | None = None
    lr: float = 1e-4  # BERT's pretraining peak
    warmup: float = 0.01  # a fraction of the steps if below 1, else a number of steps
    schedule: str = "linear"
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-6
    accum: int = 1  # micro-batches per optimizer step
    clip: float = 1.0
    precision: str = "auto"  # auto (training.device.choose_precision), bf16, fp16 (GPUs), fp32
    log_every: int = 10
    eval_every: int = 200
    eval_batches: int = 20
    save_every: int = 500
    keep: int = 2
    seed: int = 0
    progress: bool = True
    layer_decay: float = 1.0  # learning-rate factor per layer going down (see optim.layer_groups)
    unfreeze_every: int | None = None  # gradual unfreezing: steps between thawing one more depth
    select: str | None = None  # a metric of the evaluator to keep the best model by (higher is better)
    patience: int | None = None  # evaluations without improvement before stopping early
    compile: bool = False  # torch.compile the model (the first steps then include compilation)
    report_to: tuple[str, ...] = ()  # trackers fed every record of metrics.jsonl: csv, tensorboard, wandb

    def __post_init__(self):
        for name in ("steps", "max_minutes", "lr", "warmup", "weight_decay", "eps", "accum", "clip", "log_every",
                     "eval_every", "eval_batches", "save_every", "keep", "seed", "patience", "unfreeze_every"):
            check(name, getattr(self, name))
        check("layer_lr_decay", self.layer_decay)
        if not (isinstance(self.betas, (tuple, list)) and len(self.betas) == 2):
            raise BertforgeError(f"betas must be two numbers, got {self.betas!r}")
        check("beta1", self.betas[0])
        check("beta2", self.betas[1])
        if self.schedule not in SCHEDULES:
            raise BertforgeError(f"schedule must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}")
        if self.precision not in ("auto", "bf16", "fp16", "fp32"):
            raise BertforgeError(f"precision must be auto, bf16, fp16 or fp32, got {self.precision!r}")
        self.report_to = check_reporters(self.report_to)  # a missing package is named before any work starts


def train(model: torch.nn.Module, data, options: TrainOptions, tokenizer=None, run_config: dict | None = None,
          resume: bool = False, evaluator=None, clock=time.perf_counter, started: float | None = None) -> dict:
    """Train `model` (an objective) on `data`. Returns a summary dict.

    `data.batches(position)` yields (next position, micro-batches) per step. Evaluation is
    `evaluator(model) -> metrics` when given (fine-tuning: the task's metric on a dev set), else
    loss and accuracy on `data.eval_batches()`. With `options.select`, `model/` holds the best model
    by that metric, and `options.patience` stops after that many evaluations without improvement.
    Optimizer groups may carry `lr_scale` (layer-wise rates) and `unfreeze_at` (the step from which
    they train), both applied here, so the schedule stays a pure function of the step.

    Writes under `options.out`: `checkpoints/step-N/` (HF files + trainer state), `model/` (the
    final, or best, HF model), `metrics.jsonl`, `run_config.json` and `loss.png` (with matplotlib);
    with `options.report_to`, each record of `metrics.jsonl` also goes to those trackers (`tracking`).

    `clock` gives the seconds the time budget, the pace and tokens/s are measured in; `started`,
    the clock's reading when the command began: `max_minutes` is the whole command's budget, so the
    time it spent reading and preparing its data is spent from it (default: counted from here).
    """
    with contextlib.ExitStack() as cleanup:  # closes the trackers, however the run ends
        return _train(model, data, options, tokenizer, run_config, resume, evaluator, cleanup, clock, started)


@dataclass
class _Run:
    """One run as `_train`'s steps share it: what was set up before the first step, the counters a
    checkpoint saves, and this process's clocks and meters."""

    o: TrainOptions
    model: torch.nn.Module  # the objective
    net: torch.nn.Module  # what runs the batches: the model, compiled and in DDP where asked
    data: object
    tokenizer: object
    evaluator: object
    rank: int
    world: int
    device: torch.device
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    autocast: object = None
    clock: object = time.perf_counter
    weights: dict = field(default_factory=dict)  # an objective's weights of its terms (ELECTRA: 50 x the discriminator's)
    # saved in every checkpoint
    step: int = 0
    position: Position = field(default_factory=Position)
    elapsed: float = 0.0  # seconds trained before this process started
    total_steps: int | None = None
    pace: Pace = field(default_factory=Pace)  # the recent steps' seconds, which plan a minutes budget
    budget_since: float = 0.0  # the elapsed seconds at which the minutes budget began
    sums: dict | None = None  # the metrics window: sums since the last record, and its tokens
    window_tokens: int = 0
    best: dict = field(default_factory=lambda: {"score": None, "step": None, "stale": 0})
    # this process's
    warmup: int = 0
    saved_warmup: int | None = None  # a resumed plan's warm-up, as the run had fixed it
    replanning: bool = False  # a minutes budget without a number of steps: planned throughout
    announced: tuple[int, float] = (0, 0.0)  # the plan last printed, and the budget's seconds then
    reporter: object = None
    bar: object = None
    faults: NonFinite | None = None
    host_group: object = None
    start: float = 0.0  # the clock's reading at elapsed 0
    window_start: float = 0.0
    loop_start: float = 0.0
    paused_seconds: float = 0.0  # evaluation and checkpoints since loop_start
    step_mark: float = 0.0  # the training seconds (loop_start on, pauses apart) when the last step ended
    last_saved: int = -1
    last_eval: dict | None = None
    status: str = "done"


def _train(model, data, options: TrainOptions, tokenizer, run_config: dict | None, resume: bool, evaluator,
           cleanup: contextlib.ExitStack, clock, started: float | None = None) -> dict:
    o = options
    run = _start(model, data, o, tokenizer, evaluator, resume, run_config, clock)
    _open_outputs(run, run_config, resume, cleanup)
    batches = data.batches(run.position)
    planning = clock()  # the timed passes of a first plan are spent from the budget too, and so is the
    if started is None and clock is time.perf_counter:  # data's preparation, from the command's start
        started = command_started()
    planning = min(planning, started) if started is not None else planning
    _plan(run)
    stop = _StopFlag()
    run.bar = progress(total=run.total_steps, initial=run.step, disable=not (o.progress and run.rank == 0),
                       desc="training", unit="steps")
    run.start, run.window_start = planning - run.elapsed, clock()
    run.last_saved = run.step if resume else -1
    compile_clock = clock() if o.compile else None
    run.loop_start = clock()
    # Nothing in a step waits for the device: losses, gradient norms and the non-finite check stay
    # device tensors, read on the host only at log, evaluation and checkpoint steps and at the end
    # (on a GPU each read stalls the queue of kernels until it drains).
    run.faults, run.host_group = NonFinite(run.device), host_group(run.world)
    with stop:
        while run.step < run.total_steps:
            reason = _stop_reason(run, stop.requested)
            if reason:
                run.status = reason
                break
            next_position, micro = next(batches)
            totals = host_sum({k: sum(b["counts"][k] for b in micro) for k in micro[0]["counts"]}, run.host_group)
            lr = _set_learning_rates(run)
            step_sums, step_loss = _forward_backward(run, micro, totals)
            _apply_gradients(run, step_loss)
            run.step += 1
            run.position = next_position
            run.window_tokens += sum(b["tokens"] for b in micro) * run.world
            run.sums = _add(run.sums, step_sums, totals)
            run.bar.update(1)
            _measure_step(run, compiled=compile_clock is not None)
            if compile_clock is not None:
                _log(run.rank == 0, f"first step, compilation included: {clock() - compile_clock:.1f}s")
                compile_clock = None
            if run.replanning and due(run.step, run.total_steps):
                _replan_budget(run)

            step = run.step
            logging = step % o.log_every == 0 or step == run.total_steps
            evaluating = bool(o.eval_every) and step % o.eval_every == 0
            saving = bool(o.save_every) and step % o.save_every == 0
            if logging or evaluating or saving:
                run.faults.check(step, o.out)  # the interval's one wait for the device
            if logging:
                _log_step(run, lr)
            paused = clock()
            if evaluating:
                improved = _judge(run, _evaluate_now(run), step)
                if o.patience and not improved and run.best["stale"] >= o.patience:
                    run.status = f"stopped early: no better {o.select} in {o.patience} evaluations"
            if saving or run.status.startswith("stopped"):
                _save(run)
            if run.status.startswith("stopped"):
                break
            run.window_start += clock() - paused  # tokens/s measures training, not evaluation
            run.paused_seconds += clock() - paused
    return _finish(run)


def _start(model, data, o: TrainOptions, tokenizer, evaluator, resume: bool, run_config: dict | None,
           clock) -> _Run:
    """Everything before the first step: the device, the optimizer, the precision, the checkpoint
    resumed from, the model compiled and wrapped for DDP."""
    if not o.steps and not o.max_minutes:
        raise BertforgeError("give a budget: a number of steps, a number of minutes, or both")
    rank, world, device = distributed_setup()
    check_vocab_fits(tokenizer, model.backbone.config)
    if device.type == "cpu":
        reuse_freed_memory()
    torch.manual_seed(o.seed)
    model.to(device)
    groups = (layer_groups(model, o.weight_decay, o.layer_decay, o.unfreeze_every)
              if o.layer_decay != 1.0 or o.unfreeze_every else None)
    optimizer = make_optimizer(model, o.lr, o.weight_decay, o.betas, o.eps, groups)
    precision = choose_precision(o.precision, device)
    # fp16 (GPUs without native bf16) needs its loss scaled against underflow; the scaler skips a
    # step whose gradients overflowed and lowers the scale. Disabled, it passes everything through.
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
    run = _Run(o, model, model, data, tokenizer, evaluator, rank, world, device, optimizer, scaler, clock=clock,
               total_steps=o.steps)
    checkpoints = os.path.join(o.out, "checkpoints")
    if resume:
        _resume(run, checkpoints)
    elif latest_checkpoint(o.out):
        raise BertforgeError(f"{o.out} already holds checkpoints: pass --resume to continue, or choose another --out")
    if rank == 0:
        remove_incomplete(checkpoints)
        remove_leftovers_in(o.out)  # what a kill mid-write left: model, tokenizer, plot, logs
    run.autocast = precision_autocast(precision, device)
    _log(rank == 0 and o.progress, header(model, run_config or {}, o, device, precision, world))
    # An objective may weigh its terms (ELECTRA: 50 x the discriminator's); terms are logged unweighted.
    run.weights = getattr(model, "loss_weights", {})
    net = torch.compile(model, dynamic=True) if o.compile else model
    run.net = torch.nn.parallel.DistributedDataParallel(net) if world > 1 else net
    return run


def _resume(run: _Run, checkpoints: str) -> None:
    """The model, optimizer and counters of the latest checkpoint."""
    o = run.o
    run.step, run.position, run.elapsed, run.total_steps, window, saved_best, budget = restore_checkpoint(
        run.model, run.optimizer, checkpoints, run.device, run.scaler)
    run.pace, run.budget_since = Pace(budget.get("pace", ())), budget.get("since", 0.0)
    run.saved_warmup = budget.get("warmup")
    run.best.update(saved_best or {})
    if o.select and run.best["score"] is not None and abs(run.best["score"]) > 1:
        run.best["score"] /= 100  # checkpointed when task scores were kept in percent; they are fractions now
    _log(run.rank == 0, f"resuming from step {run.step} (epoch {run.position.epoch}, instance {run.position.index})")
    if o.steps and o.steps != run.total_steps:
        _log(run.rank == 0, f"the run planned {run.total_steps} steps; now {o.steps} (the schedule stretches to fit)")
        run.total_steps, run.saved_warmup = o.steps, None
    elif not o.steps and o.max_minutes and run.step >= run.total_steps:  # plan done: a new budget continues it
        _log(run.rank == 0, f"the run's plan of {run.total_steps} steps is done; planning {o.max_minutes} more minutes")
        run.total_steps, run.budget_since, run.saved_warmup = None, run.elapsed, None
    # The metrics window is part of the state, so that records after a resume average the same
    # steps as in an uninterrupted run.
    run.sums, run.window_tokens = window if window else (None, 0)


def _open_outputs(run: _Run, run_config: dict | None, resume: bool, cleanup: contextlib.ExitStack) -> None:
    """run_config.json written, metrics.jsonl cut back to the step resumed from, the trackers opened (rank 0)."""
    o = run.o
    if run.rank != 0:
        return
    os.makedirs(o.out, exist_ok=True)
    written = {**(run_config or {}), "training": asdict(o), "world_size": run.world, "versions": versions()}
    with atomic_file(os.path.join(o.out, "run_config.json")) as f:
        json.dump(written, f, indent=2)
    truncate_metrics(os.path.join(o.out, "metrics.jsonl"), run.step)
    run.reporter = cleanup.enter_context(open_reporters(o.report_to, o.out, written, run.step if resume else None))


def _write(run: _Run, record: dict) -> None:
    """A record to metrics.jsonl and to the trackers (rank 0 only)."""
    append_record(run.rank, run.o.out, record)
    if run.reporter is not None:
        run.reporter.report(record)


def _plan(run: _Run) -> None:
    """The number of steps (from the time budget when no number was given) and of warm-up steps.
    A minutes budget without a number of steps is planned again as the run goes (`_replan_budget`)."""
    o = run.o
    if run.total_steps is None:
        first = _to(next(run.data.batches(Position()))[1][0], run.device)
        run.total_steps = run.step + estimate_steps(run.net, first, run.autocast, o, run.device, run.world,
                                                    run.clock)
        _log(run.rank == 0, f"time budget of {o.max_minutes:g} min: planning {run.total_steps} steps, and again "
                            "as the pace of the steps shows")
    run.replanning = bool(o.max_minutes) and not o.steps
    run.warmup = warmup_steps(o, run.total_steps) if run.saved_warmup is None else run.saved_warmup
    run.announced = (run.total_steps, 0.0)


def _measure_step(run: _Run, compiled: bool) -> None:
    """The seconds of the step just done, for the pace: the training seconds since the last step
    ended (which takes in a wait for the device at the last log step; evaluations and checkpoints
    are apart). A first step that compiled the model is left out."""
    now = run.clock() - run.loop_start - run.paused_seconds
    if not compiled:
        run.pace.add(now - run.step_mark)
    run.step_mark = now


def _replan_budget(run: _Run) -> None:
    """The number of steps planned again from the pace of the recent steps and the minutes left
    (budget.py); when the plan is done, more steps only if one more fits."""
    step, done = run.step, run.step >= run.total_steps
    step_seconds = run.pace.per_step(run.total_steps, run.o.max_minutes * 60, least=1 if done else LEAST_MEASURED)
    if step_seconds is None:
        return
    spent = run.clock() - run.start - run.budget_since
    planned = replan(step, step_seconds, spent, run.o, run.device, run.world, least=step if done else step + 1)
    if planned == run.total_steps:
        return
    run.total_steps = planned
    run.warmup = replanned_warmup(run.step, run.warmup, run.o, planned)
    run.bar.total = planned
    # printed when it moved by a fifth, at most every tenth of the budget (a busy machine's pace varies)
    last, when = run.announced
    if abs(planned - last) >= 0.2 * last and spent - when >= 0.1 * run.o.max_minutes * 60 and planned > step:
        _log(run.rank == 0, f"at the pace of the recent steps ({step_seconds:.3f} s/step): {planned} steps")
        run.announced = (planned, spent)


def _stop_reason(run: _Run, interrupted: bool) -> str | None:
    """Why to stop before the next step (Ctrl-C, the time budget), the same in every process."""
    o = run.o
    out_of_time = bool(o.max_minutes) and run.clock() - run.start - run.budget_since >= o.max_minutes * 60
    # Every process must stop at the same step, or their collectives would pair up wrongly.
    verdict = host_sum({"time": int(out_of_time), "interrupt": int(interrupted)}, run.host_group)
    if verdict["interrupt"]:
        return "interrupted"
    if verdict["time"]:
        return "time budget reached"
    return None


def _set_learning_rates(run: _Run) -> float:
    """This step's rate, scaled per group (layer-wise rates), and 0 for a group still frozen."""
    lr = lr_at(run.step, run.total_steps, run.warmup, run.o.lr, run.o.schedule)
    for group in run.optimizer.param_groups:
        group["lr"] = lr * group.get("lr_scale", 1.0) if run.step >= group.get("unfreeze_at", 0) else 0.0
    return lr


def _forward_backward(run: _Run, micro: list[dict], totals: dict) -> tuple[dict, torch.Tensor]:
    """The gradients of one step's micro-batches. -> (each term's loss and correct count summed over
    the step and the processes, the step's loss)."""
    step_sums = {}
    for i, batch in enumerate(micro):
        sync = contextlib.nullcontext() if run.world == 1 or i == len(micro) - 1 else run.net.no_sync()
        with sync, run.autocast:
            losses, correct = run.net(_to(batch, run.device))
            # Each term over its whole-step count; DDP averages gradients over processes,
            # so multiplying by the world size makes the result the sum over all of them.
            loss = sum(run.weights.get(k, 1.0) * losses[k] / max(totals[k], 1) for k in losses) * run.world
        run.scaler.scale(loss).backward()
        for k in losses:
            step_sums[f"{k}_loss"] = step_sums.get(f"{k}_loss", 0.0) + losses[k].detach().float()
        for k in correct:
            step_sums[f"{k}_correct"] = step_sums.get(f"{k}_correct", 0.0) + correct[k].detach().float()
    step_sums = device_sum(step_sums)
    step_loss = sum(run.weights.get(k, 1.0) * step_sums[f"{k}_loss"] / max(totals[k], 1) for k in totals)
    return step_sums, torch.as_tensor(step_loss, dtype=torch.float32, device=run.device)


def _apply_gradients(run: _Run, step_loss: torch.Tensor) -> None:
    """Clip and apply the step's gradients, none of a group still frozen and none once anything was
    non-finite."""
    optimizer, scaler, faults = run.optimizer, run.scaler, run.faults
    for group in optimizer.param_groups:  # still frozen (gradual unfreezing): no update, no Adam
        if run.step < group.get("unfreeze_at", 0):  # moments, and no share of the clipping norm
            for p in group["params"]:
                p.grad = None
    if scaler.is_enabled():  # fp16: the scaler skips a step whose gradients overflowed; make it
        poison_gradients(optimizer, faults.seen | ~torch.isfinite(step_loss))  # skip a bad loss's too
    scaler.unscale_(optimizer)
    grad_norm = torch.nn.utils.clip_grad_norm_(run.model.parameters(), run.o.clip or float("inf"))
    # A non-finite loss, or without the scaler non-finite gradients (a bf16 overflow in the
    # backward pass), stops the run: from that step on no update is applied (on the device,
    # without a wait), and the next log, evaluation or checkpoint step raises TrainingStopped.
    faults.record(run.step + 1, step_loss, None if scaler.is_enabled() else grad_norm)
    update(optimizer, scaler, faults.seen)
    optimizer.zero_grad(set_to_none=True)


def _log_step(run: _Run, lr: float) -> None:
    """A record of the metrics window (averages since the last record, the pace) and a new window."""
    now = run.clock()
    record = {"step": run.step, "lr": lr, **_averages(run.sums, run.weights),
              "tokens_per_s": round(run.window_tokens / (now - run.window_start)),
              "elapsed_s": round(now - run.start, 1), "epoch": run.position.epoch}
    run.bar.set_postfix(loss=f"{record['loss']:.3f}", tok_s=record["tokens_per_s"])
    _write(run, record)
    run.sums, run.window_tokens, run.window_start = None, 0, now


def _evaluate_now(run: _Run) -> dict:
    """The evaluator's metrics (fine-tuning: the task's on a dev set), else held-out loss and accuracy."""
    if run.evaluator is None:
        metrics = evaluate(run.net, run.data, run.o.eval_batches, run.autocast, run.device)
    else:
        run.model.eval()
        with torch.no_grad(), run.autocast:
            metrics = run.evaluator(run.model)
        run.model.train()
    run.last_eval = metrics
    return metrics


def _judge(run: _Run, metrics: dict, at_step: int) -> bool:
    """Log an evaluation; with `select`, keep the model if it is the best so far."""
    o, best = run.o, run.best
    _write(run, {"step": at_step, "eval": metrics})
    if run.rank == 0 and o.progress:  # fractions in metrics.jsonl; percent for people (bar.write: under a bar)
        run.bar.write(f"{'dev' if run.evaluator else 'held-out'} at step {at_step}: {format_scores(metrics)}",
                      file=sys.stderr)
    if not o.select:
        return False
    if o.select not in metrics:
        raise BertforgeError(f"cannot select by {o.select!r}: the evaluation gives {', '.join(metrics)}")
    if best["score"] is not None and metrics[o.select] <= best["score"]:
        best["stale"] += 1
        return False
    best.update(score=metrics[o.select], step=at_step, stale=0, metrics=metrics)
    if run.rank == 0:
        write_model(run.model, run.tokenizer, os.path.join(o.out, "model"), at_step)
    return True


def _save(run: _Run) -> None:
    """A checkpoint of this step: everything needed to resume exactly."""
    save_checkpoint(run.rank, run.model, run.optimizer, run.tokenizer, os.path.join(run.o.out, "checkpoints"),
                    run.step, run.position, run.clock() - run.start, run.total_steps, run.o.keep,
                    (run.sums, run.window_tokens), run.best, run.scaler,
                    {"pace": run.pace.state(), "since": run.budget_since, "warmup": run.warmup})
    run.last_saved = run.step


def _finish(run: _Run) -> dict:
    """After the last step: the final evaluation and checkpoint, `model/` with its card, the loss plot."""
    o, step = run.o, run.step
    run.bar.close()
    run.faults.check(step, o.out)  # before the final evaluation and checkpoint
    result = {"status": run.status, "step": step, "elapsed_s": round(run.clock() - run.start, 1)}
    if run.status != "interrupted" and not (o.eval_every and step % o.eval_every == 0):
        _judge(run, _evaluate_now(run), step)
    result["eval"] = run.last_eval
    if step != run.last_saved:
        _save(run)
    if run.status != "interrupted" and run.rank == 0:
        if not o.select:
            write_model(run.model, run.tokenizer, os.path.join(o.out, "model"), step)
        if os.path.isdir(os.path.join(o.out, "model")):
            with open(os.path.join(o.out, "run_config.json"), encoding="utf-8") as f:
                saved = json.load(f)
            kept = (run.best.get("metrics"), run.best["step"]) if o.select else (run.last_eval, step)
            write_card(os.path.join(o.out, "model"), saved, *kept)
        plot_metrics(o.out)
    result["best"] = run.best if o.select else None
    if run.world > 1:
        dist.barrier()
    return result


def evaluate(net, data, max_batches: int, autocast, device) -> dict:
    """Held-out loss and accuracy per term, over the same batches every time. Anything random in
    the objective (ELECTRA's samples) draws from a fixed seed, and the training stream is untouched."""
    was_training = net.training
    net.eval()
    sums, totals = {}, {}
    devices = [device] if device.type == "cuda" else []
    with torch.no_grad(), autocast, torch.random.fork_rng(devices=devices):
        torch.manual_seed(0)
        for batch in data.eval_batches(max_batches):
            losses, correct = net(_to(batch, device))
            for k in losses:
                sums[f"{k}_loss"] = sums.get(f"{k}_loss", 0.0) + losses[k].float()
                totals[k] = totals.get(k, 0) + batch["counts"][k]
            for k in correct:
                sums[f"{k}_correct"] = sums.get(f"{k}_correct", 0.0) + correct[k].float()
    net.train(was_training)
    if not totals:
        return {}
    sums, totals = all_sum(sums, device), all_sum(totals, device)
    return _averages((sums, totals), getattr(getattr(net, "module", net), "loss_weights", {}))


# ---- pieces of the loop ----------------------------------------------------------------------------


def _add(acc, sums: dict, totals: dict):
    if acc is None:
        return dict(sums), dict(totals)
    return ({k: acc[0][k] + v for k, v in sums.items()}, {k: acc[1][k] + v for k, v in totals.items()})


def _averages(acc, weights: dict) -> dict:
    """Mean loss (and accuracy) per term; `loss` is their weighted sum, the loss being minimised."""
    sums, totals = acc
    out = {}
    for k, n in totals.items():
        out[f"{k}_loss"] = round(float(sums[f"{k}_loss"]) / max(n, 1), 5)
        if f"{k}_correct" in sums:
            out[f"{k}_accuracy"] = round(float(sums[f"{k}_correct"]) / max(n, 1), 5)
    out["loss"] = round(sum(weights.get(k, 1.0) * out[f"{k}_loss"] for k in totals), 5)
    return out


def _to(batch: dict, device) -> dict:
    """The batch on `device`. To a GPU through pinned memory: a non-blocking copy from pageable
    memory is a synchronous one in disguise, and the step would wait for it."""
    pin = device.type == "cuda"
    return {k: (v.pin_memory() if pin else v).to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v
            for k, v in batch.items()}


class _StopFlag:
    """Ctrl-C asks the loop to stop after the current step (then it saves); a second one aborts."""

    def __init__(self):
        self.requested = False
        self._previous = None

    def _handle(self, signum, frame):
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        print("\nstopping after this step and saving a checkpoint (Ctrl-C again to abort)", file=sys.stderr)

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc):
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


def header(model, run_config: dict, o: TrainOptions, device, precision: str, world: int) -> str:
    """What a run is about to do, in a few lines: the model and its size, where and in what
    precision, the data (and what is held out), the vocabulary, the budget and rate, the output."""
    config = model.backbone.config
    parameters = sum(p.numel() for p in model.parameters())
    lines = [f"model: {config.model_type}, {config.num_hidden_layers} layers x {config.hidden_size}, "
             f"{parameters / 1e6:.1f}M parameters with its heads; vocabulary {config.vocab_size:,}",
             f"on {device}" + (f" x {world} processes" if world > 1 else "") + f" in {precision}"
             + (" (chosen by --precision auto)" if o.precision == "auto" else "")]
    data = run_config
    if "held_out" in data:  # e.g. "5 documents to train on; held out for evaluation: 2.0% of the text (...)"
        lines.append(f"data: {data['train_documents']:,} documents to train on; {describe(data['held_out'])}"
                     + (", never trained on" if data["held_out"]["share"] else ""))
    elif "train_documents" in data:
        lines.append(f"data: {data['train_documents']:,} documents to train on, {data['eval_documents']:,} held out "
                     "(never trained on)")
    elif "train_examples" in data:
        lines.append(f"data: {data['train_examples']:,} training examples, {data['dev_examples']:,} dev examples")
    budget = ", ".join(part for part in (f"{o.steps:,} steps" if o.steps else "",
                                         f"{o.max_minutes:g} minutes" if o.max_minutes else "") if part)
    lines.append(f"budget: {budget}; peak lr {o.lr:g}, {o.schedule} schedule; output: {o.out}")
    return "\n".join(lines)


def _log(enabled: bool, message: str) -> None:
    if enabled:
        print(message, file=sys.stderr)
