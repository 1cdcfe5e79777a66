"""`evaluate-lm` and the bug-catching checks of the pretraining path: a model that overfits one
batch, the pipeline learning word order (which word counts alone cannot give), and baselines that
are what their names say; the perplexity of left-to-right and bidirectional LMs beside the unigram's."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import random_batch, tiny_config, write_cycles

from bertforge import BertforgeError, save_pretrained
from bertforge.cli import main
from bertforge.evaluate_lm import evaluate_lm
from bertforge.families.bert.model import Bert
from bertforge.families.bert.objectives import BertPretraining
from bertforge.pretrain import pretrain
from bertforge.pretrain_recurrent import default_options, pretrain_recurrent
from bertforge.training.optim import make_optimizer
from bertforge.training.trainer import TrainOptions

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()


@pytest.mark.parametrize("model_type", ["bert", "roformer"])
def test_a_tiny_model_overfits_one_batch(model_type):
    torch.manual_seed(0)
    config = tiny_config(model_type=model_type)
    model = BertPretraining(config, sentence="nsp")
    batch = random_batch(config.vocab_size, batch=8, length=16)
    g = torch.Generator().manual_seed(1)
    real = torch.nonzero(batch["attention_mask"].reshape(-1)).squeeze(1)
    positions = real[torch.randperm(len(real), generator=g)[:20]].sort().values
    batch.update(mlm_positions=positions, mlm_targets=batch["input_ids"].reshape(-1)[positions].clone(),
                 sentence_labels=torch.tensor([0, 1] * 4))
    batch["input_ids"].view(-1)[positions] = 4  # [MASK]
    optimizer = make_optimizer(model, 3e-3)
    for _ in range(150):
        losses, correct = model(batch)
        optimizer.zero_grad()
        (losses["mlm"] / 20 + losses["nsp"] / 8).backward()
        optimizer.step()
    losses, correct = model.eval()(batch)
    assert losses["mlm"] / 20 < 0.05 and int(correct["mlm"]) == 20
    assert int(correct["nsp"]) == 8


def test_pretraining_learns_word_order_beyond_word_counts(tmp_path):
    write_cycles(tmp_path / "train")
    write_cycles(tmp_path / "unseen", n_docs=20, seed=1)
    options = TrainOptions(out=str(tmp_path / "run"), steps=250, lr=2e-3, warmup=0.1, betas=(0.9, 0.98),
                           eval_every=0, save_every=0, progress=False, precision="fp32")
    pretrain(str(tmp_path / "train"), str(tmp_path / "run"), preset="bert-tiny", vocab_size=60, max_seq_length=32,
             batch_size=32, cache_dir=str(tmp_path / "cache"), options=options, positions="rotary", dropout=0.0)
    result = evaluate_lm(str(tmp_path / "run" / "model"), [str(tmp_path / "unseen")], max_seq_length=32,
                         cache_dir=str(tmp_path / "cache"))
    assert result["commonest_token_accuracy"] < 0.2  # twelve words, about equally frequent, and "."
    assert result["mlm_accuracy"] > 0.6 and result["mlm_loss"] < result["unigram_loss"] - 1.0
    assert "nsp_accuracy" in result and 0.4 < result["nsp_majority"] < 0.65  # balanced pairs
    # Seeded: the same masks every time.
    again = evaluate_lm(str(tmp_path / "run" / "model"), [str(tmp_path / "unseen")], max_seq_length=32,
                        cache_dir=str(tmp_path / "cache"))
    assert again == result


def test_the_commonest_token_baseline_counts_the_masked_tokens(tmp_path):
    # Half the words are "the": always guessing it is right about half the time.
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    rng = np.random.default_rng(0)
    docs = ["\n".join(" ".join("the" if rng.random() < 0.5 else str(rng.choice(WORDS)) for _ in range(10)) + "."
                      for _ in range(5)) for _ in range(30)]
    (corpus / "the.txt").write_text("\n\n".join(docs) + "\n")
    options = TrainOptions(out=str(tmp_path / "run"), steps=2, eval_every=0, save_every=0, progress=False)
    pretrain(str(corpus), str(tmp_path / "run"), preset="bert-tiny", vocab_size=60, max_seq_length=32, batch_size=8,
             cache_dir=str(tmp_path / "cache"), options=options, positions="rotary")
    result = evaluate_lm(str(tmp_path / "run" / "model"), [str(corpus)], max_seq_length=32,
                         cache_dir=str(tmp_path / "cache"))
    assert result["commonest_token"] == "the"
    assert 0.35 < result["commonest_token_accuracy"] < 0.5  # "." and the words share the rest
    assert result["masked_tokens"] > 300


def test_evaluate_lm_explains_what_it_cannot_do(tmp_path, capsys):
    save_pretrained(Bert(tiny_config()), str(tmp_path / "encoder"))
    with pytest.raises(BertforgeError, match="no masked-LM head"):
        evaluate_lm(str(tmp_path / "encoder"), [str(tmp_path)])
    assert main(["evaluate-lm", str(tmp_path / "missing"), str(tmp_path)]) == 2
    assert "missing" in capsys.readouterr().err


def test_evaluate_lm_command_prints_json(tmp_path, capsys):
    write_cycles(tmp_path / "train", n_docs=20)
    options = TrainOptions(out=str(tmp_path / "run"), steps=2, eval_every=0, save_every=0, progress=False)
    pretrain(str(tmp_path / "train"), str(tmp_path / "run"), preset="bert-tiny", vocab_size=60, max_seq_length=32,
             batch_size=8, cache_dir=str(tmp_path / "cache"), options=options)
    capsys.readouterr()
    main(["evaluate-lm", str(tmp_path / "run" / "model"), str(tmp_path / "train"), "--max-seq-length", "32",
          "--cache-dir", str(tmp_path / "cache"), "--json"])
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(result) >= {"mlm_accuracy", "commonest_token_accuracy", "nsp_accuracy", "nsp_majority"}


FIXTURES = Path(__file__).parent / "fixtures" / "checkpoints"


def pretrain_gpt(corpus, out, steps):
    options = TrainOptions(out=str(out), steps=steps, lr=1e-2, warmup=0.1, eval_every=0, save_every=0, progress=False)
    pretrain(str(corpus), str(out), preset="bert-tiny", vocab_size=60, max_seq_length=32, batch_size=8,
             cache_dir=str(out / "cache"), options=options, objective="gpt", dropout=0.0,
             model_overrides={"n_layer": 1, "n_embd": 64, "n_positions": 32})


def pretrain_words(objective, preset, corpus, out, steps, batch_size, bptt):
    options = default_options(str(out), None, objective, steps=steps, lr=2e-2, eval_every=0, save_every=0,
                              progress=False)
    pretrain_recurrent(str(corpus), str(out), objective, preset=preset, bptt=bptt, batch_size=batch_size,
                       options=options)


@pytest.mark.parametrize("family, train", [
    ("gpt", lambda corpus, out: pretrain_gpt(corpus, out, 20)),
    ("awd-lstm", lambda corpus, out: pretrain_words("awd-lstm", "awd-lstm-tiny", corpus, out, 40, 8, 16)),
    ("elmo", lambda corpus, out: pretrain_words("elmo", "elmo-tiny", corpus, out, 40, 4, 8)),
])
def test_language_models_beat_the_unigram_perplexity_on_unseen_text(tmp_path, capsys, family, train):
    write_cycles(tmp_path / "train", n_docs=30)
    write_cycles(tmp_path / "unseen", n_docs=10, seed=1)
    train(tmp_path / "train", tmp_path / "run")
    model = str(tmp_path / "run" / "model")
    result = evaluate_lm(model, [str(tmp_path / "unseen")], max_seq_length=32, cache_dir=str(tmp_path / "cache"))
    # Each word is fixed by the one before it, while word counts alone know only that each of the
    # twelve is about as frequent (and the sentence ends).
    assert 8 < result["unigram_perplexity"] < 16
    assert result["perplexity"] < 0.5 * result["unigram_perplexity"]
    assert result["lm_loss"] < result["unigram_loss"] - math.log(2)
    assert result["perplexity"] == pytest.approx(math.exp(result["lm_loss"]), abs=1e-3)
    assert result["lm_accuracy"] > 2 * result["commonest_token_accuracy"]
    if family == "elmo":  # the biLM's loss is the mean of its two directions'
        assert result["lm_loss"] == pytest.approx((result["forward_loss"] + result["backward_loss"]) / 2, abs=1e-4)
    capsys.readouterr()
    assert main(["evaluate-lm", model, str(tmp_path / "unseen"), "--max-seq-length", "32",
                 "--cache-dir", str(tmp_path / "cache")]) == 0
    out = capsys.readouterr().out
    assert f"perplexity {result['perplexity']:.1f}, " in out and "x better)" in out


def test_the_unigram_perplexity_is_the_frequencies_of_the_predicted_words(tmp_path):
    # The AWD-LSTM reads "xxbos alpha alpha beta ." and predicts each word after xxbos: alpha 2 of 4
    # times, beta and "." once each; the entropy is -(1/2 ln 1/2 + 2 x 1/4 ln 1/4) = 1.5 ln 2.
    (tmp_path / "text.txt").write_text("alpha alpha beta.\n")
    result = evaluate_lm(str(FIXTURES / "awd-lstm"), [str(tmp_path / "text.txt")])
    assert result["predicted"] == 4 and result["unit"] == "word"
    assert result["commonest_token"] == "alpha" and result["commonest_token_accuracy"] == 0.5
    assert result["unigram_loss"] == round(1.5 * math.log(2), 5) == 1.03972
    assert result["unigram_perplexity"] == round(2 ** 1.5, 3) == 2.828


@pytest.mark.parametrize("fixture", ["gpt-sst2", "awd-lstm-sst2", "elmo-sst2", "bert-sst2"])
def test_evaluate_lm_refuses_a_model_without_a_language_model_head(tmp_path, capsys, fixture):
    (tmp_path / "text.txt").write_text("a good film.\n")
    assert main(["evaluate-lm", str(FIXTURES / fixture), str(tmp_path / "text.txt")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "head in this checkpoint" in err and "evaluate-lm needs a pretraining" in err


def test_a_masked_lm_checkpoint_is_read_once(tmp_path, monkeypatch):
    # Which heads it has comes from the safetensors header; the tensors are read once, to load them.
    import bertforge.formats.hf as hf

    reads, real = [], hf.read_safetensors
    monkeypatch.setattr(hf, "read_safetensors", lambda path: reads.append(Path(path).name) or real(path))
    (tmp_path / "text.txt").write_text("the cat sat on the mat.\n\nthe dog ran in the park.\n")
    result = evaluate_lm(str(FIXTURES / "bert"), [str(tmp_path / "text.txt")], max_seq_length=16)
    assert reads == ["model.safetensors"] and "nsp_accuracy" in result and result["masked_tokens"] > 0
    assert hf.weight_names(str(FIXTURES / "bert")) >= {"cls.predictions.bias", "cls.seq_relationship.weight"}
