"""AllenNLP's ELMo format both ways, checked against bilm-tf's own forward pass written here in
numpy from the file's arrays (TensorFlow's gate order, its +1 on the forget gate, its carry gate,
(in, out) matrices): what we write computes in their conventions what our model computes, and a
file laid out as the published ones computes here what it computes there."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

h5py = pytest.importorskip("h5py", reason="AllenNLP's format needs h5py (pip install 'bertforge[allennlp]')")

from bertforge.families.elmo.config import elmo_preset  # noqa: E402
from bertforge.data.words import SPECIALS, WordVocab, word_characters  # noqa: E402
from bertforge.formats import native  # noqa: E402
from bertforge.formats.allennlp import config_of, expected_shapes  # noqa: E402
from bertforge.families.elmo.model import ELMoLanguageModel  # noqa: E402

WORDS = ["the", "cat", "sat", "on", "mat", "a"]
SENTENCE = ["<S>", "the", "cat", "sat", "on", "the", "mat", "</S>"]
# The published models' options.json (elmo_2x1024_128_2048cnn_1xhighway and elmo_2x4096_512_2048cnn_2xhighway)
SMALL = {"lstm": {"use_skip_connections": True, "projection_dim": 128, "cell_clip": 3, "proj_clip": 3,
                  "dim": 1024, "n_layers": 2},
         "char_cnn": {"activation": "relu", "filters": [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512],
                                                        [7, 1024]],
                      "n_highway": 1, "embedding": {"dim": 16}, "n_characters": 262, "max_characters_per_token": 50}}
ORIGINAL = json.loads(json.dumps(SMALL))
ORIGINAL["lstm"].update(projection_dim=512, dim=4096)
ORIGINAL["char_cnn"]["n_highway"] = 2


def cli(*args):
    return subprocess.run([sys.executable, "-m", "bertforge", *args], capture_output=True, text=True)


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def bilm_tf_layers(f, options, words):
    """bilm-tf's biLM over one sentence, from the HDF5 datasets as they are stored: every layer
    (T, 2P), as AllenNLP's ELMo returns them."""
    cnn, lstm = options["char_cnn"], options["lstm"]
    chars = np.array([word_characters(w, cnn["max_characters_per_token"]) for w in words]) - 1  # the file's ids
    embedded = f["char_embed"][...][chars]  # (T, C, E)
    pooled = []
    for i, (width, _) in enumerate(cnn["filters"]):
        kernel, bias = f[f"CNN/W_cnn_{i}"][...][0], f[f"CNN/b_cnn_{i}"][...]  # (w, E, n)
        steps = chars.shape[1] - width + 1
        conv = np.stack([np.einsum("tke,ken->tn", embedded[:, s:s + width], kernel) for s in range(steps)], 1) + bias
        pooled.append(np.maximum(conv.max(1), 0))  # max over positions, then relu
    x = np.concatenate(pooled, -1)
    for k in range(cnn["n_highway"]):
        h = f[f"CNN_high_{k}"]
        carry = sigmoid(x @ h["W_carry"][...] + h["b_carry"][...])
        x = carry * np.maximum(x @ h["W_transform"][...] + h["b_transform"][...], 0) + (1 - carry) * x
    x = x @ f["CNN_proj/W_proj"][...] + f["CNN_proj/b_proj"][...]
    outputs = []
    for d in range(2):
        inputs, per_layer = (x if d == 0 else x[::-1]), []
        for layer in range(lstm["n_layers"]):
            cell = f[f"RNN_{d}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"]
            W, b, P = cell["W_0"][...], cell["B"][...], cell["W_P_0"][...]
            c, m, out = np.zeros(lstm["dim"]), np.zeros(P.shape[1]), []
            for t in range(len(inputs)):
                i, j, fg, o = np.split(np.concatenate([inputs[t], m]) @ W + b, 4)
                c = np.clip(sigmoid(fg + 1.0) * c + sigmoid(i) * np.tanh(j), -lstm["cell_clip"], lstm["cell_clip"])
                m = np.clip((sigmoid(o) * np.tanh(c)) @ P, -lstm["proj_clip"], lstm["proj_clip"])
                out.append(m)
            out = np.array(out) + (inputs if layer > 0 else 0)
            per_layer.append(out if d == 0 else out[::-1])
            inputs = out
        outputs.append(per_layer)
    return [np.concatenate([x, x], -1)] + [np.concatenate(pair, -1) for pair in zip(*outputs)]


