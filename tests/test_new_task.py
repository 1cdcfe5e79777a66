"""Adding a task kind is one class and one registration: the similarity kind that
docs/architecture.md defines (its code block is run here as it is written), which no generic module
names, fine-tunes, predicts, evaluates, is served, exported and read by `transformers` through the
ordinary commands.

The data: pairs of short sentences whose score is how many of the second sentence's three words
are "good" ones, a ranking a tiny BERT learns in a few epochs.
"""

import json
import random

import pytest
import torch
from conftest import tiny_config, word_tokenizer
from test_new_family import doc_module

from bertforge import BertforgeError
from bertforge.cli import main
from bertforge.formats.hf import save_pretrained
from bertforge.families.bert.model import Bert
from bertforge.tasks import register, unregister

transformers = pytest.importorskip("transformers")

GOOD, BAD = ["good", "great", "fine", "nice"], ["bad", "awful", "poor", "dull"]


SIMILARITY = doc_module("class SimilarityTask", "similarity_task")  # the task kind the page defines


@pytest.fixture
def similarity():
    register(SIMILARITY.SimilarityTask)
    yield SIMILARITY.SimilarityTask
    unregister(SIMILARITY.SimilarityTask)


def write_pairs(path, n: int, seed: int) -> str:
    g = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(n):
            good = g.randrange(4)
            words = [g.choice(GOOD) for _ in range(good)] + [g.choice(BAD) for _ in range(3 - good)]
            g.shuffle(words)
            f.write(json.dumps({"a": " ".join(g.choice(GOOD + BAD) for _ in range(2)), "b": " ".join(words),
                                "score": good / 3}) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def base_model(tmp_path_factory):
    directory = tmp_path_factory.mktemp("base")
    tokenizer = word_tokenizer(directory, [" ".join(GOOD + BAD)])
    torch.manual_seed(0)
    save_pretrained(Bert(tiny_config(vocab_size=tokenizer.vocab_size)), str(directory), tokenizer)
    return str(directory)


def test_kendall_tau_is_its_definition():
    tau = SIMILARITY.kendall_tau
    assert tau([1, 2, 3], [10, 20, 30]) == 1.0 and tau([3, 2, 1], [10, 20, 30]) == -1.0
    # pairs (0,1) concordant, (0,2) discordant, (0,3) c, (1,2) d, (1,3) c, (2,3) c -> (4 - 2) / 6
    assert tau([1, 2, 0, 3], [1, 2, 3, 4]) == pytest.approx(2 / 6)
    assert tau([1, 1, 2], [1, 2, 3]) == pytest.approx(2 / 3)  # a tie counts for neither (tau-a)


def test_a_task_kind_defined_outside_the_library_runs_through_every_command(similarity, base_model, tmp_path, capsys):
    train, dev = write_pairs(tmp_path / "train.jsonl", 96, 0), write_pairs(tmp_path / "dev.jsonl", 32, 1)
    run = tmp_path / "run"
    assert main(["finetune", "--task", "similarity", "--model", base_model, "--train", train, "--dev", dev,
                 "--out", str(run), "--epochs", "10", "--batch-size", "8", "--lr", "3e-3", "--precision", "fp32",
                 "--quiet"]) == 0
    model = run / "model"
    kept = json.loads((model / "eval_results.json").read_text())
    assert kept["kendall_tau"] > 0.6  # held-out pairs ranked by how good their second sentence is
    saved = json.loads((model / "config.json").read_text())
    assert saved["bertforge_task"] == {"name": "similarity", "max_seq_length": 64, "family": "similarity",
                                       "regression": True, "metrics": ["kendall_tau"]}

    capsys.readouterr()
    assert main(["evaluate", "--model", str(model), "--data", dev]) == 0
    assert json.loads(capsys.readouterr().out)["kendall_tau"] == kept["kendall_tau"]
    out = tmp_path / "predictions.jsonl"
    assert main(["predict", "--model", str(model), "--input", dev, "--output", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 32 and set(rows[0]) == {"a", "b", "score"}

    # transformers reads it as the one-output regressor its architecture names, with equal logits
    theirs = transformers.AutoModelForSequenceClassification.from_pretrained(model).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(model)
    batch = dict(tokenizer([r["a"] for r in rows[:5]], [r["b"] for r in rows[:5]], padding=True, return_tensors="pt"))
    with torch.no_grad():
        logits = theirs(**batch).logits.squeeze(-1)
    assert torch.allclose(logits, torch.tensor([r["score"] for r in rows[:5]]), atol=1e-5)

    # the Python API and the service answer its requests, and refuse another kind's
    from bertforge.predictor import Predictor

    predictor = Predictor.from_pretrained(str(model))
    answer = predictor([(rows[0]["a"], rows[0]["b"])])[0]
    assert answer["score"] == rows[0]["score"] and answer["truncated"] is False
    with pytest.raises(BertforgeError, match=r'a similarity model reads "a", "b"; got text'):
        predictor([{"text": "good"}])
    from starlette.testclient import TestClient

    from bertforge.serve.app import create_app
    from bertforge.serve.engine import Engine

    with TestClient(create_app(Engine(str(model)))) as client:
        response = client.post("/predict", json={"a": rows[1]["a"], "b": rows[1]["b"]})
        assert response.status_code == 200 and response.json()["score"] == rows[1]["score"]
        assert client.get("/info").json()["task"]["family"] == "similarity"

    # exported with its head, checked in onnxruntime against the model (export fails otherwise)
    assert main(["export", str(model), str(tmp_path / "similarity.onnx")]) == 0
    assert "onnxruntime agrees" in capsys.readouterr().out


def test_an_unregistered_kind_is_one_error(tmp_path):
    from bertforge.tasks import make_task

    with pytest.raises(BertforgeError, match=r"unknown task 'similarity'; choose a GLUE task .* or a kind "
                                             r"\(classification, regression, ner, tagging, qa, multiple-choice\)"):
        make_task("similarity")
