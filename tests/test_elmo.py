"""ELMo: the character encoder, the projected LSTM with clipping, the biLM and its pretraining with
exact resume, and its word vectors through `embed`."""

import json
import shutil
import subprocess
import sys

import numpy as np
import torch
from conftest import write_corpus
from test_recurrent import weights

from bertforge.families.elmo.config import elmo_preset
from bertforge.data.words import word_characters
from bertforge.embed import Embedder
from bertforge.families.elmo.embedder import ELMoEmbedder
from bertforge.families.elmo.model import ELMo
from bertforge.nn.lstm import ProjectedLSTM
from bertforge.families.elmo.objectives import BiLMPretraining
from bertforge.pretrain_recurrent import default_options, pretrain_recurrent


def cli(*args):
    return subprocess.run([sys.executable, "-m", "bertforge", *args], capture_output=True, text=True)


def test_word_characters():
    assert word_characters("ab", 6) == [259, 98, 99, 260, 261, 261]  # begin, bytes, end, padding; all +1
    assert word_characters("<S>", 5) == [259, 257, 260, 261, 261]
    assert word_characters("é", 5)[1:3] == [0xC3 + 1, 0xA9 + 1]  # UTF-8 bytes
    long = word_characters("x" * 80, 50)
    assert len(long) == 50 and long[0] == 259 and long[-1] == 260  # cut to 48 bytes, still closed


def test_projected_lstm_without_clipping_is_nn_lstm_with_projections():
    torch.manual_seed(0)
    ours = ProjectedLSTM(5, 8, 3)
    theirs = torch.nn.LSTM(5, 8, proj_size=3, batch_first=True)
    with torch.no_grad():
        theirs.weight_ih_l0.copy_(ours.input_linearity.weight)
        theirs.weight_hh_l0.copy_(ours.state_linearity.weight)
        theirs.bias_ih_l0.zero_()
        theirs.bias_hh_l0.copy_(ours.state_linearity.bias)
        theirs.weight_hr_l0.copy_(ours.state_projection.weight)
    x = torch.randn(2, 7, 5)
    out, (h, c) = ours(x)
    expected, (h2, c2) = theirs(x)
    assert (out - expected).abs().max() < 1e-6 and (c - c2[0]).abs().max() < 1e-6
    assert torch.all(ours.state_linearity.bias[8:16] == 1.0)  # forget bias starts at 1


def test_projected_lstm_clips_cell_and_projection():
    torch.manual_seed(0)
    layer = ProjectedLSTM(4, 6, 3, cell_clip=0.05, proj_clip=0.01)
    with torch.no_grad():
        for p in layer.parameters():
            p.mul_(20)
    out, (h, c) = layer(torch.randn(2, 9, 4) * 5)
    assert out.abs().max() <= 0.01 + 1e-7 and c.abs().max() <= 0.05 + 1e-7
    # one step by hand: the formula of the docstring
    x, h0, c0 = torch.randn(1, 1, 4), torch.randn(1, 3) * 0.01, torch.randn(1, 6) * 0.05
    i, f, g, o = (layer.input_linearity(x[:, 0]) + layer.state_linearity(h0)).chunk(4, -1)
    cell = (torch.sigmoid(i) * torch.tanh(g) + torch.sigmoid(f) * c0).clamp(-0.05, 0.05)
    hidden = layer.state_projection(torch.sigmoid(o) * torch.tanh(cell)).clamp(-0.01, 0.01)
    got, (h1, c1) = layer(x, (h0, c0))
    assert torch.allclose(got[:, 0], hidden, atol=1e-7) and torch.allclose(c1, cell, atol=1e-7)


def test_character_encoder_is_its_formula():
    """Convolutions max-pooled then ReLU, highway y = g * x + (1 - g) * relu(n) with g = sigmoid of
    the gate half (its bias starting at 1: carrying), then the projection, written out by hand."""
    torch.manual_seed(0)
    encoder = ELMo(elmo_preset("elmo-tiny", vocab_size=20)).embeddings
    chars = torch.tensor([[word_characters(w) for w in ("<S>", "ab", "cde", "</S>")]])  # (1, 4, 50)
    x = encoder.embedding(chars[0]).transpose(1, 2)  # (4, E, 50)
    h = torch.cat([torch.relu(conv(x).max(-1).values) for conv in encoder.convs], dim=-1)  # (4, F)
    width = h.shape[1]
    layer = encoder.highways[0]
    assert torch.equal(layer.bias[width:], torch.ones(width))
    nonlinear = h @ layer.weight[:width].t() + layer.bias[:width]
    gate = torch.sigmoid(h @ layer.weight[width:].t() + layer.bias[width:])
    h = gate * h + (1 - gate) * torch.relu(nonlinear)
    expected = encoder.projection(h)  # (4, P)
    assert torch.allclose(encoder(chars)[0], expected, atol=1e-6)


