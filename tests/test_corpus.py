"""Corpus reading (messy real-world files) and token shards (round trip, cache, bounded chunks)."""

import gzip
import json
import os

import numpy as np
import pytest
from conftest import write_corpus

from bertforge import BertforgeError, Tokenizer
from bertforge.data import corpus as corpus_module
from bertforge.data.corpus import FileReport, find_files, read_units, split_sentences
from bertforge.data.shards import build_shards


def units(path, layout="auto"):
    report = FileReport(str(path))
    return list(read_units(str(path), report, layout)), report


def test_bom_crlf_and_legacy_bytes_are_repaired_and_reported(tmp_path):
    path = tmp_path / "messy.txt"
    path.write_bytes(b"\xef\xbb\xbfFirst sentence here.\r\nA caf\xe9 in Paris.\r\n\r\nNew document.\r\n")
    found, report = units(path)
    assert [u[1] for u in found] == ["First sentence here.", "A café in Paris.", "New document."]
    assert [u[0] for u in found] == [True, False, True]
    assert report.layout == "lines" and report.documents == 2
    assert report.repairs == {"byte-order mark removed": 1, "Windows line ends": 4,
                              "lines not UTF-8, decoded as cp1252": 1}
    assert "repaired: byte-order mark removed" in report.summary()


def test_prose_paragraphs_are_joined_and_split_into_sentences(tmp_path):
    path = tmp_path / "book.txt"
    path.write_text("It was a dark night. The wind\nhowled over the moor, and Mr. Holmes\nwaited.\n\n"
                    "He spoke at last:\n\"Watson, come here!\" Nobody came.\n")
    found, report = units(path)
    assert report.layout == "prose" and report.documents == 1 and report.paragraphs == 2
    sentences = [s for _, text, is_paragraph in found for s in split_sentences(text)]
    assert sentences == ["It was a dark night.", "The wind howled over the moor, and Mr. Holmes waited.",
                         'He spoke at last: "Watson, come here!"', "Nobody came."]


def test_sentence_rules():
    assert split_sentences("Dr. J. Watson arrived. Then he left... Was it late? yes, very.") == [
        "Dr. J. Watson arrived.", "Then he left...", "Was it late? yes, very."]
    assert split_sentences("北京很大。上海也很大！好吗？") == ["北京很大。", "上海也很大！", "好吗？"]
    assert split_sentences("No boundary at all") == ["No boundary at all"]
    long = " ".join(["word"] * 5000)
    pieces = split_sentences(long)
    assert len(pieces) == 3 and all(len(p) <= corpus_module.MAX_SENTENCE_CHARS for p in pieces)
    assert " ".join(pieces) == long


def test_gutenberg_boilerplate_is_removed(tmp_path):
    path = tmp_path / "pg1.txt"
    path.write_text("The Project Gutenberg eBook of Something\nLicence words.\n"
                    "*** START OF THE PROJECT GUTENBERG EBOOK SOMETHING ***\n\nChapter one begins here.\n"
                    "It goes on.\n\n*** END OF THE PROJECT GUTENBERG EBOOK SOMETHING ***\nMore licence.\n")
    found, report = units(path, layout="prose")
    text = " ".join(u[1] for u in found)
    assert text == "Chapter one begins here. It goes on."
    assert "Project Gutenberg header removed" in report.repairs
    assert "Project Gutenberg licence removed" in report.repairs


def test_jsonl_gzip_and_errors_with_line_numbers(tmp_path):
    path = tmp_path / "docs.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write(json.dumps({"body": "One. Two.\n\nThree."}) + "\n\n" + json.dumps({"body": "   "}) + "\n")
        f.write(json.dumps({"body": "Four."}) + "\n")
    report = FileReport(str(path))
    found = list(read_units(str(path), report, text_field="body"))
    assert [(u[0], u[1]) for u in found] == [(True, "One. Two."), (False, "Three."), (True, "Four.")]
    assert report.repairs == {"empty document skipped": 1}
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{"text": oops}\n')
    with pytest.raises(BertforgeError, match=r"bad.jsonl, line 2: not valid JSON"):
        list(read_units(str(bad), FileReport(str(bad))))
    bad.write_text('{"text": "fine"}\n{"other": "x"}\n')
    with pytest.raises(BertforgeError, match=r"bad.jsonl, line 2: no 'text' field"):
        list(read_units(str(bad), FileReport(str(bad))))


