"""Replaying a run from its run_config.json (`pretrain --config`, `finetune --config`): the same
losses and weights, options on the command line over the file's, and one-line errors for a file
that does not fit the command."""

import json
import shutil

import pytest
import torch
from conftest import write_corpus
from safetensors.torch import load_file

from bertforge.cli import main
from bertforge.training.run_log import read_metrics

TIMING = ("tokens_per_s", "elapsed_s")  # the only fields of a record that the clock decides


def records(out):
    """Every metric record of a run (training and held-out), less its timings."""
    return [{k: v for k, v in r.items() if k not in TIMING} for r in read_metrics(str(out))]


def run_config(out):
    return json.loads((out / "run_config.json").read_text())


def assert_same_weights(first, second):
    mine, theirs = (load_file(str(out / "model" / "model.safetensors")) for out in (first, second))
    assert mine.keys() == theirs.keys()
    assert all(torch.equal(mine[name], theirs[name]) for name in mine)


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("bertforge: error: ") and err.count("\n") == 1, err
    return err


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    """A tiny pretraining run through the command line, its paths relative to the working directory."""
    root = tmp_path_factory.mktemp("replay")
    write_corpus(root / "corpus")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        assert main(["pretrain", "--corpus", "corpus", "--out", "first", "--preset", "bert-tiny", "--vocab-size", "100",
                     "--batch-size", "8", "--max-seq-length", "32", "--cache-dir", "cache", "--quiet", "--steps", "6",
                     "--lr", "2e-3", "--log-every", "2", "--eval-every", "0", "--precision", "fp32"]) == 0
    return root / "first"


def test_run_config_holds_the_command_and_its_options_beside_the_facts(pretrained):
    saved = run_config(pretrained)
    assert saved["command"] == "pretrain"
    args = saved["args"]
    # the command line's own names and values, paths made absolute
    assert args["corpus"] == [str(pretrained.parent / "corpus")] and args["out"] == str(pretrained)
    assert args["cache_dir"] == str(pretrained.parent / "cache")
    assert (args["steps"], args["lr"], args["preset"], args["vocab_size"], args["quiet"]) == (6, 2e-3, "bert-tiny",
                                                                                                100, True)
    assert args["warmup"] is None  # as given: the recipe's default is resolved again on a replay
    assert not {"resume", "config", "debug", "func", "command"} & set(args)
    # ... and the facts other readers use are still there
    assert saved["objective"] == "bert" and saved["training"]["steps"] == 6 and saved["model"]["hidden_size"]
    assert saved["corpus"] == [str(pretrained.parent / "corpus" / f) for f in ("one.txt", "two.txt")]


