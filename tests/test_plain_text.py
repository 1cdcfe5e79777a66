"""Plain text, one text per line, for every command that reads texts (predict, embed, fill-mask),
answers on standard output when no --output is named, and how a file's layout is told apart."""

import io
import json

import numpy as np
import pytest
from conftest import TEXTS

from bertforge import BertforgeError, Predictor
from bertforge.cli import main
from bertforge.embed import Embedder
from bertforge.fill_mask import FillMask
from bertforge.load import load_finetuned
from bertforge.tasks.common import plain_text, read_inputs

CONLL = "john B-PER\nlives O\nin O\nparis B-LOC\n\nmary B-PER\nwent O\nto O\nlondon B-LOC\n"


def out_lines(capsys) -> list[dict]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_a_classifier_predicts_on_a_plain_text_file(models, tmp_path, capsys):
    answers = Predictor.from_pretrained(models["sst2"])(TEXTS[:4])
    expected = [{k: a[k] for k in ("text", "label", "probabilities")} for a in answers]
    (tmp_path / "texts.txt").write_text("\n".join(TEXTS[:2]) + "\n\n" + "\n".join(TEXTS[2:4]) + "\n")
    (tmp_path / "texts").write_text("\r\n".join(TEXTS[:4]))  # any name, Windows line ends, no last newline
    (tmp_path / "table.txt").write_text("sentence\tlabel\n" + "".join(f"{t}\t0\n" for t in TEXTS[:4]))  # a header
    for name in ("texts.txt", "texts", "table.txt"):
        capsys.readouterr()
        assert main(["predict", "--model", models["sst2"], "--input", str(tmp_path / name)]) == 0
        got = out_lines(capsys)
        assert [{k: g[k] for k in ("text", "label", "probabilities")} for g in got] == expected, name
    _, task, _ = load_finetuned(models["sst2"])
    assert [e["where"] for e in read_inputs(task, str(tmp_path / "texts.txt"))] == \
        [f"{tmp_path / 'texts.txt'}, line {n}" for n in (1, 2, 4, 5)]  # the file's own line numbers
    # a .tsv is always the task's table: its first line is the header, and it must name the column
    (tmp_path / "texts.tsv").write_text("\n".join(TEXTS[:4]) + "\n")
    assert main(["predict", "--model", models["sst2"], "--input", str(tmp_path / "texts.tsv")]) == 2
    assert "texts.tsv, line 2: no column 'sentence'" in capsys.readouterr().err


def test_a_tagger_predicts_on_plain_text_and_still_reads_conll(models, tmp_path, capsys):
    (tmp_path / "train.txt").write_text(CONLL)
    (tmp_path / "words.txt").write_text("john\nlives\nin\nparis\n\nmary\nwent\nto\nlondon\n")  # CoNLL, words only
    (tmp_path / "plain.txt").write_text("john lives in paris\nmary  went to london\n")
    (tmp_path / "one.txt").write_text("john lives in paris")
    tagged = {}
    for name in ("train.txt", "words.txt", "plain.txt", "one.txt"):
        capsys.readouterr()
        assert main(["predict", "--model", models["ner"], "--input", str(tmp_path / name)]) == 0
        tagged[name] = [(g["words"], g["tags"]) for g in out_lines(capsys)]
    assert tagged["train.txt"] == tagged["words.txt"] == tagged["plain.txt"]
    assert [w for w, _ in tagged["plain.txt"]] == [["john", "lives", "in", "paris"], ["mary", "went", "to", "london"]]
    assert tagged["one.txt"] == tagged["plain.txt"][:1]
    expected = Predictor.from_pretrained(models["ner"])(["john lives in paris", "mary went to london"])
    assert [t for _, t in tagged["plain.txt"]] == [e["tags"] for e in expected]
    # how a file is told apart, with the model's tags
    _, task, _ = load_finetuned(models["ner"])
    names = ["O", "B-LOC", "B-PER"]
    for text, plain in (("john lives\nmary went\n", True),  # two words a line, none a tag
                        ("-DOCSTART- -X- O\n\njohn B-PER\n", False),
                        ("john lives in paris .\nmary went home\n", True),
                        ("john NNP B-PER\nlives VBZ O\nparis NNP B-LOC\n", False)):
        (tmp_path / "x.txt").write_text(text)
        assert plain_text(task, str(tmp_path / "x.txt"), names) is plain, text


def test_models_of_pairs_questions_and_choices_keep_their_layouts(models, tmp_path):
    (tmp_path / "q.txt").write_text("what follows gamma?\n")
    for family in ("qa", "multiple-choice"):
        _, task, _ = load_finetuned(models[family])
        assert not plain_text(task, str(tmp_path / "q.txt"))
    with pytest.raises(BertforgeError, match="question answering reads a SQuAD JSON file"):
        read_inputs(load_finetuned(models["qa"])[1], None)


def test_embed_writes_json_lines_to_standard_output(models, tmp_path, capsys, monkeypatch):
    (tmp_path / "texts.txt").write_text("\n".join(TEXTS[:3]) + "\n")
    expected = Embedder.from_pretrained(models["base"]).encode(TEXTS[:3])
    assert main(["embed", "--model", models["base"], "--input", str(tmp_path / "texts.txt")]) == 0
    got = out_lines(capsys)
    assert [g["text"] for g in got] == TEXTS[:3]
    assert np.abs(np.array([g["vector"] for g in got]) - expected).max() < 1e-5  # rounded to 6 places
    monkeypatch.setattr("sys.stdin", io.StringIO("a good film\n"))
    assert main(["embed", "--model", models["base"], "--pooling", "tokens"]) == 0
    got = out_lines(capsys)
    assert len(got) == 1 and got[0]["tokens"] == ["[CLS]", "a", "good", "film", "[SEP]"] and len(got[0]["vector"]) == 5


def test_fill_mask_reads_a_file_of_masked_lines(models, tmp_path, capsys):
    texts = ["a good [MASK]", "[MASK] great acting", "mary went to [MASK] [MASK]"]
    (tmp_path / "masked.txt").write_text("\n".join(texts) + "\n")
    expected = FillMask(models["mlm"]).fill(texts, 3)
    assert main(["fill-mask", "--model", models["mlm"], "--input", str(tmp_path / "masked.txt"), "--top-k", "3",
                 "--json"]) == 0
    got = out_lines(capsys)
    assert [[[c["token"] for c in mask] for mask in text] for text in got] == \
        [[[c["token"] for c in mask] for mask in text] for text in expected]
    assert [len(text) for text in got] == [1, 1, 2]
    assert got[2][1][0]["score"] == pytest.approx(expected[2][1][0]["score"], abs=1e-6)
    # the text given too: it comes first; each answer under its text
    assert main(["fill-mask", "--model", models["mlm"], "truly [MASK] acting", "--input",
                 str(tmp_path / "masked.txt"), "--top-k", "2"]) == 0
    blocks = capsys.readouterr().out.split("\n\n")
    assert [b.splitlines()[0] for b in blocks] == ["truly [MASK] acting"] + texts
    assert [len(b.splitlines()) for b in blocks] == [2, 2, 2, 3]
    # a line without a mask is named before the model is read
    (tmp_path / "bad.txt").write_text("a good [MASK]\n\nno mask here\n")
    assert main(["fill-mask", "--model", str(tmp_path / "nowhere"), "--input", str(tmp_path / "bad.txt")]) == 2
    assert "bad.txt, line 3: no [MASK] in the text: 'no mask here'" in capsys.readouterr().err