def test_binary_utf16_and_missing_files_are_refused(tmp_path):
    (tmp_path / "blob.txt").write_bytes(bytes(range(256)) * 4)
    with pytest.raises(BertforgeError, match="blob.txt, line 1: a binary file"):
        units(tmp_path / "blob.txt")
    (tmp_path / "wide.txt").write_bytes("hello".encode("utf-16"))
    with pytest.raises(BertforgeError, match="wide.txt: UTF-16 text"):
        units(tmp_path / "wide.txt")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.pdf").write_bytes(b"%PDF")
    with pytest.raises(BertforgeError, match="empty: no text files in this folder"):
        find_files(str(tmp_path / "empty"))
    with pytest.raises(BertforgeError, match="nothing-here/\\*.txt: no such file, folder or matching files"):
        find_files(str(tmp_path / "nothing-here" / "*.txt"))


def test_find_files_expands_folders_and_globs(tmp_path):
    for name in ("a.txt", "sub/b.txt", "sub/c.jsonl", "sub/d.txt.gz", "skip.md"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    assert [os.path.relpath(p, tmp_path) for p in find_files(str(tmp_path))] == [
        "a.txt", "sub/b.txt", "sub/c.jsonl", "sub/d.txt.gz"]
    assert [os.path.basename(p) for p in find_files([str(tmp_path / "sub" / "*.txt"), str(tmp_path / "a.txt")])] == [
        "b.txt", "a.txt"]


def test_very_long_lines_are_read_in_pieces(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus_module, "MAX_LINE_BYTES", 64)
    path = tmp_path / "long.txt"
    line = "ünïcode " * 40  # multi-byte characters straddle the 64-byte pieces
    path.write_text(line.strip() + ".\n")
    report = FileReport(str(path))
    text = "".join(corpus_module.read_lines(str(path), report))
    assert text == line.strip() + "."
    assert report.repairs["very long line split"] >= 4


# ---- shards ---------------------------------------------------------------------------------------


@pytest.fixture
def small_tokenizer():
    return Tokenizer.train(texts=["alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu ."] * 10,
                           vocab_size=60, min_frequency=1)


def test_shards_round_trip_documents_and_sentences(tmp_path, small_tokenizer, monkeypatch):
    import bertforge.data.shards as shards_module

    monkeypatch.setattr(shards_module, "CHUNK_CHARS", 200)  # many chunks, so order and carry-over matter
    docs = write_corpus(tmp_path / "corpus")
    shards = build_shards(str(tmp_path / "corpus"), small_tokenizer, cache_dir=str(tmp_path / "cache"),
                          workers=2, progress=False)
    assert shards.tokens.dtype == np.uint16
    assert shards.num_documents == len(docs)
    for d, doc in enumerate(docs):
        got = [list(s) for s in shards.document(d)]
        assert got == [small_tokenizer.encode(s, add_special_tokens=False).ids for s in doc]
    assert shards.meta["num_sentences"] == sum(len(doc) for doc in docs)


def test_shards_are_cached_and_rebuilt_when_the_corpus_changes(tmp_path, small_tokenizer):
    write_corpus(tmp_path / "corpus")
    first = build_shards(str(tmp_path / "corpus"), small_tokenizer, cache_dir=str(tmp_path / "cache"), progress=False)
    stamp = os.path.getmtime(os.path.join(first.directory, "tokens.bin"))
    again = build_shards(str(tmp_path / "corpus"), small_tokenizer, cache_dir=str(tmp_path / "cache"), progress=False)
    assert again.directory == first.directory
    assert os.path.getmtime(os.path.join(again.directory, "tokens.bin")) == stamp
    with open(tmp_path / "corpus" / "one.txt", "a") as f:
        f.write("\nmu mu mu.\n")
    changed = build_shards(str(tmp_path / "corpus"), small_tokenizer, cache_dir=str(tmp_path / "cache"), progress=False)
    assert changed.directory != first.directory


def test_an_empty_corpus_is_an_error_and_leaves_no_cache(tmp_path, small_tokenizer):
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "blank.txt").write_text("\n\n   \n")
    with pytest.raises(BertforgeError, match="blank.txt: no text found"):
        build_shards(str(tmp_path / "corpus"), small_tokenizer, cache_dir=str(tmp_path / "cache"), progress=False)
    assert os.listdir(tmp_path / "cache" / "shards") == []


WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()


def write_books(directory, n_books=5, sentences=800, seed=0):
    """`n_books` made-up novels, one file each, in paragraphs of five sentences (prose: a file is one document)."""
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True, exist_ok=True)
    for b in range(n_books):
        lines = [" ".join(rng.choice(WORDS, size=int(rng.integers(6, 15)))).capitalize() + "."
                 for _ in range(sentences)]
        paragraphs = [" ".join(lines[i:i + 5]) for i in range(0, sentences, 5)]
        (directory / f"book{b}.txt").write_text("\n\n".join(paragraphs) + "\n")


