"""GloVe word vectors: the counts, the objective and its AdaGrad step against direct computations,
learning, exact resume, the file formats, the scores against gensim's, and bad input."""

from __future__ import annotations

import itertools
import json
import os

import numpy as np
import pytest
import torch

from bertforge.cli import main
from bertforge.data import cooccurrence
from bertforge.errors import BertforgeError
from bertforge.formats.word_vectors import read_vectors, write_vectors
from bertforge.word_vectors import Glove, GloveOptions, _kept_share, all_but_the_top, glove_cost, train_word_vectors


def direct_counts(units, index, window):
    """GloVe's cooccur.c, written plainly: words out of the vocabulary dropped, then X[w1][w2] and
    X[w2][w1] += 1/d for every pair in a window."""
    X = np.zeros((len(index), len(index)))
    for words in units:
        words = [w for w in words if w in index]
        for p, q in itertools.combinations(range(len(words)), 2):
            if q - p <= window:
                X[index[words[p]], index[words[q]]] += 1 / (q - p)
                X[index[words[q]], index[words[p]]] += 1 / (q - p)
    return X


def dense(folder, vocab):
    entries, _ = cooccurrence.read(folder)
    i, j, x = cooccurrence.both_ways(np.asarray(entries))
    X = np.zeros((vocab, vocab))
    np.add.at(X, (i, j), x)
    assert len(set(zip(i.tolist(), j.tolist()))) == len(i)  # each cell once
    return X


def random_units(seed, count=300, vocab=30):
    rng = np.random.default_rng(seed)
    return [[f"w{k}" for k in rng.integers(0, vocab, rng.integers(1, 25))] for _ in range(count)]


@pytest.mark.parametrize("memory_mb", [64, 0.002])  # all in memory; spilled to disk every block
def test_counts_equal_glove_definition(tmp_path, memory_mb):
    units = random_units(0)
    index = {f"w{k}": k for k in range(25)}  # w25..w29 out of vocabulary: dropped, as GloVe's tool drops them
    info = cooccurrence.count(units, index, str(tmp_path), window=4, memory_mb=memory_mb)
    assert info["words"] == sum(map(len, units))
    np.testing.assert_allclose(dense(str(tmp_path), 25), direct_counts(units, index, 4), rtol=1e-6)
    if memory_mb < 1:
        assert not os.path.exists(tmp_path / "runs")  # the spilled runs are gone once merged


def test_a_unit_longer_than_a_block_counts_the_same(tmp_path):
    """Blocks of 100 words cut inside a 1,000-word unit; the carried words join the next block."""
    units = [[f"w{k}" for k in np.random.default_rng(3).integers(0, 20, 1000)], ["w1", "w2"]]
    index = {f"w{k}": k for k in range(20)}
    cooccurrence.count(units, index, str(tmp_path), window=5, memory_mb=0.001)
    np.testing.assert_allclose(dense(str(tmp_path), 20), direct_counts(units, index, 5), rtol=1e-6)


def test_counts_never_cross_units(tmp_path):
    cooccurrence.count([["a", "b"], ["c"]], {"a": 0, "b": 1, "c": 2}, str(tmp_path), window=5)
    X = dense(str(tmp_path), 3)
    assert X[1, 2] == 0 and X[0, 1] == 1


def glove_by_loops(X, w, c, bw, bc, x_max, alpha):
    total = 0.0
    for i, j in zip(*np.nonzero(X)):
        f = min(1.0, X[i, j] / x_max) ** alpha
        total += 0.5 * f * (w[i] @ c[j] + bw[i] + bc[j] - np.log(X[i, j])) ** 2
    return total


