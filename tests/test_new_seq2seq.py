"""Adding a translation architecture is one package and one registration: tests/tiny_seq2seq (a
GRU encoder-decoder with attention, its config, its record with `arch="gru"`), registered with
`families.register`, trains with `bertforge train-translation --arch gru`, decodes with
`bertforge translate` (greedy and beam) and answers serve's /translate, with no generic module
naming it."""

import json

import pytest
import torch
from conftest import write_reversal_pairs

from bertforge.cli import main
from bertforge.families import register, unregister

tiny_seq2seq = pytest.importorskip("tiny_seq2seq")  # tests/ is on the path, as for conftest
WORDS = "red blue green black white dog cat bird fish horse runs jumps sleeps eats sees big small".split()
SENTENCES = ["red dog runs", "big cat sleeps", "small bird sees fish"]


@pytest.fixture
def gru():
    register(tiny_seq2seq.FAMILY)
    yield tiny_seq2seq.FAMILY
    unregister(tiny_seq2seq.FAMILY)


def test_a_seq2seq_architecture_from_outside_trains_translates_and_serves(gru, tmp_path, capsys):
    write_reversal_pairs(str(tmp_path / "train"), 1000, 1, WORDS, lengths=(2, 4))
    write_reversal_pairs(str(tmp_path / "valid"), 30, 2, WORDS, lengths=(2, 4))
    run = tmp_path / "run"
    torch.manual_seed(0)
    assert main(["train-translation", "--arch", "gru", "--source-lang", "src", "--target-lang", "tgt",
                 "--train", str(tmp_path / "train"), "--dev", str(tmp_path / "valid"), "--out", str(run),
                 "--vocab-size", "60", "--batch-tokens", "400", "--steps", "500", "--eval-every", "500",
                 "--average", "1", "--precision", "fp32"]) == 0
    model = run / "model"
    assert json.loads((model / "config.json").read_text())["model_type"] == "tiny-gru"
    settings = json.loads((run / "run_config.json").read_text())
    assert settings["arch"] == "gru" and settings["training"]["lr"] == 3e-3  # its record's schedule
    bleu = json.loads((model / "eval_results.json").read_text())["bleu"]
    assert bleu > 80  # it learned to reverse the validation sentences

    import bertforge
    from bertforge.translate import DecodeOptions, translate

    loaded = bertforge.load(str(model), use="translate")
    (tmp_path / "in.txt").write_text("\n".join(SENTENCES) + "\n")
    for beam in ("1", "4"):
        capsys.readouterr()
        assert main(["translate", "--model", str(model), "--input", str(tmp_path / "in.txt"), "--beam", beam]) == 0
        expected = translate(loaded.model, loaded.tokenizer, SENTENCES, DecodeOptions(beam=int(beam)))
        assert capsys.readouterr().out.splitlines() == expected
    assert len(set(expected)) == len(SENTENCES)

    from starlette.testclient import TestClient

    from bertforge.serve.app import create_app
    from bertforge.serve.engine import Engine

    with TestClient(create_app(Engine(str(model)))) as client:
        answer = client.post("/translate", json={"texts": SENTENCES, "beam": 4})
        assert answer.status_code == 200 and answer.json() == {"translations": expected}
        info = client.get("/info").json()  # no attention weights to show: that endpoint is not offered
        assert info["kind"] == "translation" and info["abilities"] == ["translate", "tokens"]
        assert client.post("/translate/attention", json={"text": SENTENCES[0]}).status_code == 400


def test_its_options_are_checked_as_every_arch_s(gru, tmp_path, capsys):
    write_reversal_pairs(str(tmp_path / "train"), 20, 1, WORDS)
    common = ["train-translation", "--source-lang", "src", "--target-lang", "tgt", "--train", str(tmp_path / "train"),
              "--dev", str(tmp_path / "train"), "--out", str(tmp_path / "run")]
    assert main([*common, "--arch", "gru", "--pre-ln"]) == 2
    assert "--pre-ln and --untie-output are not for --arch gru" in capsys.readouterr().err
    assert main([*common, "--arch", "gru", "--preset", "mt-tiny"]) == 2
    assert "unknown preset 'mt-tiny' for --arch gru; choose one of gru-tiny" in capsys.readouterr().err
