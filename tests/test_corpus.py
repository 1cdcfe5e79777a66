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


def test_held_out_documents_are_at_least_two():
    import warnings

    from bertforge.data.batches import split_documents

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        train, held = split_documents(3, 0.02, seed=0)
    assert len(held) == 0 and len(train) == 3 and "no held-out evaluation" in str(caught[0].message)
    for n, expected in ((4, 2), (50, 2), (100, 2), (1000, 20)):
        train, held = split_documents(n, 0.02, seed=0)
        assert len(held) == expected and len(train) == n - expected
        assert not set(train) & set(held)