def test_objective_equals_direct_computation(tmp_path):
    units = random_units(1, count=50, vocab=8)
    index = {f"w{k}": k for k in range(8)}
    cooccurrence.count(units, index, str(tmp_path), window=3)
    X = dense(str(tmp_path), 8)
    g = torch.Generator().manual_seed(0)
    w, c, bw, bc = (torch.randn(8, 5, generator=g, dtype=torch.float64), torch.randn(8, 5, generator=g, dtype=torch.float64),
                    torch.randn(8, generator=g, dtype=torch.float64), torch.randn(8, generator=g, dtype=torch.float64))
    entries, _ = cooccurrence.read(str(tmp_path))
    i, j, x = (torch.from_numpy(a.astype(np.int64 if k < 2 else np.float64)) for k, a in
               enumerate(cooccurrence.both_ways(np.asarray(entries))))
    _, cost = glove_cost(w, c, bw, bc, i, j, x, x_max=3.0, alpha=0.75)
    expected = glove_by_loops(X, w.numpy(), c.numpy(), bw.numpy(), bc.numpy(), 3.0, 0.75)
    assert float(cost.sum()) == pytest.approx(expected, rel=1e-12)


def test_adagrad_step():
    """One entry: the gradient of f(x) diff^2 / 2, its square added to the sums (which start at 1),
    then lr x gradient / sqrt(sums); a batch sums the gradients of each word first."""
    model = Glove(vocab=4, dim=3, seed=0)
    w, c, bw, bc = model.w.clone(), model.c.clone(), model.bw.clone(), model.bc.clone()
    lr, x = 0.2, 7.0
    fdiff = (x / 10.0) ** 0.75 * float(w[1] @ c[2] + bw[1] + bc[2] - np.log(x))
    model.step(torch.tensor([1]), torch.tensor([2]), torch.tensor([x]), lr, 10.0, 0.75)
    g = fdiff * c[2]
    torch.testing.assert_close(model.sums["w"][1], 1 + g ** 2)
    torch.testing.assert_close(model.w[1], w[1] - lr * g / (1 + g ** 2).sqrt())
    torch.testing.assert_close(model.c[2], c[2] - lr * fdiff * w[1] / (1 + (fdiff * w[1]) ** 2).sqrt())
    torch.testing.assert_close(model.bw[1], bw[1] - lr * fdiff / (1 + fdiff ** 2) ** 0.5)
    torch.testing.assert_close(model.w[0], w[0])  # untouched rows stay
    # two entries of word 1 in one batch: one update with the summed gradient
    model = Glove(vocab=4, dim=3, seed=0)
    f = [min(1, xx / 10.0) ** 0.75 * float(w[1] @ c[jj] + bw[1] + bc[jj] - np.log(xx)) for jj, xx in ((2, 7.0), (3, 20.0))]
    model.step(torch.tensor([1, 1]), torch.tensor([2, 3]), torch.tensor([7.0, 20.0]), lr, 10.0, 0.75)
    g = f[0] * c[2] + f[1] * c[3]
    torch.testing.assert_close(model.w[1], w[1] - lr * g / (1 + g ** 2).sqrt())


def topic_corpus(path, seed=0, lines=400):
    """Two topics: words of one topic only ever share a line with each other."""
    rng = np.random.default_rng(seed)
    topics = [[f"sea{k}" for k in range(6)], [f"sky{k}" for k in range(6)]]
    with open(path, "w") as f:
        for _ in range(lines):
            f.write(" ".join(rng.choice(topics[rng.integers(2)], 8)) + ".\n")


def test_vectors_learn_which_words_share_contexts(tmp_path):
    topic_corpus(tmp_path / "corpus.txt")
    out = str(tmp_path / "vectors.txt")
    # 13 words, each of them frequent: subsampling would drop most of this corpus
    summary = train_word_vectors(str(tmp_path / "corpus.txt"), out,
                                 GloveOptions(dim=8, epochs=30, x_max=10.0, subsample=0), layout="lines", progress=False)
    assert summary["status"] == "done" and summary["words"] == 13  # 12 words and "."
    words, vectors = read_vectors(out)
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    topic = np.array([w[:3] for w in words])
    sims = unit @ unit.T
    same = sims[(topic[:, None] == topic[None]) & (topic[:, None] != ".") & ~np.eye(len(words), dtype=bool)]
    across = sims[(topic[:, None] == "sea") & (topic[None] == "sky")]
    assert same.mean() > 0.9 and same.mean() - across.mean() > 0.5, (same.mean(), across.mean())


