"""BERT's recurrent ancestors: the LSTM blocks, word vocabularies, BPTT streams, AWD-LSTM pretraining
with exact resume, ULMFiT's target-task LM fine-tuning and classifier."""

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import write_corpus

from bertforge.checkpoint import read_config
from bertforge.families.awd_lstm.config import awd_lstm_preset
from bertforge.data.batches import Position
from bertforge.data.streams import LMStreams, chunk_length
from bertforge.data.words import SPECIALS, WordVocab, apply_rules
from bertforge.errors import BertforgeError
from bertforge.formats import native
from bertforge.nn.heads import concat_pool
from bertforge.nn.lstm import LockedDropout, WeightDropLSTM, embedding_dropout
from bertforge.families.awd_lstm.objectives import RecurrentLMPretraining
from bertforge.pretrain_recurrent import default_options, match_vocabulary, pretrain_recurrent


def cli(*args):
    return subprocess.run([sys.executable, "-m", "bertforge", *args], capture_output=True, text=True)


# ---- blocks ---------------------------------------------------------------------------------------


def test_weight_drop_lstm_without_dropout_is_nn_lstm():
    torch.manual_seed(0)
    ours, theirs = WeightDropLSTM(5, 7, weight_p=0.0), torch.nn.LSTM(5, 7, batch_first=True)
    with torch.no_grad():
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(theirs, f"{name}_l0").copy_(getattr(ours, name))
    x, h, c = torch.randn(3, 6, 5), torch.randn(3, 7), torch.randn(3, 7)
    out, (h1, c1) = ours(x, (h, c))
    expected, (h2, c2) = theirs(x, (h[None], c[None]))
    assert (out - expected).abs().max() < 1e-6
    assert (h1 - h2[0]).abs().max() < 1e-6 and (c1 - c2[0]).abs().max() < 1e-6


def test_weight_drop_drops_recurrent_weights_only_while_training():
    torch.manual_seed(0)
    layer = WeightDropLSTM(4, 8, weight_p=0.5)
    x = torch.randn(2, 5, 4)
    layer.eval()
    clean = layer(x)[0]
    layer.train()
    dropped = layer(x)[0]
    assert not torch.allclose(clean, dropped)
    # the first step has a zero state, so the recurrent weights (the only dropped ones) play no part
    assert torch.allclose(clean[:, 0], dropped[:, 0], atol=1e-6)
    dropped.sum().backward()
    assert layer.weight_hh.grad is not None and layer.weight_hh.grad.abs().sum() > 0


def test_locked_dropout_shares_one_mask_over_time():
    torch.manual_seed(0)
    drop = LockedDropout(0.3).train()
    out = drop(torch.ones(64, 10, 32))
    assert torch.equal(out, out[:, :1].expand_as(out))  # every step the same mask
    zeros = (out[:, 0] == 0).float().mean()
    assert abs(zeros - 0.3) < 0.05 and abs(out.mean() - 1) < 0.05
    assert torch.equal(drop.eval()(torch.ones(2, 3, 4)), torch.ones(2, 3, 4))


def test_embedding_dropout_drops_whole_words():
    torch.manual_seed(0)
    weight = torch.randn(1000, 6)
    out = embedding_dropout(weight, 0.25, training=True)
    dropped = (out == 0).all(1)
    assert abs(dropped.float().mean() - 0.25) < 0.05
    assert torch.allclose(out[~dropped], weight[~dropped] / 0.75)
    assert embedding_dropout(weight, 0.25, training=False) is weight


def test_concat_pool_on_hand_input():
    states = torch.tensor([[[1.0, -1.0], [3.0, 0.0], [9.0, 9.0]],  # length 2: the 9s are padding
                           [[2.0, 5.0], [0.0, 1.0], [4.0, -3.0]]])
    pooled = concat_pool(states, torch.tensor([2, 3]))
    assert pooled.tolist() == [[3.0, 0.0, 3.0, 0.0, 2.0, -0.5], [4.0, -3.0, 4.0, 5.0, 2.0, 1.0]]


# ---- words and streams ----------------------------------------------------------------------------


def test_ulmfit_rules():
    assert apply_rules("The CAT said HELLO to Bob!!!!") == [
        "xxmaj", "the", "xxup", "cat", "said", "xxup", "hello", "to", "xxmaj", "bob", "xxrep", "4", "!"]
    assert apply_rules("no no no no way") == ["xxwrep", "4", "no", "way"]