def piece_ranges(shards, pieces):
    """The token range [start, end) of each document of the view `shards`."""
    bounds = np.asarray(shards.documents)
    return [(int(shards.sentences[bounds[p]]), int(shards.sentences[bounds[p + 1]])) for p in pieces]


def inside(ranges, start, end):
    return any(a <= start and end <= b for a, b in ranges)


@pytest.mark.parametrize("terms", [("mlm", "nsp"), ("mlm",)])
def test_five_books_hold_out_their_ends_and_train_on_the_rest(tmp_path, small_tokenizer, terms):
    """Holding out whole documents would keep two of five books (40% of the text) from training;
    the end of each is held out instead, about 2% of it, cut at a sentence, and no training
    instance (sentence pair or packed row) reaches into it."""
    from bertforge.data.batches import PretrainingData
    from bertforge.data.held_out import describe
    from bertforge.data.instances import A_END, A_START, B_END, B_START

    write_books(tmp_path / "books")
    shards = build_shards(str(tmp_path / "books"), small_tokenizer, cache_dir=str(tmp_path / "cache"),
                          layout="prose", workers=1, progress=False)
    assert shards.num_documents == 5
    data = PretrainingData(shards, small_tokenizer, 8, max_seq_length=32, terms=terms)
    view = data.shards
    train, held = piece_ranges(view, data.train_documents), piece_ranges(view, data.eval_documents)
    train_tokens, held_tokens = sum(b - a for a, b in train), sum(b - a for a, b in held)
    assert train_tokens + held_tokens == shards.num_tokens
    assert train_tokens >= 0.97 * shards.num_tokens and held_tokens >= 0.015 * shards.num_tokens
    assert len(train) == len(held) == 5  # each book: its start to train on, its end held out
    for (a, b), (c, d) in zip(train, held):
        assert b == c and c in set(np.asarray(shards.sentences).tolist())  # contiguous, cut at a sentence start
    facts = data.split_facts()
    assert facts["train_documents"] == 5 and facts["eval_documents"] == 0
    sentences = facts["held_out"]["sentences"]
    assert 70 <= sentences <= 90  # 2% of 4,000 sentences
    share = facts["held_out"]["share"]
    assert share == pytest.approx(held_tokens / shards.num_tokens, abs=1e-4)
    assert describe(facts["held_out"]) == \
        f"held out for evaluation: {100 * share:.1f}% of the text ({sentences} sentences from the ends of 5 documents)"

    instances, pieces = data.epoch_instances(0)
    if pieces is None:  # sentence pairs: both segments in the training text
        for row in instances:
            assert inside(train, row[A_START], row[A_END]) and inside(train, row[B_START], row[B_END])
        evaluated, _ = data._instances(data.eval_documents, np.random.default_rng(0))
        assert len(evaluated) and all(inside(held, r[A_START], r[A_END]) and inside(held, r[B_START], r[B_END])
                                      for r in evaluated)
    else:  # packed rows: every piece in the training text
        assert all(inside(train, start, end) for start, end, _ in pieces)
    assert next(data.eval_batches(1), None) is not None


def test_many_small_documents_hold_out_whole_ones_as_before():
    from bertforge.data.held_out import hold_out

    sizes = np.full(1000, 50)
    split = hold_out(sizes, 0.02, seed=0, boundaries=lambda d: np.array([0, 20, 50]))
    held = np.flatnonzero(split.cuts == 0)
    assert split.whole and len(held) == 20 and split.share == 0.02
    # the documents the split by document counts chose (a seeded permutation's first 2%)
    assert held.tolist() == sorted(np.random.default_rng([0, 7]).permutation(1000)[:20].tolist())
    assert np.all(split.cuts[split.cuts > 0] == 50)  # the rest whole to train on
    # a few long documents among many small ones are never held out whole
    sizes = np.concatenate([np.full(2000, 10), [20_000, 30_000]])
    split = hold_out(sizes, 0.02, seed=1, boundaries=lambda d: np.arange(sizes[d] + 1))
    assert split.whole and np.all(split.cuts[-2:] == sizes[-2:]) and 0.0175 <= split.share <= 0.0225


