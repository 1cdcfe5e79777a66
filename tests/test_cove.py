"""CoVe's translation model: a tiny one learns to copy sentences over fixed word vectors through
the whole pipeline (train-translation --arch lstm, the model directory, translate); step-by-step
decoding equals teacher forcing; the encoder reads and writes the released CoVe layout; bad input."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from bertforge import load
from bertforge.families.cove.config import PRESETS, CoveConfig
from bertforge.data.cove_vocab import describe_coverage
from bertforge.errors import BertforgeError
from bertforge.formats.cove import read_encoder, released_keys, write_encoder
from bertforge.formats.word_vectors import write_vectors
from bertforge.families.cove.model import CoveTranslator
from bertforge.train_translation import train_translation
from bertforge.translate import DecodeOptions, translate
from conftest import shared_source_equals_repeated
from test_translation import WORDS, _write_task


def _vectors(folder, dim: int = 8) -> str:
    """Random fixed vectors for the task's words, and for some words the task never uses."""
    words = WORDS + ["unused", "words", "too"]
    path = os.path.join(folder, "vectors.txt")
    write_vectors(path, words, np.random.default_rng(0).standard_normal((len(words), dim)))
    return path


@pytest.fixture(scope="module")
def copy_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cove")
    train = _write_task(folder, "train", 2000, False, seed=1)
    valid = _write_task(folder, "valid", 100, False, seed=2)
    out = str(folder / "run")
    torch.manual_seed(0)
    summary = train_translation("src", "tgt", train, valid, out, arch="lstm", word_vectors=_vectors(folder),
                                preset="cove-tiny", vocab_size=120, batch_tokens=800, steps=1500, lr=1e-2, warmup=100,
                                eval_every=1500, bleu_sentences=100, average=2, save_every=150, precision="fp32",
                                progress=False, overrides={"dropout": 0.0})
    return out, valid, summary


def test_a_tiny_cove_learns_to_copy_through_the_pipeline(copy_run):
    """Copying needs the attention to find the right source word at each step: the decoder has
    no other way to the source."""
    out, valid, summary = copy_run
    loaded = load(os.path.join(out, "model"))
    assert isinstance(loaded.model, CoveTranslator) and loaded.config.model_type == "cove"
    assert loaded.model.encoder.vectors.weight.requires_grad is False
    sources = Path(valid + ".src").read_text(encoding="utf-8").splitlines()
    targets = Path(valid + ".tgt").read_text(encoding="utf-8").splitlines()
    for beam in (1, 4):
        hyps = translate(loaded.model, loaded.tokenizer, sources, DecodeOptions(beam=beam))
        exact = sum(h == t for h, t in zip(hyps, targets)) / len(targets)
        assert exact > 0.9, (beam, exact, hyps[:3], targets[:3])
    assert summary["eval"]["bleu"] > 90


def test_the_word_vectors_stay_fixed(copy_run, tmp_path):
    out, _, _ = copy_run
    loaded = load(os.path.join(out, "model"))
    words = loaded.tokenizer.words
    expected = loaded.tokenizer.vector_matrix(*_read(_vectors(tmp_path)))
    assert words[:len(WORDS)] == WORDS
    np.testing.assert_array_equal(loaded.model.encoder.vectors.weight.numpy(), expected)


def test_a_run_says_which_source_words_have_no_vector(copy_run):
    """Words without a vector all read one zero vector, so a run counts them (run_config.json and
    its log): in the copy task every word has one; unknown words are counted per occurrence."""
    out, _, _ = copy_run
    with open(os.path.join(out, "run_config.json"), encoding="utf-8") as f:
        saved = json.load(f)
    sources = Path(os.path.dirname(out), "train.src").read_text(encoding="utf-8").split()
    assert saved["vector_coverage"] == {"words": len(sources), "without_vector": 0, "different_without": 0,
                                        "commonest_without": []}
    assert saved["kept_pairs"] == 2000 and saved["skipped_pairs"] == 0
    tokenizer = load(os.path.join(out, "model")).tokenizer
    coverage = tokenizer.coverage([f"{WORDS[0]} zzz", f"zzz qqq {WORDS[1]} zzz"])
    assert coverage == {"words": 6, "without_vector": 4, "different_without": 2, "commonest_without": ["zzz", "qqq"]}
    assert describe_coverage(coverage) == ("33.3% of the 6 source words read have a vector; 2 different words "
                                           "have none (the zero vector), the commonest: zzz, qqq")