def test_elmo_layers_do_not_see_padding_and_the_backward_lstm_reads_right_to_left():
    torch.manual_seed(0)
    model = ELMo(elmo_preset("elmo-tiny", vocab_size=20, dropout=0.0)).eval()
    words = [["<S>", "a", "bc", "d", "</S>"], ["<S>", "ef", "</S>"]]
    chars = torch.zeros(2, 5, 50, dtype=torch.long)
    for k, sentence in enumerate(words):
        chars[k, :len(sentence)] = torch.tensor([word_characters(w) for w in sentence])
    mask = chars[..., 0] > 0
    together = model(chars, mask)
    alone = model(chars[1:, :3], mask[1:, :3])
    assert len(together) == 3 and together[0].shape == (2, 5, 64)
    for a, b in zip(together, alone):
        assert (a[1, :3] - b[0]).abs().max() < 1e-6
    # the backward half of a word's vector depends on the words after it, not those before
    changed = chars.clone()
    changed[0, 1] = torch.tensor(word_characters("zz"))  # the word before "bc"
    after = model(changed, mask)
    half = 32
    assert (after[1][0, 2, half:] - together[1][0, 2, half:]).abs().max() < 1e-6
    assert (after[1][0, 2, :half] - together[1][0, 2, :half]).abs().max() > 1e-4


def cycle_corpus(path):
    cycle = "One two three four five six seven eight nine ten".split()
    rng = np.random.default_rng(0)
    lines = []
    for _ in range(40):
        start = int(rng.integers(10))
        lines.append(" ".join(cycle[(start + i) % 10] for i in range(30)) + " .")
    path.write_text("\n\n".join(lines) + "\n")


def run(corpus, out, steps, resume=False):
    options = default_options(str(out), None, "elmo", steps=steps, save_every=4, eval_every=4, log_every=2,
                              progress=False, lr=1e-2, precision="fp32")
    return pretrain_recurrent(str(corpus), str(out), "elmo", preset="elmo-tiny", bptt=8, batch_size=4,
                              options=options, resume=resume, layout="lines")


def test_bilm_learns_both_directions(tmp_path):
    cycle_corpus(tmp_path / "cycle.txt")
    result = run(tmp_path / "cycle.txt", tmp_path / "out", 80)
    assert result["eval"]["forward_accuracy"] > 0.7 and result["eval"]["backward_accuracy"] > 0.7  # chance ~0.08
    config = json.loads((tmp_path / "out" / "model" / "config.json").read_text())
    assert config["model_type"] == "elmo" and config["architectures"] == ["ELMoLanguageModel"]


def test_bilm_resume_equals_uninterrupted(tmp_path):
    cycle_corpus(tmp_path / "cycle.txt")
    run(tmp_path / "cycle.txt", tmp_path / "straight", 8)
    run(tmp_path / "cycle.txt", tmp_path / "split", 8)
    shutil.rmtree(tmp_path / "split" / "model")
    shutil.rmtree(tmp_path / "split" / "checkpoints" / "step-0000008")
    run(tmp_path / "cycle.txt", tmp_path / "split", 8, resume=True)
    a, b = weights(tmp_path / "straight" / "model"), weights(tmp_path / "split" / "model")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_sampled_softmax_learns_what_the_full_softmax_scores():
    """A linear softmax over 500 Zipf-distributed words, trained only through 50 sampled words a
    batch, predicts the targets under the full softmax (and its loss nears the full one's)."""
    from bertforge.losses import sampled_softmax_loss

    torch.manual_seed(0)
    vocab, width = 500, 16
    ranks = torch.arange(1, vocab + 1, dtype=torch.float)
    inputs = torch.randn(vocab, width)  # one input vector per target word
    weight = torch.zeros(vocab, width, requires_grad=True)
    bias = torch.zeros(vocab, requires_grad=True)
    optimizer = torch.optim.Adam([weight, bias], lr=0.05)
    for _ in range(300):
        targets = torch.multinomial(1 / ranks, 64, replacement=True)  # frequent words first, as ids are
        loss = sampled_softmax_loss(inputs[targets], targets, weight, bias, 50) / 64
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    seen = torch.multinomial(1 / ranks, 2000, replacement=True)
    logits = inputs[seen] @ weight.t() + bias
    assert (logits.argmax(-1) == seen).float().mean() > 0.9


