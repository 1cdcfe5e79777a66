"""Trackers beside metrics.jsonl (CSV, TensorBoard, a fake wandb), and a training loop that reads
the device only at log, evaluation and checkpoint steps, still stopping on a non-finite loss."""

import csv
import os
import shutil
import sys
import types

import pytest
import torch
from conftest import write_corpus

from bertforge import BertforgeError
from bertforge.cli import main
from bertforge.errors import TrainingStopped
from bertforge.families.bert.objectives import BertPretraining
from bertforge.pretrain import pretrain
from bertforge.training import budget, distributed, nonfinite, trainer
from bertforge.training.run_log import read_metrics
from bertforge.training.tracking import flatten
from bertforge.training.trainer import TrainOptions


def pretrain_argv(tmp_path, out, *extra):
    return ["pretrain", "--corpus", str(tmp_path / "corpus"), "--out", str(out), "--preset", "bert-tiny",
            "--vocab-size", "100", "--batch-size", "8", "--max-seq-length", "32", "--cache-dir",
            str(tmp_path / "cache"), "--quiet", "--log-every", "1", "--eval-every", "2", "--positions", "absolute",
            *extra]


def read_csv(out) -> list[dict]:
    with open(os.path.join(out, "metrics.csv"), encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


def as_rows(records: list[dict]) -> list[dict]:
    """metrics.jsonl's records as metrics.csv's rows should read: every column, blank where absent."""
    flat = [flatten(r) for r in records]
    columns = list(dict.fromkeys(k for r in flat for k in r))
    return [{k: str(r[k]) if k in r else "" for k in columns} for r in flat]


@pytest.fixture
def corpus(tmp_path):
    write_corpus(tmp_path / "corpus")


def test_csv_rows_are_the_records_of_metrics_jsonl(tmp_path, corpus):
    out = tmp_path / "run"
    assert main(pretrain_argv(tmp_path, out, "--steps", "4", "--report-to", "csv")) == 0
    records = read_metrics(str(out))
    assert [r["step"] for r in records] == [1, 2, 2, 3, 4, 4]  # training records and evaluations
    rows = read_csv(out)
    assert rows == as_rows(records)
    assert list(rows[0])[:2] == ["step", "lr"] and "eval/loss" in rows[0]


def test_a_resume_neither_repeats_nor_loses_csv_rows(tmp_path, corpus):
    out = tmp_path / "run"
    argv = pretrain_argv(tmp_path, out, "--save-every", "2", "--report-to", "csv")
    assert main([*argv, "--steps", "4"]) == 0
    # As if the run had been killed after writing steps 3 and 4 but before checkpointing them:
    shutil.rmtree(out / "checkpoints" / "step-0000004")
    shutil.rmtree(out / "model")
    assert [r["step"] for r in read_csv(out)] == ["1", "2", "2", "3", "4", "4"]
    assert main([*argv, "--steps", "6", "--resume"]) == 0
    records = read_metrics(str(out))
    assert [r["step"] for r in records] == [1, 2, 2, 3, 4, 4, 5, 6, 6]
    assert read_csv(out) == as_rows(records)
    # a tracker added on resume starts from the whole history
    assert main([*pretrain_argv(tmp_path, out, "--save-every", "2"), "--steps", "7", "--resume"]) == 0
    assert main([*argv, "--steps", "8", "--resume"]) == 0
    assert read_csv(out) == as_rows(read_metrics(str(out)))
    assert not [name for name in os.listdir(out) if ".tmp-" in name]


@pytest.mark.parametrize("tracker", ["tensorboard", "wandb"])
@pytest.mark.parametrize("command", ["pretrain", "finetune"])
def test_a_missing_tracker_package_is_one_line_before_any_work(tmp_path, capsys, monkeypatch, tracker, command):
    monkeypatch.setitem(sys.modules, tracker, None)  # as if not installed: `import` fails, find_spec says None
    out = tmp_path / "run"
    if command == "pretrain":
        argv = pretrain_argv(tmp_path, out, "--steps", "2", "--report-to", "csv", tracker)
    else:  # files that do not exist: the tracker is checked before anything is read
        argv = ["finetune", "--task", "sst2", "--train", str(tmp_path / "t.tsv"), "--dev", str(tmp_path / "d.tsv"),
                "--model", str(tmp_path / "m"), "--out", str(out), "--report-to", tracker]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err == (f"bertforge: error: --report-to {tracker} needs the {tracker} package: "
                   f"pip install 'bertforge[{tracker}]'\n")
    assert not out.exists()
    with pytest.raises(BertforgeError, match=f"needs the {tracker} package"):
        TrainOptions(out=str(out), steps=1, report_to=(tracker,))


def test_tensorboard_gets_every_number_of_metrics_jsonl(tmp_path, corpus):
    pytest.importorskip("tensorboard", reason="the tensorboard extra is not installed")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "run"
    assert main(pretrain_argv(tmp_path, out, "--steps", "4", "--report-to", "tensorboard")) == 0
    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    logged = {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}
    expected = {}
    for record in read_metrics(str(out)):
        for key, value in flatten(record).items():
            if key != "step":
                expected.setdefault(key, []).append((record["step"], pytest.approx(value, rel=1e-6)))
    assert logged == expected and "eval/loss" in logged and "loss" in logged


class FakeWandb(types.ModuleType):
    """The three calls bertforge makes, recorded; a resumed run starts after its last logged step."""

    def __init__(self):
        super().__init__("wandb")
        self.calls = []
        self.last_step = {}  # run id -> its last logged step

    def init(self, **kwargs):
        self.calls.append(("init", kwargs))
        self.id = kwargs.get("id")
        resumed = kwargs.get("resume") == "allow" and self.id in self.last_step
        return types.SimpleNamespace(starting_step=self.last_step[self.id] + 1 if resumed else 0)

    def log(self, values, step=None):
        self.calls.append(("log", values, step))
        self.last_step[self.id] = step

    def finish(self, exit_code=None):
        self.calls.append(("finish", exit_code))


def test_wandb_logs_the_records_of_metrics_jsonl(tmp_path, corpus, monkeypatch):
    fake = FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    monkeypatch.setenv("WANDB_PROJECT", "mine")
    out = tmp_path / "run"
    assert main(pretrain_argv(tmp_path, out, "--steps", "4", "--report-to", "wandb")) == 0
    (init, kwargs), *logs, finish = fake.calls
    assert init == "init" and kwargs["project"] == "mine" and kwargs["dir"] == str(out)
    assert kwargs["config"]["training"]["report_to"] == ("wandb",) and kwargs["config"]["model"]["vocab_size"] > 0
    records = read_metrics(str(out))
    assert [(values, step) for _, values, step in logs] == \
        [({k: v for k, v in flatten(r).items() if k != "step"}, r["step"]) for r in records]
    assert finish == ("finish", 0)


def test_a_resumed_run_continues_its_wandb_run(tmp_path, corpus, monkeypatch):
    fake = FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    monkeypatch.delenv("WANDB_RUN_ID", raising=False)
    out = tmp_path / "run"
    argv = pretrain_argv(tmp_path, out, "--save-every", "2", "--report-to", "wandb")
    assert main([*argv, "--steps", "4"]) == 0
    shutil.rmtree(out / "checkpoints" / "step-0000004")  # as if killed after sending step 4, before saving it
    shutil.rmtree(out / "model")
    assert main([*argv, "--steps", "4", "--resume"]) == 0
    first, second = [kwargs for call, kwargs, *_ in fake.calls if call == "init"]
    assert first["id"] == second["id"] == (out / "wandb-run-id").read_text().strip()
    assert second["resume"] == "allow"
    # the steps W&B heard before the interruption (3, 4) are not sent again; every other record is, once
    def untimed(values):
        return {k: v for k, v in values.items() if k not in ("step", "tokens_per_s", "elapsed_s")}

    sent = [(untimed(values), step) for call, values, step in (c for c in fake.calls if c[0] == "log")]
    assert sent == [(untimed(flatten(r)), r["step"]) for r in read_metrics(str(out))]
    # a new run in another directory is another W&B run
    assert main([*pretrain_argv(tmp_path, tmp_path / "other", "--report-to", "wandb"), "--steps", "2"]) == 0
    third = [kwargs for call, kwargs, *_ in fake.calls if call == "init"][-1]
    assert third["id"] != first["id"]


def break_loss_at(monkeypatch, call: int, value: float = float("nan")) -> None:
    """Make the `call`-th forward pass of BertPretraining (one per step here) return a non-finite loss."""
    calls, real_forward = {"n": 0}, BertPretraining.forward

    def failing_forward(self, batch):
        losses, correct = real_forward(self, batch)
        calls["n"] += 1
        if calls["n"] == call:
            losses["mlm"] = losses["mlm"] * value
        return losses, correct

    monkeypatch.setattr(BertPretraining, "forward", failing_forward)


def test_wandb_hears_a_failed_run(tmp_path, corpus, monkeypatch):
    fake = FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    break_loss_at(monkeypatch, 2)
    assert main(pretrain_argv(tmp_path, tmp_path / "run", "--steps", "4", "--report-to", "wandb")) == 2
    assert fake.calls[-1] == ("finish", 1)


# ---- the loop reads the device only at log, evaluation and checkpoint steps ----------------------


def small_options(out, **overrides):
    values = dict(out=str(out), steps=8, log_every=4, eval_every=0, save_every=1000, progress=False, lr=1e-3,
                  precision="fp32")
    values.update(overrides)
    return TrainOptions(**values)


def run(tmp_path, name, **overrides):
    out = tmp_path / name
    return pretrain(str(tmp_path / "corpus"), str(out), preset="bert-tiny", vocab_size=100, max_seq_length=32,
                    batch_size=8, cache_dir=str(tmp_path / "cache"), options=small_options(out, **overrides))


def test_the_loop_reads_the_device_per_record_not_per_step(tmp_path, corpus, monkeypatch):
    """Every conversion of a tensor to a Python value made by the loop's modules is counted: twice
    the steps at the same number of records make the same number of reads (on a GPU, each read waits
    for the device)."""
    reads = {"n": 0}
    sources = {os.path.normcase(m.__file__) for m in (trainer, budget, distributed, nonfinite)}
    for name in ("__bool__", "__float__", "__int__", "__index__", "item", "tolist"):
        real = getattr(torch.Tensor, name)

        def counted(self, *args, real=real, **kwargs):
            if os.path.normcase(sys._getframe(1).f_code.co_filename) in sources:
                reads["n"] += 1
            return real(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    counts = []
    for steps in (8, 16):
        reads["n"] = 0
        run(tmp_path, f"run-{steps}", steps=steps, log_every=steps // 2)
        counts.append(reads["n"])
    assert counts[0] == counts[1] > 0


def test_a_non_finite_loss_between_records_stops_the_run_at_the_next(tmp_path, corpus, monkeypatch):
    break_loss_at(monkeypatch, 6, float("inf"))  # the sixth step: between the records at steps 4 and 8
    with pytest.raises(TrainingStopped, match=r"the loss became (nan|inf) at step 6; stopped without updating the "
                       r"weights from that step on \(seen at step 8.*step-0000004.*--lr"):
        run(tmp_path, "run", save_every=4)
    assert os.listdir(tmp_path / "run" / "checkpoints") == ["step-0000004"]
    assert [r["step"] for r in read_metrics(str(tmp_path / "run"))] == [4]


def test_no_update_is_applied_from_a_non_finite_step_on(tmp_path, corpus, monkeypatch):
    """When the run stops, the model holds the weights of the last good step exactly (the fused
    optimizer skips the updates on the device), whatever the steps after it computed."""
    from bertforge.formats.hf import load_pretrained

    recipe = sys.modules["bertforge.pretrain"]  # the module (the package's `pretrain` is the function)
    kept, real_train = {}, recipe.train

    def keep_model(model, *args, **kwargs):
        kept["model"] = model
        return real_train(model, *args, **kwargs)

    break_loss_at(monkeypatch, 3)
    monkeypatch.setattr(recipe, "train", keep_model)
    with pytest.raises(TrainingStopped, match=r"at step 3; .* \(seen at step 4"):
        run(tmp_path, "run", steps=8, log_every=8, save_every=2)
    good = load_pretrained(str(tmp_path / "run" / "checkpoints" / "step-0000002"), cls=BertPretraining)
    stopped = dict(kept["model"].named_parameters())
    assert all(torch.equal(p, stopped[name].cpu()) for name, p in good.named_parameters())  # trained on any device