def _read(path):
    from bertforge.formats.word_vectors import read_vectors

    return read_vectors(path)


def test_the_features_finetune_offers_are_the_cove_records():
    """--features' CoVe choices (named in the CLI so that --help needs no torch) are what the record
    says its task network reads, and what finetune tells apart from a Transformer's features."""
    from bertforge.cli.finetune import COVE_FEATURES
    from bertforge.families import family_of
    from bertforge.families.cove.config import FEATURES
    from bertforge.families.cove.embedder import CoveEmbedder
    from bertforge.finetune import model_features

    # bertforge embed asks the embedder for its --features
    assert COVE_FEATURES == FEATURES == family_of("cove").task_features == model_features() == CoveEmbedder.FEATURES


def test_step_by_step_decoding_equals_teacher_forcing():
    torch.manual_seed(0)
    model = CoveTranslator(CoveConfig(**PRESETS["cove-tiny"], source_vocab_size=20, vocab_size=30, word_dim=8)).eval()
    source, mask = torch.randint(2, 20, (3, 7)), torch.ones(3, 7, dtype=torch.bool)
    mask[1, 4:] = False
    target = torch.randint(0, 29, (3, 5))
    whole = model(source, mask, target)
    memory = model.encode(source, mask)
    caches = model.cross_caches(memory)
    steps = torch.cat([model.logits(model.decode(target[:, t:t + 1], memory, mask, caches, start=t)) for t in range(5)], 1)
    torch.testing.assert_close(steps, whole, rtol=0, atol=1e-6)
    # padding is not read: the second row alone, unpadded, gives the same states
    alone = model.encode(source[1:2, :4], mask[1:2, :4])
    torch.testing.assert_close(memory[1:2, :4], alone, rtol=0, atol=1e-6)


def test_a_beams_hypotheses_share_their_sentences_encoder_states():
    torch.manual_seed(0)
    model = CoveTranslator(CoveConfig(**PRESETS["cove-tiny"], source_vocab_size=20, vocab_size=30, word_dim=8)).eval()
    source, mask = torch.randint(2, 20, (3, 7)), torch.ones(3, 7, dtype=torch.bool)
    mask[1, 4:] = False
    shared_source_equals_repeated(model, source, mask)


def test_the_released_layout_round_trips(copy_run, tmp_path):
    """Ours written under wmtlstm's names reads back; a plain nn.LSTM's state dict saved as the
    released .pth loads into our encoder and gives the same states as that LSTM."""
    out, _, _ = copy_run
    loaded = load(os.path.join(out, "model"))
    write_encoder(loaded.model, str(tmp_path / "ours.safetensors"))
    tensors = read_encoder(str(tmp_path / "ours.safetensors"))
    assert list(tensors) == released_keys(2)
    for key, value in tensors.items():
        torch.testing.assert_close(value, loaded.model.encoder.rnn.state_dict()[key], rtol=0, atol=0)
    torch.manual_seed(1)
    plain = nn.LSTM(8, 16, num_layers=2, bidirectional=True, batch_first=True)
    torch.save(plain.state_dict(), tmp_path / "wmtlstm.pth")
    from bertforge.formats.cove import load_encoder

    load_encoder(loaded.model, str(tmp_path / "wmtlstm.pth"))
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        torch.testing.assert_close(loaded.model.encoder.rnn(x)[0], plain(x)[0], rtol=0, atol=0)