def topic_separation(path) -> float:
    """Mean cosine between words of one topic less that between the two topics' words, each topic word's
    vector taken from the topic words' mean (what they all share with "the" taken out): 2 when the
    topics are two opposite points, near 0 when the vectors do not know them."""
    words, vectors = read_vectors(path)
    topic = np.array([w[:3] for w in words])
    vectors = vectors[np.isin(topic, ["sea", "sky"])]
    topic = topic[np.isin(topic, ["sea", "sky"])]
    centred = vectors - vectors.mean(0)
    unit = centred / np.linalg.norm(centred, axis=1, keepdims=True)
    sims = unit @ unit.T
    same = sims[(topic[:, None] == topic[None]) & ~np.eye(len(topic), dtype=bool)]
    return float(same.mean() - sims[topic[:, None] != topic[None]].mean())


def test_subsampling_keeps_each_word_at_its_share(tmp_path):
    # "the" is 3/4 of the words, the others 1/40 each: with t = 0.03, "the" is kept sqrt(0.03 / 0.75)
    # of the time and every other word (below t) always
    units = [["the", "the", "the", f"w{k % 10}"] for k in range(5000)]
    index = {w: k for k, w in enumerate(["the"] + [f"w{k}" for k in range(10)])}
    keep = _kept_share([15000] + [500] * 10, 0.03)
    np.testing.assert_allclose(keep, [np.sqrt(0.03 / 0.75)] + [1.0] * 10)
    assert _kept_share([15000] + [500] * 10, 0) is None  # 0: every word, nothing drawn
    cooccurrence.count(units, index, str(tmp_path / "a"), window=1, keep=keep, seed=3)
    entries, info = cooccurrence.read(str(tmp_path / "a"))
    assert info["words"] == 20000  # the corpus's words, before subsampling
    # with a window of 1 a unit's kept words make one pair fewer than there are (each of weight 1): as every
    # unit keeps its w word, the pairs are the kept "the"s
    kept_the = float(entries["x"].astype(np.float64).sum())
    expected = 15000 * keep[0]
    assert abs(kept_the - expected) < 4 * np.sqrt(15000 * keep[0] * (1 - keep[0])), (kept_the, expected)
    cooccurrence.count(units, index, str(tmp_path / "b"), window=1, keep=keep, seed=3)
    assert np.array_equal(cooccurrence.read(str(tmp_path / "b"))[0], entries)  # the same seed, the same counts


def test_draws_average_towards_the_expected_counts(tmp_path):
    """x t y with t kept half the time and a window of 1: x-t and t-y each occur with t, x-y when t is
    dropped, so each pair's expected count is 1/2; one draw counts each 0 or 1, many draws average."""
    index, keep = {"x": 0, "t": 1, "y": 2}, np.array([1.0, 0.5, 1.0])
    info = cooccurrence.count([["x", "t", "y"]], index, str(tmp_path / "many"), window=1, keep=keep, draws=2000)
    assert (info["words"], info["draws"]) == (3, 2000)  # the corpus's words, read 2000 times
    X = dense(str(tmp_path / "many"), 3)
    np.testing.assert_allclose([X[0, 1], X[1, 2], X[0, 2]], 0.5, atol=0.05)  # 4.5 standard errors
    cooccurrence.count([["x", "t", "y"]], index, str(tmp_path / "one"), window=1, keep=keep)
    assert set(dense(str(tmp_path / "one"), 3)[[0, 1, 0], [1, 2, 2]].tolist()) <= {0.0, 1.0}
    # without subsampling every draw is the same: one pass, the same counts
    units = random_units(1, count=40)
    index = {f"w{k}": k for k in range(30)}
    cooccurrence.count(units, index, str(tmp_path / "all"), window=3, draws=5)
    assert cooccurrence.read(str(tmp_path / "all"))[1]["draws"] == 1
    np.testing.assert_allclose(dense(str(tmp_path / "all"), 30), direct_counts(units, index, 3), rtol=1e-6)
    with pytest.raises(BertforgeError, match="re-iterable"):
        cooccurrence.count(iter(units), index, str(tmp_path / "gen"), keep=np.full(30, 0.5), draws=2)