def test_few_short_documents_hold_out_ends_that_add_up_to_the_share():
    import warnings

    from bertforge.data.held_out import hold_out

    # Ten documents of thirty 10-token sentences: one is 10% of the text, too much to hold out whole.
    sizes = np.full(10, 300)
    split = hold_out(sizes, 0.02, seed=0, boundaries=lambda d: np.arange(0, 301, 10))
    assert not split.whole and split.held == 60 and split.share == 0.02 and split.eval_documents == 0
    # the two last sentences of three documents (a stretch of at least a quarter of the share each)
    assert sorted(split.cuts.tolist()) == [280] * 3 + [300] * 7 and split.train_documents == 10
    # forty documents of 2.5% each: two whole ones (5%), as the split by documents held out
    split = hold_out(np.full(40, 61), 0.02, seed=0, boundaries=lambda d: np.arange(62))
    assert split.whole and split.held == 122 and split.eval_documents == 2
    # twelve one-sentence documents: 2% is less than a sentence; the two shortest are held out
    sizes12 = np.array([40, 35, 42, 38, 41, 36, 39, 40, 37, 44, 33, 40])
    split = hold_out(sizes12, 0.02, seed=0, boundaries=lambda d: np.array([0, sizes12[d]]))
    assert split.held == 33 + 35 and split.eval_documents == 2 and split.train_documents == 10
    with warnings.catch_warnings(record=True) as caught:  # three sentences: nothing to hold out
        warnings.simplefilter("always")
        split = hold_out(np.array([10, 10, 10]), 0.02, seed=0, boundaries=lambda d: np.array([0, 10]))
    assert split.held == 0 and "no held-out evaluation" in str(caught[0].message)
    assert hold_out(sizes, 0.0, seed=0, boundaries=lambda d: np.array([0, 300])).held == 0


@pytest.mark.parametrize("backwards", [False, True])
def test_word_streams_of_five_books_hold_out_their_ends(backwards):
    """A recurrent language model's streams: the last ~2% of each book's words, cut after a
    sentence's end, the same text whichever way the model reads."""
    from bertforge.data.streams import LMStreams

    rng = np.random.default_rng(0)
    end = 1
    books = [np.concatenate([np.append(rng.integers(5, 50, size=int(rng.integers(6, 15))), end) for _ in range(800)])
             for _ in range(5)]
    data = LMStreams(books, batch_size=4, bptt=20, eval_fraction=0.02, backwards=backwards, sentence_ends=(end,))
    train, held = sum(len(d) for d in data.train_documents), sum(len(d) for d in data.eval_documents)
    assert train + held == sum(len(b) for b in books) and 0.975 <= train / (train + held) <= 0.985
    assert len(data.train_documents) == len(data.eval_documents) == 5
    for book, start, tail in zip(books, data.train_documents, data.eval_documents):
        start, tail = (start[::-1], tail[::-1]) if backwards else (start, tail)
        assert np.array_equal(np.concatenate([start, tail]), book) and start[-1] == end
    facts = data.split_facts()
    assert facts["train_documents"] == 5 and facts["held_out"]["words"] == held


def test_the_run_says_what_it_holds_out(tmp_path):
    import torch
    from conftest import tiny_config

    from bertforge.families.bert.objectives import BertPretraining
    from bertforge.training.trainer import TrainOptions, header

    model, options = BertPretraining(tiny_config()), TrainOptions(out=str(tmp_path), steps=4)
    held = {"share": 0.049, "tokens": 61_900, "sentences": 1234, "whole_documents": 0, "ended_documents": 5}
    text = header(model, {"train_documents": 5, "eval_documents": 0, "held_out": held}, options,
                  torch.device("cpu"), "fp32", 1)
    assert "data: 5 documents to train on; held out for evaluation: 4.9% of the text (1,234 sentences from the " \
           "ends of 5 documents), never trained on" in text
    held = {"share": 0.0, "words": 0, "whole_documents": 0, "ended_documents": 0}
    text = header(model, {"train_documents": 3, "eval_documents": 0, "held_out": held}, options,
                  torch.device("cpu"), "fp32", 1)
    assert "data: 3 documents to train on; nothing held out for evaluation\n" in text


def test_a_run_made_before_the_split_inside_documents_is_not_resumed_on_other_text():
    """A run_config.json without `held_out` held out whole documents only: resuming it with this split
    would move text between its training and its evaluation, so it is refused in one line; a run
    that held nothing out, or one made with this split, resumes."""
    from bertforge.data.held_out import check_resumable
    from bertforge.errors import BertforgeError

    with pytest.raises(BertforgeError, match="runs/old: a run made before held-out text was cut inside documents "
                                             r"\(it held out 2 whole document\(s\)\)"):
        check_resumable("runs/old", {"eval_fraction": 0.02, "eval_documents": 2})
    check_resumable("runs/old", {"eval_fraction": 0.0, "eval_documents": 0})
    check_resumable("runs/new", {"eval_fraction": 0.02, "eval_documents": 0, "held_out": {"share": 0.02}})
