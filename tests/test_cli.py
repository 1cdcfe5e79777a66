"""The command line: subcommands call the library, errors are one clear line and exit code 2."""

import os
import re

import pytest
from conftest import tiny_config

from bertforge import Bert, Tokenizer, load_pretrained, save_pretrained
from bertforge.cli import main


def test_tokenizer_train_and_info(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(f"line {i} of the tiny corpus, with words repeated" for i in range(200)))
    assert main(["tokenizer", "train", str(corpus), "--out", str(tmp_path / "tok"), "--vocab-size", "120",
                 "--min-count", "1"]) == 0
    tokenizer = Tokenizer.from_pretrained(str(tmp_path / "tok"))
    assert tokenizer.tokenize("the tiny corpus") == ["the", "tiny", "corpus"]
    assert "WordPiece vocabulary" in capsys.readouterr().out


def test_version(capsys):
    with pytest.raises(SystemExit) as exit:
        main(["--version"])
    assert exit.value.code == 0 and capsys.readouterr().out.startswith("bertforge 0.")


def test_bertforge_alone_lists_the_commands(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in ("pretrain", "finetune", "translate", "word-vectors"))


def test_old_spellings_work_with_a_one_line_note_and_positional_models_are_kept(tmp_path, capsys):
    """Renamed flags (--min-frequency -> --min-count, ...) still work, each with one line saying the new
    name; a model given positionally, as before --model, is read as --model."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(f"line {i} of the tiny corpus, with words repeated" for i in range(200)))
    assert main(["tokenizer", "train", str(corpus), "--out", str(tmp_path / "tok"), "--vocab-size", "120",
                 "--min-frequency", "1"]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("bertforge: note:")]
    assert notes == ["bertforge: note: --min-frequency is an old spelling: use --min-count (the old one will go)"]
    assert Tokenizer.from_pretrained(str(tmp_path / "tok")).vocab_size == 120
    save_pretrained(Bert(tiny_config(vocab_size=120)), str(tmp_path / "m"),
                    tokenizer=Tokenizer.from_pretrained(str(tmp_path / "tok")))
    for argv in (["info", str(tmp_path / "m")], ["info", "--model", str(tmp_path / "m")]):
        assert main(argv) == 0
        assert capsys.readouterr().out.startswith(f"{tmp_path / 'm'}: ")
    for argv, missing in ((["info"], "--model"), (["export", "--model", str(tmp_path / "m")], "--out")):
        with pytest.raises(SystemExit) as exit:  # argparse's usage error
            main(argv)
        assert exit.value.code == 2 and f"required: {missing}" in capsys.readouterr().err


def test_errors_are_one_line_with_exit_code_2(tmp_path, capsys):
    assert main(["info", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"bertforge: error: {tmp_path / 'missing'}: no such directory"
    assert main(["tokenizer", "train", str(tmp_path / "none.txt"), "--out", str(tmp_path / "t")]) == 2
    assert "none.txt: no such file" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "t")


def test_demo_runs_end_to_end(tmp_path, capsys):
    from bertforge.demo import default_corpus
    from bertforge.errors import BertforgeError

    try:
        default_corpus()
    except BertforgeError as e:
        pytest.skip(str(e))
    assert main(["demo", "--out", str(tmp_path), "--max-minutes", "0.15", "--preset", "bert-tiny"]) == 0
    out = capsys.readouterr().out
    assert "fill-mask:" in out and "to be, or not to [MASK]" in out
    assert load_pretrained(str(tmp_path / "pretrain" / "model")).config.hidden_size == 128
    assert len(os.listdir(tmp_path / "corpus")) == 37 and os.listdir(tmp_path / "held-out") == ["hamlet.txt"]
    assert "masked-token accuracy" in out and "always guessing" in out
    # what it learned in the table; the next-sentence head once, beside chance, with why
    assert "MLM accuracy" in out and "NSP accuracy" not in out and "(chance: 50%)" in out
    assert f"bertforge serve --model {tmp_path / 'pretrain' / 'model'}" in out  # how to look inside what it trained


def test_plays_become_prose():
    from bertforge.demo import play_to_text

    play = "# Hamlet\n\n## ACT I\n\n_Enter BERNARDO_\n\n**BERNARDO**  \nWho's there?\n\n**FRANCISCO**  \nNay, answer me:  \nstand.\n"
    assert play_to_text(play) == "Who's there?\n\nNay, answer me: stand.\n"


def test_help_shows_each_default_once_and_never_none(capsys):
    import re

    from bertforge.cli import build_parser

    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices
    for name, command in [*commands.items(), *commands["tokenizer"]._subparsers._group_actions[0].choices.items()]:
        text = command.format_help()
        assert "(default: None)" not in text and "(default: False)" not in text, name
        for flag_help in re.split(r"\n  (?=-)", text):  # one flag's help at a time
            assert len(re.findall(r"\(default", flag_help)) <= 1, (name, flag_help)


def test_device_and_precision_decisions():
    import torch

    from bertforge.errors import BertforgeError
    from bertforge.training.device import choose_precision, resolve_device

    cpu, gpu = torch.device("cpu"), torch.device("cuda", 0)
    assert resolve_device("cpu") == cpu
    assert resolve_device("auto") == (torch.device("cuda") if torch.cuda.is_available() else cpu)
    for bad in ("tpu", "gpu0"):
        with pytest.raises(BertforgeError, match="device"):
            resolve_device(bad)
    if not torch.cuda.is_available():
        with pytest.raises(BertforgeError, match="no CUDA GPU"):
            resolve_device("cuda")
    # auto: bf16 where native; a GPU without it (T4, V100) trains in fp16 with a scaler; else fp32
    assert choose_precision("auto", gpu, bf16=True) == "bf16"
    assert choose_precision("auto", gpu, bf16=False) == "fp16"
    assert choose_precision("auto", cpu, bf16=False) == "fp32"
    assert choose_precision("auto", cpu, bf16=True) == "bf16"
    assert choose_precision("fp32", gpu, bf16=True) == "fp32"
    with pytest.raises(BertforgeError, match="fp16 is for GPUs"):
        choose_precision("fp16", cpu)


def test_inference_commands_take_a_device(tmp_path, capsys):
    tokenizer = Tokenizer.train(texts=["a b c d e"] * 3, vocab_size=40, min_frequency=1)
    save_pretrained(Bert(tiny_config(vocab_size=tokenizer.vocab_size)), str(tmp_path / "m"), tokenizer)
    (tmp_path / "t.txt").write_text("a b c\n")
    assert main(["embed", "--model", str(tmp_path / "m"), "--input", str(tmp_path / "t.txt"), "--output",
                 str(tmp_path / "v.npy"), "--device", "cpu"]) == 0
    assert main(["embed", "--model", str(tmp_path / "m"), "--input", str(tmp_path / "t.txt"), "--output",
                 str(tmp_path / "v.npy"), "--device", "tpu"]) == 2
    assert "unknown device 'tpu'" in capsys.readouterr().err


def test_progress_is_plain_lines_when_not_a_terminal():
    import io

    from bertforge.progress import progress

    out = io.StringIO()  # not a terminal: a log file, CI, nohup
    bar = progress(total=10, desc="training", unit="steps", file=out, every=0)
    for i in range(10):
        bar.set_postfix(loss=f"{1 / (i + 1):.3f}")
        bar.update(1)
    bar.close()
    lines = out.getvalue().split("\n")
    assert "\r" not in out.getvalue() and len(lines) == 11 and lines[-1] == ""
    clock = r"\d+:\d\d"  # how long it took depends on the machine
    assert re.match(rf"training: 1/10 steps \(10%\), {clock} elapsed, ~{clock} left, loss 1\.000", lines[0])
    assert re.match(rf"training: 10/10 steps \(100%\), {clock} elapsed, loss 0\.100", lines[9])