def test_word_vocab_counts_caps_and_round_trips(tmp_path):
    texts = ["a a a b b c", "A b d"]
    vocab = WordVocab.train(texts, max_size=len(SPECIALS) + 2, min_freq=2, rules=False)
    assert vocab.words == [*SPECIALS, "a", "b"]  # c and d seen once; a before b by frequency
    assert vocab.encode("a c B") == [len(SPECIALS), vocab.unk_id, len(SPECIALS) + 1]
    vocab.save_pretrained(str(tmp_path))
    again = WordVocab.from_pretrained(str(tmp_path))
    assert again.words == vocab.words and again.rules is False
    (tmp_path / "words.json").write_text(json.dumps({"words": ["a", "b"]}))
    with pytest.raises(BertforgeError, match="words.json: a word vocabulary starts with"):
        WordVocab.from_pretrained(str(tmp_path))


def documents(n=6, length=200, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(5, 50, length).astype(np.int32) for _ in range(n)]


def test_streams_continue_row_by_row_and_resume_the_same():
    data = LMStreams(documents(), batch_size=3, bptt=12, seed=1, eval_fraction=0)
    it = data.batches(Position())
    batches = [next(it) for _ in range(12)]
    first = batches[0][1][0]
    assert first["reset"] and not any(b[1][0]["reset"] for b in batches[1:5])
    for (_, [a]), (_, [b]) in zip(batches, batches[1:]):
        if not b["reset"]:  # the next chunk of every row starts with the word the last one predicted
            assert torch.equal(a["labels"][:, -1], b["input_ids"][:, 0])
        assert torch.equal(a["input_ids"][:, 1:], a["labels"][:, :-1])
    lengths = {b[1][0]["input_ids"].shape[1] for b in batches[:5]}
    assert len(lengths) > 1  # variable BPTT
    assert chunk_length(12, 1, 0, 0) == chunk_length(12, 1, 0, 0)
    position = batches[6][0]  # resuming after 7 steps gives exactly the 8th onwards
    again = data.batches(position)
    for _, [expected] in batches[7:]:
        _, [got] = next(again)
        assert torch.equal(got["input_ids"], expected["input_ids"]) and got["reset"] == expected["reset"]


def test_streams_refuse_a_bptt_longer_than_the_rows():
    with pytest.raises(BertforgeError, match="corpus.txt: .* too short for a BPTT length of 500"):
        LMStreams(documents(n=2, length=100), batch_size=4, bptt=500, eval_fraction=0, source="corpus.txt")


# ---- the language model ---------------------------------------------------------------------------


def test_state_is_carried_across_chunks_and_detached():
    torch.manual_seed(0)
    model = RecurrentLMPretraining(awd_lstm_preset("awd-lstm-tiny", vocab_size=40)).eval()
    ids = torch.randint(5, 40, (2, 13))
    logits_whole = model.decoder(super(RecurrentLMPretraining, model).forward(ids)[0])
    model({"input_ids": ids[:, :6], "labels": ids[:, 1:7], "reset": True, "stream": "train"})
    state = model.states["train"]
    assert all(h.grad_fn is None and c.grad_fn is None for h, c in state)
    logits_rest = model.decoder(super(RecurrentLMPretraining, model).forward(ids[:, 6:], state)[0])
    assert (logits_rest - logits_whole[:, 6:]).abs().max() < 1e-5
    # a reset chunk starts from zeros: the same as a fresh model
    fresh = model.decoder(super(RecurrentLMPretraining, model).forward(ids[:, 6:])[0])
    assert (fresh - logits_rest).abs().max() > 1e-3


def test_ar_and_tar_are_their_definitions():
    torch.manual_seed(0)
    model = RecurrentLMPretraining(awd_lstm_preset("awd-lstm-tiny", vocab_size=30), ar=2.0, tar=1.0).train()
    ids = torch.randint(5, 30, (3, 8))
    batch = {"input_ids": ids, "labels": ids, "reset": True, "stream": "train"}
    torch.manual_seed(1)
    losses, _ = model(batch)
    torch.manual_seed(1)
    dropped, raw, _ = super(RecurrentLMPretraining, model).forward(ids)
    assert torch.allclose(losses["ar"] / (3 * 8), dropped.pow(2).mean(), rtol=1e-5)
    assert torch.allclose(losses["tar"] / (3 * 7), (raw[:, 1:] - raw[:, :-1]).pow(2).mean(), rtol=1e-5)
    assert model.loss_weights == {"ar": 2.0, "tar": 1.0}
    assert set(model.eval()(batch)[0]) == {"lm"}  # regularisers while training only


def run(corpus, out, steps, resume=False, **kw):
    options = default_options(str(out), kw.get("init"), steps=steps, save_every=4, eval_every=4, log_every=2,
                              progress=False, precision="fp32")
    return pretrain_recurrent(str(corpus), str(out), preset=None if kw.get("init") else "awd-lstm-tiny", bptt=8,
                              batch_size=4, options=options, resume=resume, **kw)


def weights(directory):
    from safetensors.torch import load_file

    return load_file(str(directory / "model.safetensors"))


