"""A minutes budget is spent, whatever the pace does during the run: the trainer plans its steps
again from the recent steps' pace, on a clock the test drives (each step costs the simulated seconds
the test says), so nothing here depends on the machine's speed."""

import json

import pytest
import torch
from conftest import tiny_config

from bertforge.data.batches import Position, make_batch
from bertforge.families.bert.objectives import BertPretraining
from bertforge.training.budget import Pace, due
from bertforge.training.trainer import TrainOptions, train


class Clock:
    """Simulated seconds: only the steps move it on."""

    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


class Timed(BertPretraining):
    """A tiny masked LM whose training passes cost `seconds(step)` on the clock (evaluation: nothing)."""

    def __init__(self, clock: Clock, seconds):
        super().__init__(tiny_config(hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=16), sentence=None)
        self.clock, self.seconds = clock, seconds

    def forward(self, batch):
        if self.training:
            self.clock.now += self.seconds(batch["step"])
        return super().forward({k: v for k, v in batch.items() if k != "step"})


class Steps:
    """The same small batch at every step, marked with the step it is for; a crash at `crash_at`."""

    def __init__(self, crash_at: int | None = None):
        generator = torch.Generator().manual_seed(0)
        ids = torch.randint(5, 99, (2, 8), generator=generator)
        labels = torch.full_like(ids, -100)
        labels[:, ::3] = ids[:, ::3]
        masked = ids.clone()
        masked[:, ::3] = 4
        self.batch = make_batch(masked, torch.zeros_like(ids), torch.ones_like(ids), labels)
        self.crash_at = crash_at

    def batches(self, start: Position):
        step = start.index
        while True:
            if step == self.crash_at:
                raise RuntimeError(f"killed at step {step}")
            step += 1
            yield Position(0, step), [{**self.batch, "step": step - 1}]

    def eval_batches(self, max_batches: int):
        yield self.batch


def run_budget(tmp_path, seconds, minutes=1.0, name="run", resume=False, crash_at=None, now=1000.0, **options):
    clock = Clock(now)
    torch.manual_seed(0)
    model = Timed(clock, seconds)
    o = TrainOptions(**{"out": str(tmp_path / name), "max_minutes": minutes, "lr": 1e-3, "eval_every": 0,
                        "log_every": 10, "save_every": 10_000, "progress": False, "precision": "fp32", **options})
    begin = clock.now
    result = train(model, Steps(crash_at), o, resume=resume, clock=clock)
    return result, clock.now - begin