def test_embed_gives_word_vectors(tmp_path):
    cycle_corpus(tmp_path / "cycle.txt")
    run(tmp_path / "cycle.txt", tmp_path / "lm", 4)
    model = str(tmp_path / "lm" / "model")
    embedder = Embedder.from_pretrained(model)
    assert isinstance(embedder, ELMoEmbedder)
    vectors = embedder.encode(["One two three", "Unseenword four"], pooling="tokens")
    assert [v.shape for v in vectors] == [(3, 64), (2, 64)]  # 2 x the projection; <S> and </S> left out
    layer0 = embedder.encode(["One two three"], layers=0, pooling="tokens")[0]
    assert np.allclose(layer0[:, :32], layer0[:, 32:])  # the word vector, twice
    (tmp_path / "in.txt").write_text("One two three\nfour five\n")
    done = cli("embed", "--model", model, "--input", str(tmp_path / "in.txt"), "--output", str(tmp_path / "v.jsonl"),
               "--pooling", "tokens")
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in (tmp_path / "v.jsonl").read_text().splitlines()]
    assert records[0]["tokens"] == ["One", "two", "three"] and len(records[0]["vector"]) == 3
    assert np.allclose(records[0]["vector"], embedder.encode(["One two three"], pooling="tokens")[0], atol=1e-5)


def test_cli_refuses_a_bert_preset_and_init(tmp_path):
    cycle_corpus(tmp_path / "cycle.txt")
    done = cli("pretrain", "--objective", "elmo", "--corpus", str(tmp_path / "cycle.txt"), "--out", str(tmp_path / "x"),
               "--steps", "2", "--preset", "bert-tiny")
    assert done.returncode == 2 and "not a size for --objective elmo" in done.stderr
    model = BiLMPretraining(elmo_preset("elmo-tiny", vocab_size=12))
    assert set(model.loss_weights) == {"forward", "backward"}


def classification_files(tmp_path, rng):
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


def tagging_files(tmp_path, rng, train: int, dev: int = 40):
    """train.conll and dev.conll where the word after "alpha" is a name: the tag needs the word before."""
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
    for name, n in (("train", train), ("dev", dev)):
        lines = []
        for _ in range(n):
            sentence = list(rng.choice(words, size=int(rng.integers(3, 8))))
            for i, word in enumerate(sentence):
                lines.append(f"{word} {'B-PER' if i and sentence[i - 1] == 'alpha' else 'O'}")
            lines.append("")
        (tmp_path / f"{name}.conll").write_text("\n".join(lines) + "\n")


def test_elmo_features_fine_tune_a_classifier_and_a_tagger(tmp_path):
    docs = write_corpus(tmp_path / "corpus")  # the classifier's words, capitalised at the start of a sentence
    (tmp_path / "corpus.txt").write_text("\n\n".join(" ".join(d) for d in docs) + "\n")
    run(tmp_path / "corpus.txt", tmp_path / "lm", 40)
    model = str(tmp_path / "lm" / "model")
    rng = np.random.default_rng(0)
    classification_files(tmp_path, rng)
    done = cli("finetune", "--task", "sst2", "--train", str(tmp_path / "train.tsv"), "--dev", str(tmp_path / "dev.tsv"),
               "--model", model, "--out", str(tmp_path / "cls"), "--epochs", "8", "--batch-size", "16", "--lr", "3e-3",
               "--precision", "fp32", "--quiet")
    assert done.returncode == 0, done.stderr
    scores = json.loads((tmp_path / "cls" / "model" / "eval_results.json").read_text())
    assert scores["accuracy"] >= 0.9  # chance: 0.5
    evaluated = cli("evaluate", "--model", str(tmp_path / "cls" / "model"), "--data", str(tmp_path / "dev.tsv"))
    assert evaluated.returncode == 0 and json.loads(evaluated.stdout)["accuracy"] == scores["accuracy"]
    tagging_files(tmp_path, rng, train=120)
    done = cli("finetune", "--task", "ner", "--train", str(tmp_path / "train.conll"), "--dev",
               str(tmp_path / "dev.conll"), "--model", model, "--out", str(tmp_path / "ner"), "--epochs", "6",
               "--batch-size", "8", "--lr", "3e-3", "--precision", "fp32", "--quiet")
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "ner" / "model" / "eval_results.json").read_text())["f1"] >= 0.9