def test_resume_equals_uninterrupted(tmp_path):
    write_corpus(tmp_path / "corpus")
    run(tmp_path / "corpus", tmp_path / "straight", 8)
    run(tmp_path / "corpus", tmp_path / "split", 8)
    # as if stopped after step 4: only its checkpoint left (with the hidden state carried there)
    shutil.rmtree(tmp_path / "split" / "model")
    shutil.rmtree(tmp_path / "split" / "checkpoints" / "step-0000008")
    run(tmp_path / "corpus", tmp_path / "split", 8, resume=True)
    a, b = weights(tmp_path / "straight" / "model"), weights(tmp_path / "split" / "model")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

    def records(run_dir):
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
        return [{k: v for k, v in r.items() if k not in ("tokens_per_s", "elapsed_s")} for r in map(json.loads, lines)]

    assert records(tmp_path / "straight") == records(tmp_path / "split")


def test_a_tiny_lm_learns_a_sequence(tmp_path):
    """A corpus where each word follows from the one before: held-out accuracy far above chance."""
    corpus = tmp_path / "cycle.txt"
    cycle = "one two three four five six seven eight nine ten".split()
    rng = np.random.default_rng(0)
    paragraphs = []
    for _ in range(40):
        start = int(rng.integers(10))
        paragraphs.append(" ".join(cycle[(start + i) % 10] for i in range(60)))
    corpus.write_text("\n\n".join(paragraphs) + "\n")
    result = run(corpus, tmp_path / "out", 120, layout="lines")
    assert result["eval"]["lm_accuracy"] > 0.8  # chance among ten words: 0.1


def test_target_task_lm_fine_tuning_matches_the_vocabulary(tmp_path):
    write_corpus(tmp_path / "general")
    run(tmp_path / "general", tmp_path / "stage1", 4)
    target = tmp_path / "target.txt"
    target.write_text("\n\n".join("Alpha omega beta omega. Omega gamma psi." for _ in range(30)) + "\n")
    old_vocab = WordVocab.from_pretrained(str(tmp_path / "stage1" / "model"))
    old = weights(tmp_path / "stage1" / "model")
    model_dir = str(tmp_path / "stage1" / "model")
    new_vocab = WordVocab.train([target.read_text()], min_freq=2, rules=old_vocab.rules)
    model = RecurrentLMPretraining(read_config(model_dir).__class__(
        **{**read_config(model_dir).to_dict(), "vocab_size": new_vocab.vocab_size}))
    new_words = match_vocabulary(model, model_dir, new_vocab)
    rows = model.backbone.embeddings.weight.detach()
    assert new_words == 2  # omega and psi
    for word in ("alpha", "beta", "gamma", "xxmaj"):
        assert torch.equal(rows[new_vocab.index[word]], old["bert.embeddings.weight"][old_vocab.index[word]])
    assert torch.allclose(rows[new_vocab.index["omega"]], old["bert.embeddings.weight"].mean(0))
    assert torch.equal(model.decoder.weight, model.backbone.embeddings.weight)  # still tied
    # through the recipe: discriminative rates and slanted triangular rates by default
    result = run(target, tmp_path / "stage2", 4, init=model_dir)
    saved = json.loads((tmp_path / "stage2" / "run_config.json").read_text())
    assert saved["training"]["schedule"] == "slanted" and abs(saved["training"]["layer_decay"] - 1 / 2.6) < 1e-9
    assert result["step"] == 4


# ---- the command line -----------------------------------------------------------------------------


