"""The command line: subcommands call the library, errors are one clear line and exit code 2."""

import os

from bertforge import Tokenizer, load_pretrained
from bertforge.cli import main


def test_tokenizer_train_and_info(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(f"line {i} of the tiny corpus, with words repeated" for i in range(200)))
    assert main(["tokenizer", "train", str(corpus), "--out", str(tmp_path / "tok"), "--vocab-size", "120",
                 "--min-frequency", "1"]) == 0
    tokenizer = Tokenizer.from_pretrained(str(tmp_path / "tok"))
    assert tokenizer.tokenize("the tiny corpus") == ["the", "tiny", "corpus"]
    assert "WordPiece vocabulary" in capsys.readouterr().out


def test_version(capsys):
    import pytest

    with pytest.raises(SystemExit) as exit:
        main(["--version"])
    assert exit.value.code == 0 and capsys.readouterr().out.startswith("bertforge 0.")


def test_errors_are_one_line_with_exit_code_2(tmp_path, capsys):
    assert main(["info", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"bertforge: error: {tmp_path / 'missing'}: no such directory"
    assert main(["tokenizer", "train", str(tmp_path / "none.txt"), "--out", str(tmp_path / "t")]) == 2
    assert "none.txt: no such file" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "t")


def test_demo_runs_end_to_end(tmp_path, capsys):
    import pytest

    from bertforge.demo import default_corpus
    from bertforge.errors import BertforgeError

    try:
        default_corpus()
    except BertforgeError as e:
        pytest.skip(str(e))
    assert main(["demo", "--out", str(tmp_path), "--minutes", "0.15", "--preset", "bert-tiny"]) == 0
    out = capsys.readouterr().out
    assert "fill-mask:" in out and "to be, or not to [MASK]" in out
    assert load_pretrained(str(tmp_path / "pretrain" / "model")).config.hidden_size == 128
    assert len(os.listdir(tmp_path / "corpus")) == 37 and os.listdir(tmp_path / "held-out") == ["hamlet.txt"]
    assert "masked-token accuracy" in out and "always guessing" in out


def test_plays_become_prose():
    from bertforge.demo import play_to_text

    play = "# Hamlet\n\n## ACT I\n\n_Enter BERNARDO_\n\n**BERNARDO**  \nWho's there?\n\n**FRANCISCO**  \nNay, answer me:  \nstand.\n"
    assert play_to_text(play) == "Who's there?\n\nNay, answer me: stand.\n"
