"""Continued pretraining (`pretrain --init`): a checkpoint's tokenizer, size and weights, fresh heads
where it has none, and the family checks."""

import json

import pytest
from conftest import write_corpus

from bertforge import Tokenizer
from bertforge.cli import main
from bertforge.training.run_log import read_metrics

transformers = pytest.importorskip("transformers")


def common(tmp_path):
    return ["--corpus", str(tmp_path / "corpus"), "--vocab-size", "100", "--batch-size", "8", "--max-seq-length",
            "32", "--cache-dir", str(tmp_path / "cache"), "--quiet", "--log-every", "1", "--eval-every", "0",
            "--precision", "fp32"]


def losses(out):
    return [r["mlm_loss"] for r in read_metrics(str(out)) if "loss" in r]


def test_continued_pretraining_starts_where_the_checkpoint_left_off(tmp_path, capsys):
    write_corpus(tmp_path / "corpus")
    first, second = tmp_path / "first", tmp_path / "second"
    assert main(["pretrain", "--out", str(first), "--preset", "bert-tiny", "--steps", "60", *common(tmp_path)]) == 0
    assert main(["pretrain", "--out", str(second), "--init", str(first / "model"), "--steps", "5",
                 *common(tmp_path)]) == 0
    # a fresh start begins near ln(vocabulary); the continued run where the first one ended
    assert losses(second)[0] < losses(first)[0] - 1.0
    assert abs(losses(second)[0] - sum(losses(first)[-5:]) / 5) < 0.5
    run_config = json.loads((second / "run_config.json").read_text())
    assert run_config["init"] == str((first / "model").resolve()) and run_config["terms"] == ["mlm", "nsp"]
    assert run_config["positions"] == "rotary"  # the checkpoint's (a RoFormer), not a recipe's choice
    init = str(first / "model")
    assert run_config["sources"]["positions"] == run_config["sources"]["lr"] == f"checkpoint {init}"
    assert run_config["sources"]["batch_size"] == "given" and run_config["preset"] is None
    assert run_config["sources"]["warmup"] == run_config["sources"]["mask_prob"] == "recipe small-budget"
    assert Tokenizer.from_pretrained(str(second / "model")).backend.get_vocab() == \
        Tokenizer.from_pretrained(str(first / "model")).backend.get_vocab()


def test_a_checkpoint_without_heads_gets_a_fresh_mlm_head_and_no_nsp(tmp_path, capsys):
    write_corpus(tmp_path / "corpus")
    tokenizer = Tokenizer.train(texts=[p.read_text() for p in (tmp_path / "corpus").iterdir()], vocab_size=100)
    encoder = tmp_path / "encoder"  # as a sentence-transformers model ships: a bare BertModel
    transformers.BertModel(transformers.BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32,
                                                   num_hidden_layers=2, num_attention_heads=2,
                                                   intermediate_size=37)).save_pretrained(encoder)
    tokenizer.save_pretrained(str(encoder))
    out = tmp_path / "run"
    assert main(["pretrain", "--out", str(out), "--init", str(encoder), "--steps", "3", *common(tmp_path)]) == 0
    assert "has no NSP head: continuing with masked LM alone" in capsys.readouterr().out
    run_config = json.loads((out / "run_config.json").read_text())
    assert run_config["terms"] == ["mlm"] and run_config["positions"] == "absolute"
    saved = json.loads((out / "model" / "config.json").read_text())
    assert saved["architectures"] == ["BertForMaskedLM"] and saved["hidden_size"] == 32
    theirs, info = transformers.BertForMaskedLM.from_pretrained(out / "model", output_loading_info=True)
    assert not info["missing_keys"]


def test_continuing_a_checkpoint_with_another_family_is_refused(tmp_path, capsys):
    write_corpus(tmp_path / "corpus")
    encoder = tmp_path / "encoder"
    transformers.BertModel(transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1,
                                                   num_attention_heads=2, intermediate_size=37)).save_pretrained(encoder)
    for extra, message in ((["--objective", "roberta"], "a bert checkpoint; continue it with --objective bert"),
                           (["--preset", "bert-mini"], "drop --preset"),
                           (["--positions", "rotary"], "its positions are absolute")):
        assert main(["pretrain", "--out", str(tmp_path / "run"), "--init", str(encoder), "--steps", "1", *extra,
                     *common(tmp_path)]) == 2
        assert message in capsys.readouterr().err
