"""Python = CLI: `bertforge.pretrain`, `finetune`, `train_translation` and `word_vectors` take their
command's options as keywords, under the same names (argparse's dests) and with the same defaults,
and resolve what is not given as the command does, in one place: the same arguments give the same
settings, saved the same way (run_config.json, or a word-vectors run's settings.json)."""

import argparse
import inspect
import json
import os

import pytest
from conftest import write_corpus
from docs_data import parallel, sst

from bertforge import BertforgeError, Tokenizer, finetune, pretrain, train_translation, word_vectors
from bertforge.cli import build_parser, main
from bertforge.tasks import make_task
from bertforge.training.trainer import TrainOptions

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "checkpoints")
FUNCTIONS = {"pretrain": pretrain, "finetune": finetune, "train-translation": train_translation,
             "word-vectors": word_vectors}
# The keywords that are the Python API's own (each function's docstring says what they are).
PYTHON_ONLY = {"pretrain": {"options", "model_overrides"}, "finetune": {"options"},
               "train-translation": {"save_every", "progress", "overrides"}, "word-vectors": {"progress"}}


def command_options(command: str) -> dict:
    """dest -> default of each option of `bertforge COMMAND` (an old spelling shares its new one's dest)."""
    parser = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    return {a.dest: a.default for a in parser._actions
            if a.dest not in ("help", "config") and a.default is not argparse.SUPPRESS}


def required_options(command: str) -> set[str]:
    parser = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    return {a.dest for a in parser._actions if a.required}


def flags(**options) -> list[str]:
    """Keywords as the command line's flags: `--name value`, a switch alone, a list as several values."""
    out = []
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        if value is True:
            out.append(flag)
        elif value is not None and value is not False:
            out += [flag, *map(str, value if isinstance(value, list) else [value])]
    return out


def saved(path, out) -> dict:
    """A saved JSON file, with the run's own folder (`out`, absolute or as given) written OUT, so that
    the settings of two runs in two folders compare."""
    text = open(path, encoding="utf-8").read()
    return json.loads(text.replace(json.dumps(os.path.abspath(out))[1:-1], "OUT").replace(f'"{out}"', '"OUT"'))


@pytest.mark.parametrize("command", FUNCTIONS)
def test_every_option_of_the_command_is_a_keyword_with_its_default(command):
    parameters = inspect.signature(FUNCTIONS[command]).parameters
    options = command_options(command)
    assert set(parameters) == set(options) | PYTHON_ONLY[command]
    keywords = {name: p.default for name, p in parameters.items() if p.default is not inspect.Parameter.empty}
    assert {name: keywords[name] for name in options if name in keywords} == \
        {name: default for name, default in options.items() if name in keywords}
    # what the command requires (corpus and out; task, train, dev, model and out; ...) is positional
    assert set(parameters) - set(keywords) == required_options(command)


@pytest.fixture
def corpus(tmp_path):
    write_corpus(tmp_path / "corpus")
    return str(tmp_path / "corpus")