def test_taglm_tags_with_and_without_the_lm_states(tmp_path):
    docs = write_corpus(tmp_path / "corpus")
    (tmp_path / "corpus.txt").write_text("\n\n".join(" ".join(d) for d in docs) + "\n")
    run(tmp_path / "corpus.txt", tmp_path / "lm", 10)
    model = str(tmp_path / "lm" / "model")
    tagging_files(tmp_path, np.random.default_rng(1), train=100)
    for tagger in ("taglm", "taglm-baseline"):
        out = tmp_path / tagger
        done = cli("finetune", "--task", "ner", "--train", str(tmp_path / "train.conll"), "--dev",
                   str(tmp_path / "dev.conll"), "--model", model, "--out", str(out), "--tagger", tagger,
                   "--epochs", "6", "--batch-size", "8", "--lr", "3e-3", "--precision", "fp32", "--quiet")
        assert done.returncode == 0, done.stderr
        config = json.loads((out / "model" / "config.json").read_text())
        assert config["bertforge_task"]["tagger"] == tagger and config["architectures"] == [
            "TagLMForTokenClassification"]
        assert json.loads((out / "model" / "eval_results.json").read_text())["f1"] >= 0.9
        evaluated = cli("evaluate", "--model", str(out / "model"), "--data", str(tmp_path / "dev.conll"))
        assert evaluated.returncode == 0, evaluated.stderr
    # the baseline holds no LM states in its second layer's input
    from safetensors.torch import load_file

    with_lm = load_file(str(tmp_path / "taglm" / "model" / "model.safetensors"))["lstm2.weight_ih_l0"]
    without = load_file(str(tmp_path / "taglm-baseline" / "model" / "model.safetensors"))["lstm2.weight_ih_l0"]
    assert with_lm.shape[1] == without.shape[1] + 64  # + [forward; backward] of the biLM's top layer
    done = cli("finetune", "--task", "sst2", "--train", "a.tsv", "--dev", "b.tsv", "--model", model, "--out",
               str(tmp_path / "x"), "--tagger", "taglm")
    assert done.returncode == 2 and "--tagger is for token tagging" in done.stderr


def test_the_frozen_bilm_runs_once_per_sentence_and_its_kept_layers_are_its_own():
    from bertforge.families.elmo.features import ELMoClassifier

    torch.manual_seed(0)
    config = elmo_preset("elmo-tiny", vocab_size=20, id2label={0: "a", 1: "b"}, label2id={"a": 0, "b": 1})
    model = ELMoClassifier(config).train()
    sentences = [["<S>", *s.split(), "</S>"] for s in ("one two three", "four", "five six seven eight", "nine ten")]

    def batch(rows):
        length = max(len(sentences[r]) for r in rows)
        chars = torch.zeros(len(rows), length, 50, dtype=torch.long)
        mask = torch.zeros(len(rows), length, dtype=torch.long)
        for i, r in enumerate(rows):
            chars[i, :len(sentences[r])] = torch.tensor([word_characters(w) for w in sentences[r]])
            mask[i, :len(sentences[r])] = 1
        return {"input_chars": chars, "attention_mask": mask}

    calls = []
    model.backbone.register_forward_hook(lambda module, args, out: calls.append(args[0].shape[0]))
    model.lm_layers(batch([0, 1]))
    model.lm_layers(batch([0, 1]))
    assert calls == [2, 2]  # nothing kept unless fine-tuning asks (inference serves any number of texts)
    calls.clear()
    model.keep_frozen_outputs()
    first = model.lm_layers(batch([0, 1, 2]))
    again = model.lm_layers(batch([2, 3, 0]))  # other company, other padding: only sentence 3 is new
    assert calls == [3, 1]
    direct = model.backbone(batch([2, 3, 0])["input_chars"], batch([2, 3, 0])["attention_mask"].bool())
    for kept, fresh in zip(again, direct):
        assert (kept - fresh).abs().max() < 1e-6
    assert torch.equal(first[0][2], again[0][0][:first[0].shape[1]]) and first[0][1, 3:].abs().sum() == 0
    assert not any("cache" in k for k in model.state_dict())