def test_subsampling_lets_the_window_reach_past_frequent_words(tmp_path):
    """Every topic word is followed by "the": with a window of 1 the topics share no pair, and only
    subsampling "the" away (it is half the corpus; each topic word 1/24) brings them together."""
    rng = np.random.default_rng(0)
    topics = [[f"sea{k}" for k in range(6)], [f"sky{k}" for k in range(6)]]
    with open(tmp_path / "corpus.txt", "w") as f:
        for _ in range(400):
            f.write(" ".join(f"{w} the" for w in rng.choice(topics[rng.integers(2)], 8)) + "\n")
    separation = {}
    for t in (0.0, 0.05):
        out = str(tmp_path / f"v{t}.txt")
        train_word_vectors(str(tmp_path / "corpus.txt"), out, GloveOptions(dim=8, epochs=30, window=1, subsample=t),
                           layout="lines", progress=False)
        separation[t] = topic_separation(out)
    assert separation[0.05] > 1.5 and separation[0.0] < 0.5, separation


def test_resume_equals_an_uninterrupted_run(tmp_path):
    topic_corpus(tmp_path / "corpus.txt")
    options = dict(dim=6, epochs=4, batch_size=16, x_max=10.0)
    whole = str(tmp_path / "whole.txt")
    train_word_vectors(str(tmp_path / "corpus.txt"), whole, GloveOptions(**options), progress=False)
    parts = str(tmp_path / "parts.txt")
    first = train_word_vectors(str(tmp_path / "corpus.txt"), parts, GloveOptions(**options, max_minutes=1e-9),
                               progress=False)
    assert first["status"] == "time budget" and first["epochs"] == 0  # stopped after its first batch
    with pytest.raises(BertforgeError, match="--resume"):
        train_word_vectors(str(tmp_path / "corpus.txt"), parts, GloveOptions(**options), progress=False)
    with pytest.raises(BertforgeError, match="window"):
        train_word_vectors(str(tmp_path / "corpus.txt"), parts, GloveOptions(**options, window=3), resume=True,
                           progress=False)
    with pytest.raises(BertforgeError, match="draws"):
        train_word_vectors(str(tmp_path / "corpus.txt"), parts, GloveOptions(**options, draws=2), resume=True,
                           progress=False)
    settings = tmp_path / "parts.txt.run" / "settings.json"
    saved = json.loads(settings.read_text())
    del saved["draws"]  # a run started before --draws resumes as the one draw it counted
    settings.write_text(json.dumps(saved))
    again = train_word_vectors(str(tmp_path / "corpus.txt"), parts, GloveOptions(**options), resume=True,
                               progress=False)
    assert again["status"] == "done" and again["epochs"] == 4
    np.testing.assert_array_equal(read_vectors(parts)[1], read_vectors(whole)[1])


def test_the_word_vectors_alone_are_w_of_the_same_fit(tmp_path, capsys):
    """--vectors word writes w (GloVe's -model 1), the default w + c (-model 2); resuming a finished
    run with the other choice trains nothing and writes the other vectors of the same fit."""
    from safetensors.numpy import load_file

    topic_corpus(tmp_path / "corpus.txt")
    corpus, out = str(tmp_path / "corpus.txt"), str(tmp_path / "v.txt")
    options = dict(dim=6, epochs=3, batch_size=16)
    train_word_vectors(corpus, out, GloveOptions(**options), progress=False)
    state = load_file(os.path.join(out + ".run", "state.safetensors"))
    text = dict(rtol=0, atol=1e-6)  # GloVe's text format holds 6 decimals
    np.testing.assert_allclose(read_vectors(out)[1], state["w"] + state["c"], **text)
    again = train_word_vectors(corpus, out, GloveOptions(**options, vectors="word"), resume=True, progress=False)
    assert again["epochs"] == 3 and again["status"] == "done"
    np.testing.assert_allclose(read_vectors(out)[1], state["w"], **text)
    np.testing.assert_array_equal(load_file(os.path.join(out + ".run", "state.safetensors"))["w"], state["w"])
    with pytest.raises(BertforgeError, match="--vectors must be one of sum, word, got 'context'"):
        GloveOptions(vectors="context")
    with pytest.raises(SystemExit) as stopped:  # argparse's own error for a value outside the choices
        main(["word-vectors", "--corpus", corpus, "--output", str(tmp_path / "w.txt"), "--vectors", "both"])
    assert stopped.value.code == 2 and "invalid choice: 'both'" in capsys.readouterr().err


