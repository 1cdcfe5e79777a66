"""Adding a Hugging Face family is one package and one registration: tests/distil_family (a config,
a model built from the library's shared blocks, its HF layout, its record), DistilBERT-shaped, a
`transformers` class no family of bertforge's uses. Registered with `families.register`, it
pretrains, fine-tunes, predicts, is served and exported through the ordinary commands, and its
checkpoints are `transformers`' own DistilBERT classes both ways, with equal outputs."""

import json

import pytest
import torch
from test_new_family import pretrain_tiny, write_sentiment

from bertforge.cli import main
from bertforge.families import register, unregister

transformers = pytest.importorskip("transformers")
distil_family = pytest.importorskip("distil_family")  # tests/ is on the path, as for conftest


@pytest.fixture
def distil():
    register(distil_family.FAMILY)
    yield distil_family.FAMILY
    unregister(distil_family.FAMILY)


def padded_batch(vocab_size: int):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, vocab_size, (3, 11), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 7:], mask[2, 4:] = 0, 0
    return ids * mask, mask


def test_an_hf_family_from_outside_runs_through_every_command_and_transformers(distil, tmp_path, capsys):
    run, losses = pretrain_tiny("distil-mlm", tmp_path)
    assert losses[-1] < losses[0] - 0.5
    saved = json.loads((run / "model" / "config.json").read_text())
    assert saved["model_type"] == "distilbert" and saved["architectures"] == ["DistilBertForMaskedLM"]

    # transformers' own class reads every tensor, none missing or left over, and predicts as ours does
    theirs, info = transformers.DistilBertForMaskedLM.from_pretrained(run / "model", output_loading_info=True)
    assert not any(info.values()), info
    import bertforge

    from bertforge.formats.hf import load_pretrained

    ours = load_pretrained(str(run / "model"), cls=distil_family.model.DistilMaskedLM).eval()
    ids, mask = padded_batch(saved["vocab_size"])
    with torch.no_grad():
        theirs_logits = theirs.eval()(input_ids=ids, attention_mask=mask).logits
        assert (ours.logits(ids, mask) - theirs_logits)[mask.bool()].abs().max() <= 1e-5

    for split in ("train", "dev"):
        write_sentiment(tmp_path / f"{split}.tsv")
    tuned = tmp_path / "tuned"
    assert main(["finetune", "--task", "classification", "--text-column", "sentence", "--label-column", "label",
                 "--model", str(run / "model"), "--train", str(tmp_path / "train.tsv"), "--dev",
                 str(tmp_path / "dev.tsv"), "--out", str(tuned), "--epochs", "15", "--batch-size", "8",
                 "--lr", "3e-3", "--precision", "fp32", "--quiet"]) == 0
    assert json.loads((tuned / "model" / "eval_results.json").read_text())["accuracy"] == 1.0
    classifier = transformers.AutoModelForSequenceClassification.from_pretrained(tuned / "model").eval()
    assert type(classifier).__name__ == "DistilBertForSequenceClassification"
    model = bertforge.load(str(tuned / "model")).model.eval()
    with torch.no_grad():
        batch = {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}
        assert (model.logits(batch) - classifier(input_ids=ids, attention_mask=mask).logits).abs().max() <= 1e-5

    predictions = tmp_path / "predictions.jsonl"
    assert main(["predict", "--model", str(tuned / "model"), "--input", str(tmp_path / "dev.tsv"), "--output",
                 str(predictions)]) == 0
    assert [json.loads(line)["label"] for line in predictions.read_text().splitlines()] == \
        [str(i % 2) for i in range(48)]
    from starlette.testclient import TestClient

    from bertforge.serve.app import create_app
    from bertforge.serve.engine import Engine

    with TestClient(create_app(Engine(str(tuned / "model")))) as client:
        answer = client.post("/predict", json={"text": "mu alpha eta beta"}).json()
        assert answer["label"] == "1"
    capsys.readouterr()
    assert main(["export", str(tuned / "model"), str(tmp_path / "distil.onnx")]) == 0
    assert "onnxruntime agrees" in capsys.readouterr().out


def test_a_checkpoint_transformers_wrote_reads_with_equal_states(distil, tmp_path):
    config = transformers.DistilBertConfig(vocab_size=60, dim=32, n_layers=2, n_heads=4, hidden_dim=64,
                                           max_position_embeddings=32)
    torch.manual_seed(0)
    transformers.DistilBertModel(config).save_pretrained(tmp_path)
    theirs = transformers.DistilBertModel.from_pretrained(tmp_path).eval()
    from bertforge.formats.hf import load_pretrained

    ours = load_pretrained(str(tmp_path)).eval()
    ids, mask = padded_batch(60)
    with torch.no_grad():
        difference = ours(ids, None, mask).last_hidden_state - theirs(input_ids=ids, attention_mask=mask).last_hidden_state
    assert difference[mask.bool()].abs().max() <= 1e-5