def test_bad_released_files_are_refused(tmp_path):
    lstm = nn.LSTM(8, 16, num_layers=2, bidirectional=True)
    state = lstm.state_dict()
    cases = {
        "missing.pth": {k: v for k, v in state.items() if k != "bias_hh_l1_reverse"},
        "shape.pth": {**state, "weight_hh_l0": torch.zeros(64, 15)},
    }
    for name, tensors in cases.items():
        torch.save(tensors, tmp_path / name)
    with pytest.raises(BertforgeError, match="missing.pth: not a bidirectional LSTM's weights .*bias_hh_l1_reverse"):
        read_encoder(str(tmp_path / "missing.pth"))
    with pytest.raises(BertforgeError, match=r"shape.pth: weight_hh_l0 has shape \(64, 15\)"):
        read_encoder(str(tmp_path / "shape.pth"))
    with open(tmp_path / "code.pth", "wb") as f:
        pickle.dump({"weight_ih_l0": Exploit()}, f)
    with pytest.raises(BertforgeError, match="refused"):
        read_encoder(str(tmp_path / "code.pth"))
    assert not (tmp_path / "ran").exists()
    torch.save(nn.LSTM(8, 12, num_layers=2, bidirectional=True).state_dict(), tmp_path / "other.pth")
    model = CoveTranslator(CoveConfig(**PRESETS["cove-tiny"], source_vocab_size=20, vocab_size=30, word_dim=8))
    from bertforge.formats.cove import load_encoder

    with pytest.raises(BertforgeError, match="12 per direction"):
        load_encoder(model, str(tmp_path / "other.pth"))


class Exploit:
    def __reduce__(self):
        return (os.system, ("touch ran",))


def test_command_line_errors(tmp_path):
    train = _write_task(tmp_path, "train", 20, False, seed=1)
    base = [sys.executable, "-m", "bertforge", "train-translation", "--source-lang", "src", "--target-lang", "tgt",
            "--train", train, "--dev", train, "--out", str(tmp_path / "run")]
    (tmp_path / "bad.txt").write_text("red 0.1 0.2\nblue 0.3\n")
    for extra, message in ((["--arch", "lstm"], "--arch lstm reads fixed word vectors"),
                           (["--word-vectors", str(tmp_path / "bad.txt")], "--word-vectors goes with --arch lstm"),
                           (["--arch", "lstm", "--word-vectors", str(tmp_path / "bad.txt")],
                            "bad.txt:2: expected a word and 2 numbers"),
                           (["--arch", "lstm", "--preset", "multi30k", "--word-vectors", str(tmp_path / "bad.txt")],
                            "unknown preset 'multi30k' for --arch lstm")):
        done = subprocess.run(base + extra, capture_output=True, text=True)
        assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_cove_features_carry_what_a_probe_needs(copy_run):
    """The next word of the source is context, which a word's GloVe vector cannot hold and its CoVe
    vector (trained to copy, so to know the order) holds: a linear probe on each tells."""
    from sklearn.linear_model import LogisticRegression

    from bertforge.embed import Embedder

    out, valid, _ = copy_run
    embedder = Embedder.from_pretrained(os.path.join(out, "model"))
    train_texts = Path(os.path.dirname(valid), "train.src").read_text(encoding="utf-8").splitlines()[:300]
    valid_texts = Path(valid + ".src").read_text(encoding="utf-8").splitlines()

    def probe_data(texts, features):
        vectors = embedder.encode(texts, pooling="tokens", features=features)
        x = [v[k] for v, t in zip(vectors, texts) for k in range(len(t.split()) - 1)]
        y = [t.split()[k + 1] for t in texts for k in range(len(t.split()) - 1)]
        return np.array(x), y

    accuracy = {}
    for features in ("glove", "cove", "glove+cove"):
        x, y = probe_data(train_texts, features)
        probe = LogisticRegression(max_iter=2000).fit(x, y)
        accuracy[features] = probe.score(*probe_data(valid_texts, features))
    # chance is 1/12 (measured: glove 0.10, cove 0.30, glove+cove 0.37)
    assert accuracy["glove"] < 0.15 and accuracy["cove"] > max(0.22, 2 * accuracy["glove"]), accuracy
    assert accuracy["glove+cove"] > 0.22, accuracy
    vectors = embedder.encode(["red dog"], pooling="tokens")[0]
    assert vectors.shape == (2, 8 + 32)  # [GloVe (8); CoVe (2 x 16)]
    words, glove = _read(_vectors(os.path.dirname(valid)))
    np.testing.assert_array_equal(vectors[:, :8], glove[[words.index("red"), words.index("dog")]])