def test_cli_pretrains_then_classifies(tmp_path):
    write_corpus(tmp_path / "corpus")
    out = tmp_path / "lm"
    done = cli("pretrain", "--objective", "awd-lstm", "--corpus", str(tmp_path / "corpus"), "--out", str(out),
               "--preset", "awd-lstm-tiny", "--bptt", "8", "--batch-size", "4", "--steps", "6", "--precision", "fp32",
               "--quiet")
    assert done.returncode == 0, done.stderr
    config = json.loads((out / "model" / "config.json").read_text())
    assert config["model_type"] == "awd-lstm" and (out / "model" / "words.json").exists()
    # a label that needs the words: does "alpha" or "beta" occur
    rng = np.random.default_rng(0)
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
    for name, n in (("train", 160), ("dev", 60)):
        rows = ["sentence\tlabel"]
        for _ in range(n):
            s = list(rng.choice(words[2:], size=int(rng.integers(3, 9))))
            label = int(rng.random() < 0.5)
            if label:
                s.insert(int(rng.integers(len(s) + 1)), str(rng.choice(words[:2])))
            rows.append(" ".join(s).capitalize() + f".\t{label}")
        (tmp_path / f"{name}.tsv").write_text("\n".join(rows) + "\n")
    done = cli("finetune", "--task", "sst2", "--train", str(tmp_path / "train.tsv"), "--dev", str(tmp_path / "dev.tsv"),
               "--model", str(out / "model"), "--out", str(tmp_path / "cls"), "--epochs", "30", "--batch-size", "16",
               "--unfreeze-every", "10", "--precision", "fp32", "--quiet")
    assert done.returncode == 0, done.stderr
    scores = json.loads((tmp_path / "cls" / "model" / "eval_results.json").read_text())
    assert scores["accuracy"] >= 0.85  # chance: 0.5
    evaluated = cli("evaluate", "--model", str(tmp_path / "cls" / "model"), "--data", str(tmp_path / "dev.tsv"))
    assert evaluated.returncode == 0, evaluated.stderr
    assert json.loads(evaluated.stdout)["accuracy"] == scores["accuracy"]

    # ULMFiT's backward model (its LM reads every document right to left), and the ensemble of both:
    # the mean of their probabilities
    done = cli("pretrain", "--objective", "awd-lstm", "--corpus", str(tmp_path / "corpus"), "--out",
               str(tmp_path / "lm-bwd"), "--preset", "awd-lstm-tiny", "--bptt", "8", "--batch-size", "4",
               "--steps", "6", "--backwards", "--precision", "fp32", "--quiet")
    assert done.returncode == 0, done.stderr
    done = cli("finetune", "--task", "sst2", "--train", str(tmp_path / "train.tsv"), "--dev", str(tmp_path / "dev.tsv"),
               "--model", str(tmp_path / "lm-bwd" / "model"), "--out", str(tmp_path / "cls-bwd"), "--epochs", "3",
               "--batch-size", "16", "--precision", "fp32", "--quiet")
    assert done.returncode == 0, done.stderr
    both = [str(tmp_path / "cls" / "model"), str(tmp_path / "cls-bwd" / "model")]
    probabilities = []
    for models in ([both[0]], [both[1]], both):
        predicted = cli("predict", "--model", *models, "--input", str(tmp_path / "dev.tsv"))
        assert predicted.returncode == 0, predicted.stderr
        probabilities.append(np.array([json.loads(line)["probabilities"]["positive"]
                                       for line in predicted.stdout.splitlines()]))
    assert np.abs(probabilities[2] - (probabilities[0] + probabilities[1]) / 2).max() < 1e-4
    assert np.abs(probabilities[0] - probabilities[1]).max() > 1e-2  # two different models
    gold = np.array([int(line.split("\t")[1]) for line in (tmp_path / "dev.tsv").read_text().splitlines()[1:]])
    evaluated = cli("evaluate", "--model", *both, "--data", str(tmp_path / "dev.tsv"))
    assert evaluated.returncode == 0, evaluated.stderr
    assert json.loads(evaluated.stdout)["accuracy"] == round(np.mean((probabilities[2] > 0.5) == gold), 5)


def test_cli_refuses_bert_flags_and_tagging(tmp_path):
    write_corpus(tmp_path / "corpus")
    done = cli("pretrain", "--objective", "awd-lstm", "--corpus", str(tmp_path / "corpus"), "--out",
               str(tmp_path / "x"), "--steps", "2", "--mask-prob", "0.2")
    assert done.returncode == 2 and "--mask-prob: not for --objective awd-lstm" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_vocabulary_of_another_size_is_refused(tmp_path):
    write_corpus(tmp_path / "corpus")
    run(tmp_path / "corpus", tmp_path / "lm", 2)
    model = tmp_path / "lm" / "model"
    words = json.loads((model / "words.json").read_text())
    words["words"].append("extra")
    (model / "words.json").write_text(json.dumps(words))
    done = cli("finetune", "--task", "sst2", "--train", "x.tsv", "--dev", "y.tsv", "--model", str(model), "--out",
               str(tmp_path / "out"))
    assert done.returncode == 2 and "words.json: " in done.stderr and "does not belong to this model" in done.stderr


def test_a_large_vocabulary_trains_through_a_sampled_softmax_by_default(tmp_path):
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(9000)]
    text = " ".join(rng.permutation(words * 2).tolist())
    (tmp_path / "big.txt").write_text("\n\n".join(text[i:i + 2000] for i in range(0, len(text), 2000)) + "\n")
    run(tmp_path / "big.txt", tmp_path / "auto", 1, layout="lines")
    run(tmp_path / "big.txt", tmp_path / "full", 1, layout="lines", sampled_softmax=0)
    auto = json.loads((tmp_path / "auto" / "run_config.json").read_text())
    full = json.loads((tmp_path / "full" / "run_config.json").read_text())
    assert auto["words"] > 8192 and auto["sampled_words"] == 2048 and full["sampled_words"] is None