@pytest.mark.parametrize("given", [
    {"preset": "bert-tiny"},
    {"max_minutes": 3.0},  # no size: the budget picks it, and the recipe's rate for it
    {"objective": "awd-lstm", "preset": "awd-lstm-tiny", "vocab_size": 100, "bptt": 8},  # to pretrain_recurrent
], ids=["sized", "budget", "recurrent"])
def test_pretrain_from_python_resolves_and_saves_what_the_command_does(tmp_path, corpus, given):
    common = dict(steps=2, batch_size=4, eval_every=0, cache_dir=str(tmp_path / "cache"), quiet=True, **given)
    if "objective" not in given:  # a vocabulary learned once: WordPiece's trainer orders its pieces by hash
        Tokenizer.train(files=[corpus], vocab_size=100).save_pretrained(str(tmp_path / "tok"))
        common.update(tokenizer=str(tmp_path / "tok"), max_seq_length=32)
    assert main(["pretrain", "--corpus", corpus, "--out", str(tmp_path / "cli"), *flags(**common)]) == 0
    summary = pretrain(corpus, str(tmp_path / "py"), **common)
    assert summary["status"] == "done" and summary["step"] == 2
    ours, theirs = (saved(tmp_path / run / "run_config.json", tmp_path / run) for run in ("py", "cli"))
    assert ours == theirs
    assert ours["command"] == "pretrain" and ours["args"]["steps"] == 2  # what `--config` replays
    if given.get("objective") == "awd-lstm":  # ULMFiT's stage 1: Adam (0.8, 0.99) at 3e-3 with one cycle
        training = ours["training"]
        assert (training["lr"], training["betas"], training["schedule"], training["clip"]) == \
            (3e-3, [0.8, 0.99], "one-cycle", 0.25)
        return
    # the small-budget recipe at bert-tiny, not TrainOptions' own 1e-4, 1%, 0.999
    training = ours["training"]
    assert (ours["preset"], training["lr"], training["warmup"], training["betas"]) == \
        ("bert-tiny", 2e-3, 0.1, [0.9, 0.98])
    assert (ours["positions"], ours["pretraining_dropout"], ours["masking"]["mask_prob"]) == ("rotary", 0.0, 0.15)
    assert ours["sources"]["lr"] == "recipe small-budget"
    assert ours["sources"]["preset"] == ("given" if "preset" in given else "default")


def test_a_whole_train_options_is_taken_as_given(tmp_path, corpus):
    """The older form: every field of `options` is a given setting (here TrainOptions' own lr); the
    plan still fills the rest, and nothing may be said twice."""
    out = tmp_path / "run"
    options = TrainOptions(out=str(out), steps=1, eval_every=0, progress=False)
    pretrain(corpus, str(out), preset="bert-tiny", vocab_size=100, max_seq_length=32, batch_size=4,
             cache_dir=str(tmp_path / "cache"), options=options)
    config = saved(out / "run_config.json", out)
    assert (config["training"]["lr"], config["sources"]["lr"]) == (1e-4, "given")
    assert (config["positions"], config["sources"]["positions"]) == ("rotary", "recipe small-budget")
    assert "command" not in config  # not a command line: nothing for --config to replay
    with pytest.raises(BertforgeError, match=r"^lr, seed: given with options=TrainOptions"):
        pretrain(corpus, str(tmp_path / "other"), options=options, lr=1e-3, seed=1)
    with pytest.raises(BertforgeError, match="give a budget"):
        pretrain(corpus, str(tmp_path / "other"))
    with pytest.raises(BertforgeError, match=r"--bptt: for the recurrent objectives"):
        pretrain(corpus, str(tmp_path / "other"), steps=1, bptt=20)
    assert not (tmp_path / "other").exists()


def test_finetune_from_python_resolves_and_saves_what_the_command_does(tmp_path):
    (tmp_path / "train.tsv").write_text(sst(24))
    (tmp_path / "dev.tsv").write_text(sst(8))
    base = os.path.join(FIXTURES, "bert")
    common = dict(task="sst2", train=str(tmp_path / "train.tsv"), dev=str(tmp_path / "dev.tsv"), model=base,
                  epochs=1.0, batch_size=8, quiet=True)
    assert main(["finetune", "--out", str(tmp_path / "cli"), *flags(**common)]) == 0
    summary = finetune(out=str(tmp_path / "py"), **common)
    assert summary["select"] == "accuracy" and summary["step"] == 3  # 24 examples in batches of 8
    ours, theirs = (saved(tmp_path / run / "run_config.json", tmp_path / run) for run in ("py", "cli"))
    assert ours == theirs
    # the command's own defaults (seed 42, one model kept, a record every 50 steps), and the rate of
    # the encoder's width (16: 3e-4), not TrainOptions' 0, 2, 10 and 1e-4
    training = ours["training"]
    assert (training["lr"], training["warmup"], training["seed"], training["keep"], training["log_every"]) == \
        (3e-4, 0.1, 42, 1, 50)
    assert ours["sources"] == {"lr": "recipe bert", "warmup": "recipe bert"}
    with pytest.raises(BertforgeError, match=r"^text_column: given with a task object"):
        finetune(make_task("sst2"), common["train"], common["dev"], base, str(tmp_path / "other"), text_column="x")