def cli(*args):
    return subprocess.run([sys.executable, "-m", "bertforge", *args], capture_output=True, text=True)


def test_a_task_network_fine_tunes_over_each_feature_set(copy_run, tmp_path):
    """The BCN learns "is a dog in it" from each feature set; the tagger tags the word after "red"
    (the word before decides); the fine-tuned model stands alone (evaluate, embed)."""
    import json

    out, _, _ = copy_run
    model = os.path.join(out, "model")
    rng = np.random.default_rng(0)
    others = [w for w in WORDS if w != "dog"]
    for name, n in (("train", 320), ("dev", 40)):
        rows = ["sentence\tlabel"]
        for _ in range(n):
            words, label = list(rng.choice(others, int(rng.integers(2, 6)))), int(rng.random() < 0.5)
            if label:
                words.insert(int(rng.integers(len(words) + 1)), "dog")
            rows.append(" ".join(words) + f"\t{label}")
        (tmp_path / f"{name}.tsv").write_text("\n".join(rows) + "\n")
    for features in ("glove", "cove", "glove+cove"):
        done = cli("finetune", "--task", "sst2", "--train", str(tmp_path / "train.tsv"), "--dev",
                   str(tmp_path / "dev.tsv"), "--model", model, "--out", str(tmp_path / features), "--features",
                   features, "--epochs", "8", "--batch-size", "16", "--lr", "3e-3", "--precision", "fp32", "--quiet")
        assert done.returncode == 0, done.stderr
        saved = tmp_path / features / "model"
        config = json.loads((saved / "config.json").read_text())
        assert config["task_features"] == features and config["architectures"] == ["CoveBCNForSequenceClassification"]
        scores = json.loads((saved / "eval_results.json").read_text())
        assert scores["accuracy"] >= 0.9, (features, scores)
    evaluated = cli("evaluate", "--model", str(tmp_path / "cove" / "model"), "--data", str(tmp_path / "dev.tsv"))
    assert evaluated.returncode == 0 and json.loads(evaluated.stdout)["accuracy"] >= 0.9, evaluated.stderr
    for name, n in (("train", 200), ("dev", 40)):
        lines = []
        for _ in range(n):
            sentence = list(rng.choice(WORDS, int(rng.integers(3, 7))))
            lines += [f"{w} {'B-PER' if i and sentence[i - 1] == 'red' else 'O'}" for i, w in enumerate(sentence)] + [""]
        (tmp_path / f"{name}.conll").write_text("\n".join(lines) + "\n")
    done = cli("finetune", "--task", "ner", "--train", str(tmp_path / "train.conll"), "--dev",
               str(tmp_path / "dev.conll"), "--model", model, "--out", str(tmp_path / "ner"), "--epochs", "10",
               "--batch-size", "8", "--lr", "3e-3", "--precision", "fp32", "--quiet")
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "ner" / "model" / "eval_results.json").read_text())["f1"] >= 0.9
    bad = cli("finetune", "--task", "sst2", "--train", str(tmp_path / "train.tsv"), "--dev", str(tmp_path / "dev.tsv"),
              "--model", model, "--out", str(tmp_path / "bad"), "--features", "elmo")
    assert bad.returncode == 2 and "invalid choice" in bad.stderr


