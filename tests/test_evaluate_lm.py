"""`evaluate-lm` and the bug-catching checks of the pretraining path: a model that overfits one
batch, the pipeline learning word order (which word counts alone cannot give), and baselines that
are what their names say."""

import json

import numpy as np
import pytest
import torch
from conftest import random_batch, tiny_config, write_cycles

from bertforge import BertforgeError, save_pretrained
from bertforge.cli import main
from bertforge.evaluate_lm import evaluate_lm
from bertforge.models.bert import Bert
from bertforge.models.objectives import BertPretraining
from bertforge.pretrain import pretrain
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