def test_a_pretraining_run_replays_to_the_same_losses_and_weights(pretrained, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # elsewhere: the saved paths are absolute
    assert main(["pretrain", "--config", str(pretrained / "run_config.json"), "--out", "again"]) == 0
    again = tmp_path / "again"
    assert records(again) == records(pretrained) and len(records(again)) == 4  # 3 training records, 1 evaluation
    assert_same_weights(pretrained, again)
    replayed = run_config(again)
    assert replayed["args"] == {**run_config(pretrained)["args"], "out": str(again)}


def test_options_on_the_command_line_override_the_files(pretrained, tmp_path, capsys):
    other = tmp_path / "other"
    assert main(["pretrain", "--config", str(pretrained / "run_config.json"), "--out", str(other), "--seed", "1",
                 "--steps", "4"]) == 0
    saved = run_config(other)
    assert saved["args"]["seed"] == 1 and saved["args"]["steps"] == 4 and saved["seed"] == 1
    assert saved["args"]["lr"] == 2e-3  # the rest is the file's
    mine, first = records(other), records(pretrained)
    assert [r["step"] for r in mine] == [2, 4, 4]
    assert mine[0]["mlm_loss"] != first[0]["mlm_loss"]  # another seed: other weights, data and masks


@pytest.mark.filterwarnings("ignore:.*no weights for backbone.pooler")  # a RoFormer has no pooler
def test_a_fine_tuning_run_replays_to_the_same_losses_and_weights(pretrained, tmp_path, capsys):
    data = tmp_path / "train.tsv"
    rows = [("alpha beta gamma.", 1), ("delta epsilon.", 0), ("alpha gamma.", 1), ("zeta eta.", 0)] * 4
    data.write_text("sentence\tlabel\n" + "".join(f"{s}\t{label}\n" for s, label in rows))
    first, again = tmp_path / "fine", tmp_path / "again"
    assert main(["finetune", "--task", "sst2", "--train", str(data), "--dev", str(data), "--model", str(pretrained),
                 "--out", str(first), "--epochs", "2", "--batch-size", "8", "--lr", "1e-3", "--log-every", "1",
                 "--precision", "fp32", "--quiet"]) == 0
    saved = run_config(first)
    assert saved["command"] == "finetune" and saved["args"]["model"] == str(pretrained / "model")
    assert saved["args"]["lr"] == 1e-3 and saved["task"] == "sst2" and saved["model"] == str(pretrained / "model")
    assert saved["sources"] == {"lr": "given", "warmup": "recipe bert"}  # the rate given, the warm-up the family's
    assert main(["finetune", "--config", str(first / "run_config.json"), "--out", str(again)]) == 0
    assert records(again) == records(first) and any("cls_loss" in r for r in records(again))
    assert_same_weights(first, again)


def test_a_run_resumes_through_its_config_and_its_data_settings_are_still_checked(pretrained, tmp_path, capsys):
    copy = tmp_path / "copy"
    shutil.copytree(pretrained, copy)
    config = str(copy / "run_config.json")  # its "out" is the original's: --out names the copy
    assert main(["pretrain", "--config", config, "--out", str(copy), "--resume", "--batch-size", "4"]) == 2
    assert "resuming needs the same data settings; changed: batch_size (8 then, 4 now)" in one_line_error(capsys)
    assert main(["pretrain", "--config", config, "--out", str(copy), "--resume", "--steps", "8"]) == 0
    resumed = records(copy)
    assert [r["step"] for r in resumed] == [2, 4, 6, 6, 8, 8]  # a finished run extended by two steps
    assert resumed[:4] == records(pretrained)
    assert "resume" not in run_config(copy)["args"] and run_config(copy)["args"]["steps"] == 8


@pytest.mark.parametrize("content, message", [
    ({"command": "finetune", "args": {"steps": 2, "bogus": 1}}, "unknown option 'bogus' for bertforge finetune"),
    ({"command": "finetune", "args": {"steps": 2, "resume": True}}, "unknown option 'resume' for bertforge finetune"),
    ({"command": "finetune", "args": {"lr": -1}}, "--lr must be a finite number > 0, got -1"),
    ({"command": "finetune", "args": {"epochs": "3"}}, "option 'epochs' must be a number, got '3'"),
    ({"command": "finetune", "args": {"steps": 2.5}}, "option 'steps' must be an integer, got 2.5"),
    ({"command": "finetune", "args": {"crf": "yes"}}, "option 'crf' must be true or false, got 'yes'"),
    ({"command": "finetune", "args": {"scheme": "IOB9"}}, "option 'scheme' must be one of IOB1, IOB2, BIOES"),
    ({"command": "finetune", "args": {"task": None}}, "option 'task' is required, got null"),
    ({"steps": 2}, 'no "command" and "args" to replay'),
    ("{not json", "not a JSON file (Expecting property name"),
])
def test_a_config_that_does_not_fit_is_a_one_line_error_naming_the_file(tmp_path, capsys, content, message):
    path = tmp_path / "run_config.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    assert main(["finetune", "--config", str(path), "--out", str(tmp_path / "out")]) == 2
    err = one_line_error(capsys)
    assert err.startswith(f"bertforge: error: {path}: ") and message in err, err
    assert not (tmp_path / "out").exists()


def test_a_config_from_another_command_or_a_missing_file_is_refused(pretrained, tmp_path, capsys):
    assert main(["finetune", "--config", str(pretrained / "run_config.json"), "--out", str(tmp_path / "x")]) == 2
    assert one_line_error(capsys) == (f"bertforge: error: {pretrained / 'run_config.json'}: the settings of a "
                                      "bertforge pretrain run, not finetune: replay it with bertforge pretrain "
                                      "--config\n")
    (tmp_path / "fine.json").write_text(json.dumps({"command": "finetune", "args": {}}))
    assert main(["pretrain", "--config", str(tmp_path / "fine.json")]) == 2
    assert "fine.json: the settings of a bertforge finetune run, not pretrain" in one_line_error(capsys)
    assert main(["pretrain", "--config", str(tmp_path / "missing.json")]) == 2
    assert one_line_error(capsys) == f"bertforge: error: {tmp_path / 'missing.json'}: cannot be read (No such file " \
                                     "or directory)\n"
    with pytest.raises(Exception, match="missing.json"):  # --debug: the traceback
        main(["pretrain", "--config", str(tmp_path / "missing.json"), "--debug"])