def test_fine_tuning_reads_each_sentence_through_the_mt_lstm_once():
    """The frozen MT-LSTM gives a sentence the same states every epoch: once fine-tuning asks, each
    sentence is read once, in any company and padding, with the states a direct read gives; past the
    byte budget sentences are read again rather than kept."""
    from bertforge.families.cove.features import BiattentiveClassifier
    from bertforge.nn.frozen_outputs import FrozenOutputs

    torch.manual_seed(0)
    config = CoveConfig(**PRESETS["cove-tiny"], source_vocab_size=20, vocab_size=30, word_dim=8, id2label={0: "no", 1: "yes"})
    model = BiattentiveClassifier(config).eval()
    sentences = [[3, 4, 5], [6], [7, 8, 9, 10], [11, 12]]

    def batch(rows):
        ids = torch.zeros(len(rows), max(len(sentences[r]) for r in rows), dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, r in enumerate(rows):
            ids[i, :len(sentences[r])], mask[i, :len(sentences[r])] = torch.tensor(sentences[r]), 1
        return {"input_ids": ids, "attention_mask": mask}

    calls = []
    model.backbone.register_forward_hook(lambda module, args, out: calls.append(args[0].shape[0]))
    direct = [model.inputs(batch(rows))[0] for rows in ([0, 1, 2], [2, 3, 0])]
    model.keep_frozen_outputs()
    calls.clear()
    kept = [model.inputs(batch(rows))[0] for rows in ([0, 1, 2], [2, 3, 0], [3, 1])]
    assert calls == [3, 1]  # the second batch reads only sentence 3; the third nothing
    for fresh, again in zip(direct, kept):
        assert (fresh - again).abs().max() < 1e-6
    assert kept[1][1, 2:, 8:].abs().sum() == 0  # CoVe stays zero at padding (after GloVe's 8)
    model.kept = FrozenOutputs(budget=0)
    calls.clear()
    for _ in range(2):
        assert (model.inputs(batch([0, 1, 2]))[0] - direct[0]).abs().max() < 1e-6
    assert calls == [3, 3]
    assert not any("kept" in k for k in model.state_dict())


def test_the_bcn_reads_sentence_pairs(copy_run, tmp_path):
    """Whether two texts share a word, balanced (chance 0.5): neither text alone tells, the BCN's
    attention of each text over the other does. The MT-LSTM reads each text on its own, so a pair's
    features are each text's own; the fine-tuned model evaluates from its directory."""
    import json

    from bertforge.load import load_finetuned
    from bertforge.families.cove.features import split_pair

    out, _, _ = copy_run
    rng = np.random.default_rng(1)

    def example(share: bool):
        while True:
            a, b = list(rng.choice(WORDS, 3, replace=False)), list(rng.choice(WORDS, 3, replace=False))
            if bool(set(a) & set(b)) == share:
                return " ".join(a), " ".join(b)

    for name, n in (("train", 400), ("dev", 60)):
        rows = ["first\tsecond\tlabel"] + ["\t".join([*example(k % 2 == 1), str(k % 2)]) for k in range(n)]
        (tmp_path / f"{name}.tsv").write_text("\n".join(rows) + "\n")
    done = cli("finetune", "--task", "classification", "--text-column", "first", "--pair-column", "second",
               "--label-column", "label", "--train", str(tmp_path / "train.tsv"), "--dev", str(tmp_path / "dev.tsv"),
               "--model", os.path.join(out, "model"), "--out", str(tmp_path / "pairs"), "--epochs", "10",
               "--batch-size", "16", "--lr", "3e-3", "--precision", "fp32", "--quiet")
    assert done.returncode == 0, done.stderr
    saved = str(tmp_path / "pairs" / "model")
    assert json.loads(Path(saved, "eval_results.json").read_text())["accuracy"] >= 0.85
    evaluated = cli("evaluate", "--model", saved, "--data", str(tmp_path / "dev.tsv"))
    assert evaluated.returncode == 0 and json.loads(evaluated.stdout)["accuracy"] >= 0.85, evaluated.stderr

    model, task, tokenizer = load_finetuned(saved)
    assert model.pairs and task.pair_column == "second"
    both = tokenizer.encode_batch(["red dog", "cat"], ["blue bird fish", "jumps"])
    assert both[0].token_type_ids == [0, 0, 0, 1, 1, 1, 1]  # each text ends in </s>
    ids = torch.tensor([both[0].ids, both[1].ids + [0] * 3])
    types = torch.tensor([both[0].token_type_ids, both[1].token_type_ids + [0] * 3])
    mask = torch.tensor([[1] * 7, [1] * 4 + [0] * 3]).bool()
    (first, first_mask), (second, second_mask) = split_pair(ids, mask, types)
    alone = [tokenizer.encode_batch([t])[0].ids for t in ("red dog", "cat", "blue bird fish", "jumps")]
    assert first[0, :3].tolist() == alone[0] and first[1, :2].tolist() == alone[1] and not first_mask[1, 2:].any()
    assert second[0].tolist() == alone[2] and second[1, :2].tolist() == alone[3] and second_mask.sum(1).tolist() == [4, 2]