def records(tmp_path, name="run"):
    lines = (tmp_path / name / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny steps: threads would only wait for each other."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# Step costs are binary fractions of a second, so that the clock's sums are exact whatever its offset.


def test_a_slow_start_does_not_cut_the_run_short(tmp_path):
    # The first 10 steps (and the timed passes that make the first plan) are 10 times slower than
    # the rest: the first plan buys 21 steps of the minute, where 120 fit (7.5 s of passes, 10 steps
    # of 2.5 s, 110 of 1/4 s). A plan fixed from them stopped after 21 steps, 35 s into the minute.
    result, seconds = run_budget(tmp_path, lambda step: 2.5 if step < 10 else 0.25)
    assert 0.95 * 60 <= seconds <= 1.05 * 60, seconds
    assert 115 <= result["step"] <= 120
    last = [r for r in records(tmp_path) if "lr" in r][-1]
    assert last["lr"] < 0.05 * 1e-3  # the schedule ran its course: it was planned for the real number of steps


def test_a_plan_that_grows_never_sends_the_rate_back_into_warm_up():
    """A plan of 100 steps (10% warm-up: 10) grown to 400 at step 21 keeps its warm-up of 10: the
    rate, at its peak since step 10, is not sent back to 21/40 of it; while still warming up, the
    warm-up follows the plan."""
    from bertforge.training.budget import replanned_warmup

    o = TrainOptions(out="unused", max_minutes=1.0, warmup=0.1)
    assert replanned_warmup(21, 10, o, 400) == 10
    assert replanned_warmup(5, 10, o, 400) == 40 and replanned_warmup(5, 10, o, 30) == 5
    assert replanned_warmup(3, 10, o, 60) == 6


def test_a_run_that_slows_down_midway_ends_on_time(tmp_path):
    # 1/4 s a step for the first 100 steps, then 1 s: the plan shrinks as the steps slow down.
    result, seconds = run_budget(tmp_path, lambda step: 0.25 if step < 100 else 1.0)
    assert 0.95 * 60 <= seconds <= 1.05 * 60, seconds
    assert 125 <= result["step"] <= 135
    last = [r for r in records(tmp_path) if "lr" in r][-1]
    assert last["lr"] < 0.1 * 1e-3


@pytest.mark.parametrize("slow", [0.5, 2.0])
def test_a_pace_that_keeps_changing_spends_the_budget(tmp_path, slow):
    # Alternating fast and slow stretches of 25 steps, as a machine shared with another job.
    result, seconds = run_budget(tmp_path, lambda step: slow if (step // 25) % 2 else 0.25)
    assert 0.95 * 60 <= seconds <= 1.05 * 60, seconds


def test_a_resumed_budget_run_plans_as_the_uninterrupted_one(tmp_path):
    """Killed at step 90 and resumed from its checkpoint of step 60, on a clock whose steps take
    the same time: every learning rate, loss and plan as in the run that was never stopped."""

    def pace(step):
        return 2.0 if step < 10 else 0.25 if step < 75 else 0.5

    full, _ = run_budget(tmp_path, pace, name="full", save_every=60)
    with pytest.raises(RuntimeError, match="killed at step 90"):
        run_budget(tmp_path, pace, name="cut", save_every=60, crash_at=90)
    resumed, _ = run_budget(tmp_path, pace, name="cut", save_every=60, resume=True, now=5000.0)
    assert resumed["step"] == full["step"] and resumed["status"] == full["status"]
    strip = [{k: v for k, v in r.items() if k != "tokens_per_s"} for r in records(tmp_path, "full")]
    assert strip == [{k: v for k, v in r.items() if k != "tokens_per_s"} for r in records(tmp_path, "cut")]
    assert (tmp_path / "full" / "model" / "model.safetensors").read_bytes() == \
        (tmp_path / "cut" / "model" / "model.safetensors").read_bytes()


def test_a_steps_budget_is_not_planned_again(tmp_path):
    # With a number of steps and minutes, the steps are the plan and the minutes a limit.
    result, seconds = run_budget(tmp_path, lambda step: 0.25, steps=50)
    assert result["step"] == 50 and seconds == 50 * 0.25
    result, seconds = run_budget(tmp_path, lambda step: 1.0, name="short", steps=500)
    assert result["status"] == "time budget reached" and 55 <= result["step"] <= 61 and 60 <= seconds <= 61


def test_the_pace_is_the_recent_steps():
    pace = Pace()
    for seconds in (1.0, 1.0):
        pace.add(seconds)
    assert pace.per_step(100) is None  # too few steps measured
    assert pace.per_step(100, least=1) == 1.0
    for _ in range(10):
        pace.add(0.125)
    assert pace.per_step(100) == 0.125  # the window: the last 10 steps
    assert pace.per_step(1000) == (2 * 1.0 + 10 * 0.125) / 12  # 2% of 1000 = 20 steps, 12 measured
    assert pace.per_step(100, budget_seconds=40) == (1.0 + 10 * 0.125) / 11  # 11 steps span 5% of 40 s
    assert [s for s in range(1, 301) if due(s, 300)] == sorted(set(range(3, 301, 3)) | {4, 8, 16, 32, 64, 128, 256})
    assert due(300, 300) and due(301, 300) and not due(7, 300) and due(7, 8)


def test_the_budget_is_the_whole_commands_the_time_before_training_is_spent_from_it(tmp_path):
    """`--max-minutes` counts from the command's start: 20 s of reading and preparing data before
    the trainer leave it 40 s of a 60 s budget, and the command ends within 5% of its minute."""
    clock = Clock(1000.0)
    torch.manual_seed(0)
    model = Timed(clock, lambda step: 0.25)
    o = TrainOptions(out=str(tmp_path / "run"), max_minutes=1.0, lr=1e-3, eval_every=0, log_every=10,
                     save_every=10_000, progress=False, precision="fp32")
    started = clock.now
    clock.now += 20.0  # the data's preparation
    result = train(model, Steps(), o, clock=clock, started=started)
    assert 57.0 <= clock.now - started <= 63.0
    assert 150 <= result["step"] <= 170  # 40 s of 0.25 s steps, not 60 s


def test_a_command_counts_its_budget_from_its_own_start():
    """The entry points count from their call; the outermost call wins (pretrain calling the recurrent
    pretraining keeps pretrain's start); outside a command there is none."""
    import time

    from bertforge.training.budget import command_started, whole_command

    seen = []

    @whole_command
    def inner():
        seen.append(command_started())

    @whole_command
    def outer():
        time.sleep(0.01)
        inner()
        return command_started()

    begin = time.perf_counter()
    started = outer()
    assert begin <= started == seen[0] <= time.perf_counter() and command_started() is None
