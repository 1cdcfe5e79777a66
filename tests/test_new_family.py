"""Adding a family is one module and one registration: the tiny family that docs/architecture.md
defines (its code block is run here as it is written), which no generic module names, pretrains,
fine-tunes, is described, predicts, is exported and loaded through the ordinary commands.

The family: a bag-of-words encoder (each token's state mixes its own embedding with the mean of the
sentence's), pretrained with masked LM and fine-tuned as a sentence classifier, saved in
bertforge's own format.
"""

import json
import re
import types
from pathlib import Path

import pytest
from conftest import write_corpus

from bertforge import BertforgeError
from bertforge.cli import main
from bertforge.families import register, unregister

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.S)


def doc_module(marker: str, name: str) -> types.ModuleType:
    """The code block of docs/architecture.md holding `marker`, run as a module of its own."""
    block = next(b for b in python_blocks(DOC.read_text()) if marker in b)
    module = types.ModuleType(name)
    exec(compile(block, str(DOC), "exec"), module.__dict__)
    return module


def pretrain_tiny(objective: str, tmp_path) -> tuple:
    """`bertforge pretrain --objective OBJECTIVE` for 40 steps on a small corpus: the run's folder and
    its masked-LM losses, first to last."""
    write_corpus(tmp_path / "corpus")
    run = tmp_path / "run"
    assert main(["pretrain", "--objective", objective, "--corpus", str(tmp_path / "corpus"), "--out", str(run),
                 "--vocab-size", "100", "--batch-size", "8", "--max-seq-length", "32", "--cache-dir",
                 str(tmp_path / "cache"), "--quiet", "--steps", "40", "--lr", "1e-2", "--log-every", "10",
                 "--eval-every", "40", "--precision", "fp32"]) == 0
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return run, [r["mlm_loss"] for r in records if "mlm_loss" in r and "loss" in r]


BAG = doc_module("FAMILY = Family(", "bag_family")  # the block that registers nothing


@pytest.fixture
def bag_family():
    register(BAG.FAMILY)
    yield BAG.FAMILY
    unregister(BAG.FAMILY)


# ---- the ordinary commands -----------------------------------------------------------------------


def write_sentiment(path, n=48):
    """Sentences whose label is which of two word sets they use (words of the pretraining corpus):
    learnable from a bag of words."""
    one, other = ["alpha", "beta", "gamma"], ["delta", "epsilon", "zeta"]
    rows = ["sentence\tlabel"]
    for i in range(n):
        words = one if i % 2 else other
        rows.append(f"mu {words[i % 3]} eta {words[(i + 1) % 3]}\t{i % 2}")
    path.write_text("\n".join(rows) + "\n")


def test_a_family_defined_outside_the_library_runs_through_every_command(tmp_path, bag_family, capsys):
    run, losses = pretrain_tiny("bag-mlm", tmp_path)
    assert losses[-1] < losses[0] - 0.5  # the bag learns word frequencies at least
    saved = json.loads((run / "model" / "config.json").read_text())
    assert saved["model_type"] == "bag-of-words" and saved["architectures"] == ["BagForMaskedLM"]

    for split in ("train", "dev"):
        write_sentiment(tmp_path / f"{split}.tsv")
    tuned = tmp_path / "tuned"
    assert main(["finetune", "--task", "classification", "--text-column", "sentence", "--label-column", "label",
                 "--model", str(run / "model"), "--train", str(tmp_path / "train.tsv"), "--dev",
                 str(tmp_path / "dev.tsv"), "--out", str(tuned), "--epochs", "8", "--batch-size", "8",
                 "--precision", "fp32", "--quiet"]) == 0
    best = json.loads((tuned / "model" / "eval_results.json").read_text())
    assert best["accuracy"] == 1.0  # which word set a sentence uses is all there is to learn

    capsys.readouterr()
    assert main(["info", str(tuned / "model")]) == 0
    assert "BagForSequenceClassification" in capsys.readouterr().out

    import bertforge

    loaded = bertforge.load(str(tuned / "model"))
    assert loaded.family is BAG.FAMILY and loaded.task.name == "classification"
    predictions = tmp_path / "predictions.jsonl"
    assert main(["predict", "--model", str(tuned / "model"), "--input", str(tmp_path / "dev.tsv"), "--output",
                 str(predictions)]) == 0
    rows = [json.loads(line) for line in predictions.read_text().splitlines()]
    assert [r["label"] for r in rows] == [str(i % 2) for i in range(48)]

    # exported as its family allows, checked in onnxruntime against the model (export fails otherwise)
    assert main(["export", str(tuned / "model"), str(tmp_path / "bag.onnx")]) == 0
    assert "onnxruntime agrees" in capsys.readouterr().out


def test_a_use_the_family_lacks_is_one_error_listing_what_it_has(tmp_path, bag_family, capsys):
    model = tmp_path / "model"
    model.mkdir()
    BAG.BagConfig(architectures=["BagForMaskedLM"]).save(str(model / "config.json"))
    assert main(["fill-mask", str(model), "a [MASK] b"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"bertforge: error: {model}: bag-of-words models have no masked-LM head, which fill-mask needs; " \
                  "they support onnx"
    with pytest.raises(BertforgeError, match="fine-tune for classification, not qa"):
        bertforge_finetune(model, tmp_path)


def bertforge_finetune(model, tmp_path):
    from bertforge.finetune import finetune

    (tmp_path / "qa.json").write_text("{}")
    return finetune("qa", str(tmp_path / "qa.json"), str(tmp_path / "qa.json"), str(model), str(tmp_path / "out"))


def test_the_pages_loading_example_runs_as_written(capsys, monkeypatch):
    monkeypatch.chdir(DOC.parents[1])
    block = next(b for b in python_blocks(DOC.read_text()) if "bertforge.load(" in b)
    exec(compile(block, str(DOC), "exec"), {})
    assert capsys.readouterr().out.split() == ["bert", "sst2", "SequenceClassifier"]