def tiny_elmo(directory, seed=0):
    """A tiny ELMo with every weight random (so no convention can hide behind a zero or a one)."""
    torch.manual_seed(seed)
    config = elmo_preset("elmo-tiny", vocab_size=len(SPECIALS) + len(WORDS), cell_clip=0.8, proj_clip=0.5)
    model = ELMoLanguageModel(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(0, 0.5 if "embedding" in name else 0.3)
        model.backbone.embeddings.embedding.weight[0] = 0
    directory.mkdir()
    native.write(model, str(directory), WordVocab(list(SPECIALS) + WORDS, lowercase=False, characters=50))
    return model.eval()


def our_layers(model, words):
    chars = torch.tensor([[word_characters(w, model.backbone.config.max_characters_per_token) for w in words]])
    with torch.no_grad():
        return [layer[0].numpy() for layer in model.backbone(chars)]


def test_export_computes_in_bilm_tf_conventions_what_our_model_computes(tmp_path):
    model = tiny_elmo(tmp_path / "elmo")
    done = cli("export", str(tmp_path / "elmo"), str(tmp_path / "allen"), "--format", "allennlp")
    assert done.returncode == 0, done.stderr
    options = json.loads((tmp_path / "allen" / "options.json").read_text())
    assert options["lstm"]["use_skip_connections"] and options["char_cnn"]["n_characters"] == 262
    vocab = (tmp_path / "allen" / "vocab.txt").read_text().splitlines()
    assert vocab == ["<S>", "</S>", "<UNK>", *WORDS]
    with h5py.File(tmp_path / "allen" / "weights.hdf5", "r") as f:
        assert {name: tuple(f[name].shape) for name in expected_shapes(model.backbone.config, len(vocab))} == \
            expected_shapes(model.backbone.config, len(vocab))
        theirs = bilm_tf_layers(f, options, SENTENCE)
        # the softmax rows follow vocab.txt: <S>'s row is our xxbos's, "cat"'s our "cat"'s
        assert np.allclose(f["softmax/W"][0], model.softmax.weight[2].detach().numpy())
        assert np.allclose(f["softmax/W"][4], model.softmax.weight[6].detach().numpy())
    ours = our_layers(model, SENTENCE)
    assert len(theirs) == len(ours) == 3
    for a, b in zip(theirs, ours):
        assert np.abs(a - b).max() < 1e-5
    assert np.abs(ours[1]).max() > 0.1  # the LSTM layers say something (not all clipped to nothing)


def test_round_trip_is_exact_and_the_imported_model_embeds(tmp_path):
    model = tiny_elmo(tmp_path / "elmo")
    assert cli("export", str(tmp_path / "elmo"), str(tmp_path / "allen"), "--format", "allennlp").returncode == 0
    allen = tmp_path / "allen"
    done = cli("import-allennlp", str(allen / "options.json"), str(allen / "weights.hdf5"), str(tmp_path / "back"),
               "--vocab", str(allen / "vocab.txt"))
    assert done.returncode == 0, done.stderr
    assert "softmax over 9 words" in done.stdout
    back = native.load_model(ELMoLanguageModel, str(tmp_path / "back")).eval()
    ours, theirs = model.state_dict(), back.state_dict()
    for name, tensor in ours.items():
        if name == "softmax.bias":  # our padding word and field mark have no row in the file: never predicted
            assert torch.equal(theirs[name][[0, 2, 3, 5, 6, 7, 8, 9, 10]], tensor[[0, 2, 3, 5, 6, 7, 8, 9, 10]])
            assert (theirs[name][[1, 4]] < -1e3).all()
        elif name == "softmax.weight":
            assert torch.equal(theirs[name][[0, 2, 3, *range(5, 11)]], tensor[[0, 2, 3, *range(5, 11)]])
        else:
            assert torch.allclose(theirs[name], tensor, atol=1e-7), name
    assert WordVocab.from_pretrained(str(tmp_path / "back")).words == list(SPECIALS) + WORDS
    (tmp_path / "in.txt").write_text("the cat sat\n")
    done = cli("embed", "--model", str(tmp_path / "back"), "--input", str(tmp_path / "in.txt"), "--pooling", "tokens",
               "--output", str(tmp_path / "v.jsonl"))
    assert done.returncode == 0, done.stderr
    vector = np.array(json.loads((tmp_path / "v.jsonl").read_text())["vector"])
    assert vector.shape == (3, 64)


def test_a_vocabulary_with_its_marks_in_another_order_keeps_each_words_softmax_row(tmp_path):
    # the published 1B Word vocabulary begins </S>, <S>, <UNK>: bilm-tf finds the marks by name
    model = tiny_elmo(tmp_path / "elmo")
    assert cli("export", str(tmp_path / "elmo"), str(tmp_path / "allen"), "--format", "allennlp").returncode == 0
    allen = tmp_path / "allen"
    with h5py.File(allen / "weights.hdf5", "a") as f:
        order = [1, 0, 4, 2, 3, *range(5, 9)]  # </S>, <S>, cat, <UNK>, the, the rest
        for name in ("softmax/W", "softmax/b"):
            rows = f[name][...][order]
            del f[name]
            f.create_dataset(name, data=rows)
    lines = (allen / "vocab.txt").read_text().splitlines()
    (allen / "vocab.txt").write_text("".join(lines[i] + "\n" for i in order))
    done = cli("import-allennlp", str(allen / "options.json"), str(allen / "weights.hdf5"), str(tmp_path / "back"),
               "--vocab", str(allen / "vocab.txt"))
    assert done.returncode == 0, done.stderr
    back = native.load_model(ELMoLanguageModel, str(tmp_path / "back"))
    words = WordVocab.from_pretrained(str(tmp_path / "back")).words
    assert words == list(SPECIALS) + ["cat", "the", "sat", "on", "mat", "a"]
    for word in ("xxbos", "xxeos", "xxunk", "the", "cat", "mat"):
        ours = (list(SPECIALS) + WORDS).index(word)
        assert torch.equal(back.softmax.weight[words.index(word)], model.softmax.weight[ours]), word


def published_layout(path, options, rng):
    """A weights.hdf5 with the published files' datasets (bilm-tf's dump_weights: no softmax), random values."""
    config = config_of(options, "options.json", 5)
    with h5py.File(path, "w") as f:
        for name, shape in expected_shapes(config, None).items():
            f.create_dataset(name, data=rng.normal(0, 0.3, shape).astype(np.float32))


def test_a_file_in_the_published_layout_computes_here_what_it_computes_there(tmp_path):
    options = json.loads(json.dumps(SMALL))  # the published Small's options, at a width that tests in seconds
    options["lstm"].update(projection_dim=16, dim=24)
    options["char_cnn"].update(filters=[[1, 4], [2, 4], [3, 8]], max_characters_per_token=10)
    (tmp_path / "options.json").write_text(json.dumps(options))
    published_layout(tmp_path / "weights.hdf5", options, np.random.default_rng(0))
    done = cli("import-allennlp", str(tmp_path / "options.json"), str(tmp_path / "weights.hdf5"), str(tmp_path / "m"))
    assert done.returncode == 0, done.stderr
    assert "no softmax in the file" in done.stdout
    model = native.load_model(ELMoLanguageModel, str(tmp_path / "m")).eval()
    with h5py.File(tmp_path / "weights.hdf5", "r") as f:
        theirs = bilm_tf_layers(f, options, SENTENCE)
    for a, b in zip(theirs, our_layers(model, SENTENCE)):
        assert np.abs(a - b).max() < 1e-5


def test_the_published_options_are_the_papers_small_and_original():
    for options, preset, millions in ((SMALL, "elmo-small", 13.6), (ORIGINAL, "elmo-original", 93.6)):
        config = config_of(options, "options.json", 5)
        ours = elmo_preset(preset)
        assert {k: getattr(config, k) for k in ("filters", "n_highway", "projection_dim", "cell_size", "n_layers")} \
            == {k: getattr(ours, k) for k in ("filters", "n_highway", "projection_dim", "cell_size", "n_layers")}
        size = sum(int(np.prod(s)) for s in expected_shapes(config, None).values())
        assert abs(size / 1e6 - millions) < 0.1, size


def test_bad_files_get_one_line_naming_the_file(tmp_path):
    options = json.loads(json.dumps(SMALL))
    options["lstm"].update(projection_dim=16, dim=24)
    options["char_cnn"].update(filters=[[1, 4], [2, 4]], max_characters_per_token=10)
    (tmp_path / "options.json").write_text(json.dumps(options))
    published_layout(tmp_path / "good.hdf5", options, np.random.default_rng(0))
    with h5py.File(tmp_path / "good.hdf5", "r") as good, h5py.File(tmp_path / "missing.hdf5", "w") as bad, \
            h5py.File(tmp_path / "shape.hdf5", "w") as shaped:
        for name in expected_shapes(config_of(options, "o", 5), None):
            if name != "CNN_proj/W_proj":
                bad.create_dataset(name, data=good[name][...])
            shaped.create_dataset(name, data=good[name][...][..., :3] if name == "CNN/b_cnn_1" else good[name][...])
    (tmp_path / "not.hdf5").write_text("hello")
    (tmp_path / "vocab.txt").write_text("<S>\n<UNK>\nthe\n")
    (tmp_path / "twice.txt").write_text("<S>\n</S>\nthe\nthe\n<UNK>\n")
    with h5py.File(tmp_path / "good.hdf5", "r") as good, h5py.File(tmp_path / "group.hdf5", "w") as grouped:
        for name in good:
            good.copy(good[name], grouped)
        del grouped["CNN/b_cnn_0"]
        grouped.create_group("CNN/b_cnn_0")  # a group where a dataset belongs
    no_skip = json.loads(json.dumps(options))
    no_skip["lstm"]["use_skip_connections"] = False
    (tmp_path / "noskip.json").write_text(json.dumps(no_skip))
    cases = [
        (["options.json", "missing.hdf5"], "missing.hdf5: does not match", "CNN_proj/W_proj (missing)"),
        (["options.json", "shape.hdf5"], "shape.hdf5: does not match", "CNN/b_cnn_1 (3,) (expected (4,))"),
        (["options.json", "not.hdf5"], "not.hdf5: cannot be read as HDF5", ""),
        (["options.json", "good.hdf5", "--vocab", "vocab.txt"], "vocab.txt: no </S>", ""),
        (["options.json", "good.hdf5", "--vocab", "twice.txt"], "twice.txt, line 4: 'the' again (first on line 3)", ""),
        (["options.json", "group.hdf5"], "group.hdf5: does not match", "CNN/b_cnn_0 (missing)"),
        (["noskip.json", "good.hdf5"], "noskip.json: lstm.use_skip_connections is not true", ""),
        (["nothere.json", "good.hdf5"], "nothere.json: no such file", ""),
    ]
    for i, (args, start, detail) in enumerate(cases):
        paths = [str(tmp_path / a) if not a.startswith("--") else a for a in args]
        done = cli("import-allennlp", *paths, str(tmp_path / f"out{i}"))
        assert done.returncode == 2, (args, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and start in lines[0] and detail in lines[0], lines
        assert not (tmp_path / f"out{i}").exists()


def test_export_refuses_what_is_not_an_elmo(tmp_path):
    from bertforge.families.awd_lstm.config import awd_lstm_preset
    from bertforge.families.awd_lstm.model import AWDLSTMLanguageModel

    (tmp_path / "awd").mkdir()
    native.write(AWDLSTMLanguageModel(awd_lstm_preset("awd-lstm-tiny", vocab_size=20)), str(tmp_path / "awd"))
    done = cli("export", str(tmp_path / "awd"), str(tmp_path / "x"), "--format", "allennlp")
    assert done.returncode == 2 and "awd-lstm checkpoint" in done.stderr, done.stderr
    short = ELMoLanguageModel(elmo_preset("elmo-tiny", vocab_size=9, max_characters_per_token=12))
    (tmp_path / "short").mkdir()
    native.write(short, str(tmp_path / "short"), WordVocab(list(SPECIALS) + WORDS[:4], characters=12))
    done = cli("export", str(tmp_path / "short"), str(tmp_path / "y"), "--format", "allennlp")
    assert done.returncode == 2 and "reads 12 characters per word; AllenNLP's character mapper always gives 50" \
        in done.stderr, done.stderr
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