def test_train_translation_from_python_resolves_and_saves_what_the_command_does(tmp_path):
    for split, count in (("train", 40), ("val", 4)):
        for lang in ("en", "de"):
            (tmp_path / f"{split}.{lang}").write_text(parallel(count, lang))
    common = dict(source_lang="en", target_lang="de", train=str(tmp_path / "train"), dev=str(tmp_path / "val"),
                  preset="mt-tiny", vocab_size=100, steps=2, warmup=0.5, eval_every=2, bleu_sentences=2,
                  average=1, dropout=0.0, precision="fp32")
    assert main(["train-translation", "--out", str(tmp_path / "cli"), *flags(**common)]) == 0
    train_translation(out=str(tmp_path / "py"), progress=False, **common)
    ours, theirs = (saved(tmp_path / run / "run_config.json", tmp_path / run) for run in ("py", "cli"))
    assert ours == {**theirs, "training": {**theirs["training"], "progress": False}}
    # the Transformer's schedule (peak 1e-3, Adam's betas 0.9, 0.98), half of the 2 steps warming up,
    # and --dropout as a setting of the model
    training = ours["training"]
    assert (training["lr"], training["warmup"], training["betas"], training["schedule"]) == \
        (1e-3, 1, [0.9, 0.98], "inverse-sqrt")
    assert ours["overrides"] == {"dropout": 0.0}


def test_word_vectors_from_python_are_the_commands(tmp_path):
    (tmp_path / "corpus.txt").write_text(" ".join(sst(60).split()) + "\n")
    common = dict(corpus=[str(tmp_path / "corpus.txt")], dim=4, epochs=2, min_count=1)
    assert main(["word-vectors", "--output", str(tmp_path / "cli.txt"), *flags(**common)]) == 0
    summary = word_vectors(output=str(tmp_path / "py.txt"), progress=False, **common)
    assert summary["status"] == "done" and summary["epochs"] == 2
    settings = json.loads((tmp_path / "py.txt.run" / "settings.json").read_text())
    assert settings == json.loads((tmp_path / "cli.txt.run" / "settings.json").read_text())
    assert (settings["window"], settings["x_max"], settings["lr"], settings["lowercase"]) == (10, 10.0, 0.2, True)
    assert (tmp_path / "py.txt").read_bytes() == (tmp_path / "cli.txt").read_bytes()  # the same vectors


def test_a_trainoptions_left_at_its_rates_says_where_the_recipe_is(tmp_path):
    """`pretrain(corpus, out, options=TrainOptions(max_minutes=3))` trains with what it is given; its
    class defaults (BERT 2018's rates) learn little in minutes, so the call says so, and how to get
    the command line's recipe."""
    import warnings

    from bertforge.errors import BertforgeError
    from bertforge.training.trainer import TrainOptions

    with pytest.warns(UserWarning, match=r"pretrain\(corpus, out, max_minutes=\.\.\., preset=\.\.\.\)"):
        with pytest.raises(BertforgeError):  # no such corpus: said after the warning, before any work
            pretrain(str(tmp_path / "none"), str(tmp_path / "run"),
                     options=TrainOptions(out=str(tmp_path / "run"), max_minutes=3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(BertforgeError):  # rates of its own: no warning
            pretrain(str(tmp_path / "none"), str(tmp_path / "run"),
                     options=TrainOptions(out=str(tmp_path / "run"), max_minutes=3, lr=2e-3, warmup=0.1))