def test_all_but_the_top_takes_away_the_mean_and_the_dominant_directions():
    """Ten pairs of words that mean the same, each word's vector also carrying a large common vector
    and a multiple of one direction that grows with its frequency (as trained vectors do, Mu & Viswanath
    2018): by cosine a word's nearest word is then one of like frequency; with the mean and that
    direction taken away, its pair."""
    rng = np.random.default_rng(0)
    meaning = np.repeat(rng.standard_normal((10, 20)), 2, axis=0) + 0.1 * rng.standard_normal((20, 20))
    frequency = rng.permutation(20) - 9.5  # no two words alike
    common, shared = (v / np.linalg.norm(v) for v in rng.standard_normal((2, 20)))
    vectors = (30 * common + meaning + np.outer(5 * frequency, shared)).astype(np.float32)

    def pairs_found(v):
        unit = v / np.linalg.norm(v, axis=1, keepdims=True)
        sims = unit @ unit.T - 2 * np.eye(len(v))
        return float(np.mean(sims.argmax(1) // 2 == np.arange(len(v)) // 2))

    assert all_but_the_top(vectors, 0) is vectors  # 0 writes the fit as it is
    cleaned = all_but_the_top(vectors, 1)
    assert pairs_found(vectors) < 0.3 and pairs_found(cleaned) == 1.0
    assert pairs_found(vectors - vectors.mean(0)) < 0.5  # the mean alone is not what hides them
    # exactly the definition: centred, nothing left along the top principal directions, the rest untouched
    for count in (1, 3):
        out = all_but_the_top(vectors, count)
        assert out.dtype == np.float32  # written as the fit's own precision
        out = out.astype(np.float64)
        centred = vectors - vectors.astype(np.float64).mean(0)
        top = np.linalg.svd(centred, full_matrices=False)[2][:count]
        assert abs(out.mean(0)).max() < 1e-5 and abs(out @ top.T).max() < 1e-4
        rest = np.eye(20) - top.T @ top
        np.testing.assert_allclose(out @ rest, centred @ rest, atol=1e-4)
    assert abs(np.linalg.svd(vectors - vectors.mean(0))[2][0] @ shared) > 0.99  # the direction found is frequency's


def test_the_directions_removed_from_what_is_written(tmp_path, capsys):
    """--remove-directions changes the vectors written, never the fit: resuming a finished run with
    another count trains nothing and writes the fit's vectors cleaned by that count."""
    from safetensors.numpy import load_file

    topic_corpus(tmp_path / "corpus.txt")
    corpus, out = str(tmp_path / "corpus.txt"), str(tmp_path / "v.txt")
    options = dict(dim=6, epochs=3, batch_size=16)
    train_word_vectors(corpus, out, GloveOptions(**options, remove_directions=2), progress=False)
    state = load_file(os.path.join(out + ".run", "state.safetensors"))
    text = dict(rtol=0, atol=2e-6)  # GloVe's text format holds 6 decimals
    np.testing.assert_allclose(read_vectors(out)[1], all_but_the_top(state["w"] + state["c"], 2), **text)
    again = train_word_vectors(corpus, out, GloveOptions(**options), resume=True, progress=False)
    assert again["epochs"] == 3 and again["status"] == "done"
    np.testing.assert_allclose(read_vectors(out)[1], state["w"] + state["c"], **text)
    train_word_vectors(corpus, out, GloveOptions(**options, vectors="word", remove_directions=1), resume=True,
                       progress=False)  # the benchmark's recipe: the word vectors alone, one direction removed
    np.testing.assert_allclose(read_vectors(out)[1], all_but_the_top(state["w"], 1), **text)
    with pytest.raises(BertforgeError, match=r"--remove-directions must be below --dim \(6\), got 6"):
        GloveOptions(**options, remove_directions=6)
    assert main(["word-vectors", "--corpus", corpus, "--output", str(tmp_path / "w.txt"),
                 "--remove-directions", "-1"]) == 2
    err = capsys.readouterr().err
    assert "--remove-directions must be an integer >= 0, got -1" in err and "Traceback" not in err


@pytest.mark.parametrize("name", ["v.txt", "v.vec", "v.bin"])
def test_formats_round_trip(tmp_path, name):
    words = ["the", "naïve", "café", "x"]
    vectors = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
    write_vectors(str(tmp_path / name), words, vectors)
    got_words, got = read_vectors(str(tmp_path / name))
    assert got_words == words
    np.testing.assert_allclose(got, vectors, atol=5e-7 if name != "v.bin" else 0)
    assert read_vectors(str(tmp_path / name), limit=2)[0] == words[:2]


def test_formats_load_in_gensim_and_back(tmp_path):
    gensim = pytest.importorskip("gensim", reason="gensim (the test extra) reads word2vec files")
    words, vectors = ["a", "b", "c"], np.eye(3, 4, dtype=np.float32)
    write_vectors(str(tmp_path / "v.bin"), words, vectors)
    kv = gensim.models.KeyedVectors.load_word2vec_format(str(tmp_path / "v.bin"), binary=True)
    np.testing.assert_array_equal(kv["b"], vectors[1])
    kv.save_word2vec_format(str(tmp_path / "g.vec"))
    kv.save_word2vec_format(str(tmp_path / "g.bin"), binary=True)
    for path in ("g.vec", "g.bin"):
        assert read_vectors(str(tmp_path / path))[0] == words
        np.testing.assert_allclose(read_vectors(str(tmp_path / path))[1], vectors)


def test_a_word_with_spaces_as_in_glove_840b(tmp_path):
    (tmp_path / "v.txt").write_text("the 0.1 0.2\n. . . 0.3 0.4\n")
    words, vectors = read_vectors(str(tmp_path / "v.txt"))
    assert words == ["the", ". . ."]
    np.testing.assert_allclose(vectors, [[0.1, 0.2], [0.3, 0.4]], rtol=1e-6)


@pytest.mark.parametrize("content, message", [
    (b"the 0.1 0.2\nof 0.3\n", "v.txt:2: expected a word and 2 numbers"),
    (b"the 0.1 0.2\nof 0.3 abc\n", "v.txt:2: not a number"),
    (b"the 0.1 0.2\n\xff\xfe 0.3 0.4\n", "v.txt:2: not UTF-8"),
    (b"", "v.txt: no vectors"),
])
def test_bad_vector_files_name_the_line(tmp_path, content, message):
    (tmp_path / "v.txt").write_bytes(content)
    with pytest.raises(BertforgeError, match=message):
        read_vectors(str(tmp_path / "v.txt"))


def test_truncated_binary_file(tmp_path):
    write_vectors(str(tmp_path / "v.bin"), ["a", "b"], np.ones((2, 3)))
    data = (tmp_path / "v.bin").read_bytes()
    (tmp_path / "v.bin").write_bytes(data[:-6])
    with pytest.raises(BertforgeError, match="at least 28 bytes, but the file holds 24 after it: a truncated file"):
        read_vectors(str(tmp_path / "v.bin"))  # said from its size, before any row is read
    write_vectors(str(tmp_path / "v.bin"), ["a", "bbbbbbbb"], np.ones((2, 3)))  # longer than the least it may be
    (tmp_path / "v.bin").write_bytes((tmp_path / "v.bin").read_bytes()[:-6])
    with pytest.raises(BertforgeError, match="ends inside vector 2 of 2"):
        read_vectors(str(tmp_path / "v.bin"))


def test_the_vectors_never_overwrite_the_corpus(tmp_path):
    topic_corpus(tmp_path / "corpus.txt", lines=50)
    before = (tmp_path / "corpus.txt").read_bytes()
    with pytest.raises(BertforgeError, match="is the input"):
        train_word_vectors(str(tmp_path / "corpus.txt"), str(tmp_path / "corpus.txt"), GloveOptions(dim=4, epochs=1),
                           progress=False)
    assert (tmp_path / "corpus.txt").read_bytes() == before and not (tmp_path / "corpus.txt.run").exists()


def test_command_line(tmp_path, capsys):
    topic_corpus(tmp_path / "corpus.txt", lines=50)
    out = str(tmp_path / "v.vec")
    assert main(["word-vectors", "--corpus", str(tmp_path / "corpus.txt"), "--output", out, "--dim", "4",
                 "--epochs", "2", "--min-count", "2"]) == 0
    first = capsys.readouterr().out
    assert "13 words" in first
    with open(out) as f:
        assert f.readline() == "13 4\n"
    assert main(["word-vectors", "--corpus", str(tmp_path / "corpus.txt"), "--output", out]) == 2
    assert "--resume" in capsys.readouterr().err
    assert main(["word-vectors", "--corpus", str(tmp_path / "none"), "--output", str(tmp_path / "w.txt")]) == 2
    assert main(["word-vectors", "--corpus", str(tmp_path / "corpus.txt"), "--output", str(tmp_path / "w.txt"),
                 "--window", "0"]) == 2
    err = capsys.readouterr().err
    assert "--window must be an integer >= 1, got 0" in err and "Traceback" not in err
    assert main(["word-vectors", "--corpus", str(tmp_path / "corpus.txt"), "--output", str(tmp_path / "w.txt"),
                 "--subsample", "1"]) == 2
    assert "--subsample must be" in capsys.readouterr().err
    # draws read the corpus again, and count it once in what is reported
    assert main(["word-vectors", "--corpus", str(tmp_path / "corpus.txt"), "--output", str(tmp_path / "d.txt"),
                 "--dim", "4", "--epochs", "1", "--min-count", "2", "--subsample", "0.01", "--draws", "3"]) == 0
    text_words = first.split(" words of text")[0].rsplit(" ", 1)[1]
    assert f"from {text_words} words of text" in capsys.readouterr().out
    with open(tmp_path / "d.txt.run" / "cooccurrence.json") as f:
        assert '"draws": 3' in f.read()


def test_scores_equal_gensims():
    gensim = pytest.importorskip("gensim", reason="gensim (the test extra) is the reference and ships the test sets")
    from gensim.test.utils import datapath

    from bertforge import vector_scores

    pairs = vector_scores.read_pairs(datapath("wordsim353.tsv"))
    sections = vector_scores.read_questions(datapath("questions-words.txt"))
    words = sorted({w.lower() for a, b, _ in pairs for w in (a, b)}
                   | {w.lower() for _, questions in sections for q in questions[:30] for w in q})
    # 3 dimensions: enough near misses and hits that a different rule would give a different count
    vectors = np.random.default_rng(0).standard_normal((len(words), 3)).astype(np.float32)
    kv = gensim.models.KeyedVectors(3)
    kv.add_vectors(words, vectors)
    ours = vector_scores.word_similarity(words, vectors, pairs)
    assert ours["spearman"] == pytest.approx(kv.evaluate_word_pairs(datapath("wordsim353.tsv"))[1].statistic, abs=1e-6)
    ours = vector_scores.analogies(words, vectors, sections, restrict=500)
    total, theirs = kv.evaluate_word_analogies(datapath("questions-words.txt"), restrict_vocab=500)
    assert ours["accuracy"] == total and ours["answered"] > 100 and 0 < ours["accuracy"] < 1
    for section in theirs[:-1]:
        assert ours["sections"][section["section"]]["correct"] == len(section["correct"])


def test_the_benchmarks_quoted_commands_parse():
    import shlex
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))
    import word_vectors as bench

    prefix = "python benchmarks/word_vectors.py "
    commands = [shlex.split(line.strip()[len(prefix):]) for line in bench.__doc__.splitlines()
                if line.strip().startswith(prefix)]
    parsed = [bench.build_parser().parse_args(c) for c in commands]
    assert len(parsed) == 6 and (parsed[1].dim, parsed[1].epochs) == (100, 10) and parsed[5].quick
    assert (parsed[0].epochs, parsed[0].subsample, parsed[0].draws) == (8, 1e-3, 1)
    assert (parsed[2].subsample, parsed[2].best) == (0, False)
    assert (parsed[3].subsample, parsed[3].draws, parsed[3].epochs, parsed[3].remove_directions) == (2e-4, 4, 4, 0)
    assert (parsed[4].draws, parsed[4].remove_directions, parsed[4].out) == (4, 1, "runs/wv-abtt-s0")
