"""Faults and bad input, as an adversarial user would try them: every numeric option given NaN,
infinity and out-of-range values; generated malformed inputs for every reader; a full disk at each
write of every writer; a kill at each rename of a training run, and in the middle of writing its
trainer state. Each must end in one clear error naming the file (exit 2 from the command line),
leave what was there before intact, and leave nothing a later start cannot clean.

The readers' mutations are drawn from a seeded generator; BERTFORGE_DEEP_FAULTS=1 draws ten times
more of them and kills a training run at every rename and every save rather than at a sample of them.
"""

import argparse
import errno
import gzip
import hashlib
import json
import os
import random
import re
import signal
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import tiny_config, write_corpus

from bertforge import BertforgeError, Tokenizer, save_pretrained
from bertforge.checks import COMMAND_RULES, RULES
from bertforge.cli import build_parser, main
from bertforge.data.corpus import corpus_sentences
from bertforge.checkpoint import read_config
from bertforge.formats.hf import read_weights
from bertforge.families.bert.model import Bert
from bertforge.tasks import make_task
from bertforge.tasks.common import read_records
from bertforge.tasks.tagging import TaggingTask
from bertforge.training.checkpoints import latest_checkpoint
from bertforge.training.run_log import read_metrics

DEEP = os.environ.get("BERTFORGE_DEEP_FAULTS") == "1"
MUTATIONS = 80 if DEEP else 8
SRC = os.path.join(os.path.dirname(__file__), "..", "src")


def one_line_error(capsys, starts: str) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"bertforge: error: {starts}"), err
    assert "Traceback" not in err
    return err


# ---- every numeric option -------------------------------------------------------------------------


def numeric_option_cases() -> list[tuple[list[str], str, str]]:
    """(argv, option, bad value) for every numeric option of every command: NaN and infinities for
    real-valued ones, and a value just outside the range for every one."""
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices  # the command name -> its parser
    leaves = {name: p for name, p in commands.items() if name != "tokenizer"}
    leaves["tokenizer train"] = commands["tokenizer"]._subparsers._group_actions[0].choices["train"]
    cases = []
    for name, sub in leaves.items():
        required = []
        for action in sub._actions:
            if not action.option_strings and not isinstance(action, argparse._SubParsersAction):
                required.append(action.choices[0] if action.choices else "x")
            elif action.required:
                required += [action.option_strings[0], action.choices[0] if action.choices else "x"]
        for action in sub._actions:
            rule = COMMAND_RULES.get(name, {}).get(action.dest) or RULES.get(action.dest)
            if rule is None or action.type not in (int, float) or action.help == argparse.SUPPRESS:  # old spellings
                continue
            bad = ["nan", "inf", "-inf"] if action.type is float else []
            step = 1 if rule.integer else 0.5
            if rule.low is not None:
                bad.append(str(type(rule.low)(rule.low) - step if not rule.above else rule.low))
            if rule.high is not None:
                bad.append(str(rule.high + step if not rule.below else rule.high))
            option = next(s for s in action.option_strings if s.startswith("--"))
            for value in bad:
                value = str(int(float(value))) if action.type is int else value
                if action.type is int and rule.holds(int(value)):
                    continue
                cases.append(([*name.split(), *required, f"{option}={value}"], option, value))
    return cases


def test_every_numeric_option_refuses_nan_infinity_and_out_of_range(capsys):
    cases = numeric_option_cases()
    assert len(cases) > 140  # every command's options, several values each
    holes = []
    for argv, option, value in cases:
        try:
            code = main(argv)
        except BaseException as e:  # noqa: BLE001 - what the attack looks for
            code = repr(e)
        err = capsys.readouterr().err
        if code != 2 or err.count("\n") != 1 or not err.startswith(f"bertforge: error: {option}"):
            holes.append((" ".join(argv), code, err.strip()[-200:]))
    assert not holes, f"{len(holes)} of {len(cases)} cases: {holes[:5]}"


def test_numeric_rules_are_the_apis_too(tmp_path):
    from bertforge.data.batches import MaskingOptions
    from bertforge.finetune import finetune
    from bertforge.pretrain import pretrain
    from bertforge.training.trainer import TrainOptions

    for bad in (dict(lr=float("inf")), dict(weight_decay=float("nan")), dict(betas=(0.9, 1.0)), dict(clip=-1),
                dict(max_minutes=float("inf")), dict(seed=-1), dict(eps=0.0)):
        with pytest.raises(BertforgeError, match="must be"):
            TrainOptions(out=str(tmp_path), steps=1, **bad)
    with pytest.raises(BertforgeError, match="--mask-prob"):
        MaskingOptions(mask_prob=float("nan"))
    with pytest.raises(BertforgeError, match="at most 1"):
        MaskingOptions(replace_prob=0.8, random_prob=0.3)
    for bad in (dict(batch_size=0), dict(short_seq_prob=2.0), dict(generator_fraction=0.0)):
        with pytest.raises(BertforgeError, match="must be"):  # before any file is touched
            pretrain(str(tmp_path / "none"), str(tmp_path / "out"), **bad)
    for bad in (dict(epochs=0), dict(epochs=float("nan")), dict(batch_size=0)):
        with pytest.raises(BertforgeError, match="must be"):
            finetune(make_task("sst2"), "x", "x", "x", str(tmp_path / "out"), **bad)
    assert not (tmp_path / "out").exists()


# ---- every reader, fed generated malformed input ---------------------------------------------------


def mutations(data: bytes, rng: random.Random):
    """Malformed versions of a valid file: truncations, byte flips, a NUL, another encoding,
    a row with an extra column, a huge field."""
    for _ in range(MUTATIONS):
        yield "truncated", data[: rng.randrange(len(data))]
        flipped = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            flipped[rng.randrange(len(data))] = rng.randrange(256)
        yield "flipped bytes", bytes(flipped)
    where = rng.randrange(len(data))
    yield "NUL", data[:where] + b"\x00" + data[where:]
    try:  # text formats only
        yield "UTF-16", data.decode("utf-8").encode("utf-16")
        yield "cp1252", data.replace("é".encode(), b"\xe9") + b"caf\xe9\n"
    except UnicodeDecodeError:
        pass
    lines = data.split(b"\n")
    if len(lines) > 2:
        yield "extra column", b"\n".join([*lines[:2], lines[1] + b"\tsurplus", *lines[2:]])
    yield "huge field", data + b"x" * (2 << 20) + b"\n"


def assert_reader_survives(read, path, data: bytes, seed: int = 0) -> None:
    """Every mutation either reads or raises a one-line BertforgeError naming the file; nothing else."""
    refused, holes = 0, []
    cases = list(mutations(data, random.Random(seed)))
    for kind, bad in cases:
        path.write_bytes(bad)
        try:
            read(str(path))
        except BertforgeError as e:
            refused += 1
            if str(path) not in str(e) or "\n" in str(e):
                holes.append((kind, str(e)[:200]))
        except Exception as e:  # anything else is a hole
            holes.append((kind, f"{type(e).__name__}: {str(e)[:200]}"))
    assert not holes, f"{len(holes)} of {len(cases)} cases: {holes[:5]}"
    assert refused > 0


SST = "sentence\tlabel\n" + "".join(f"a café film number {i} , good\t{i % 2}\n" for i in range(40))
CONLL = "-DOCSTART- X O\n\n" + "".join(f"Paris NNP B-LOC\nis VBZ O\nnice{i} JJ O\n\n" for i in range(30))
CSV = "text,label\n" + "".join(f'"a café, film {i}",{i % 2}\n' for i in range(40))
JSONL = "".join(json.dumps({"text": f"a café film {i}", "label": str(i % 2)}) + "\n" for i in range(40))
SQUAD = json.dumps({"data": [{"paragraphs": [{"context": "Paris is in France. The café is old.", "qas": [
    {"id": f"q{i}", "question": "Where is Paris?", "answers": [{"text": "France", "answer_start": 12}]}
    for i in range(10)]}]}]})


@pytest.mark.parametrize("name, content, read", [
    ("train.tsv", SST, lambda p: make_task("sst2").read(p)),
    ("train.csv", CSV, read_records),
    ("train.jsonl", JSONL, read_records),
    ("train.txt", CONLL, lambda p: TaggingTask().read(p)),
    ("train.json", SQUAD, lambda p: make_task("qa").read(p)),
    ("corpus.txt", "Une phrase sur le café. " * 400 + "\n\nAnother paragraph.\n",
     lambda p: list(corpus_sentences([p]))),
])
def test_task_and_corpus_readers_survive_malformed_files(tmp_path, name, content, read):
    assert_reader_survives(read, tmp_path / name, content.encode())


def test_binary_text_and_broken_gzip_are_refused_wherever_they_are(tmp_path):
    text = ("A sentence of the corpus. " * 20 + "\n") * 40  # ~21 KB
    path = tmp_path / "late.txt"
    path.write_bytes(text.encode()[:15_000] + b"\x00\x01\x02" + text.encode()[15_000:])
    with pytest.raises(BertforgeError, match=r"late.txt, line 2\d: a binary file"):
        list(corpus_sentences([str(path)]))
    packed = gzip.compress(text.encode())
    (tmp_path / "cut.txt.gz").write_bytes(packed[: len(packed) // 2])
    with pytest.raises(BertforgeError, match=r"cut.txt.gz, line \d+: cannot read \(.*truncated"):
        list(corpus_sentences([str(tmp_path / "cut.txt.gz")]))
    bad_line = (SST.encode().split(b"\n"))
    bad_line[7] = bad_line[7].replace(b"caf\xc3\xa9", b"caf\xe9")
    (tmp_path / "latin.tsv").write_bytes(b"\n".join(bad_line))
    with pytest.raises(BertforgeError, match=r"latin.tsv, line 8: not UTF-8 \(byte 0xe9\)"):
        make_task("sst2").read(str(tmp_path / "latin.tsv"))
    (tmp_path / "quote.csv").write_text('text,label\n"fine",1\n"never closed,0\nmore text\n')
    with pytest.raises(BertforgeError, match=r"quote.csv, line 3: a quoted field is never closed"):
        read_records(str(tmp_path / "quote.csv"))


def test_conll_errors_name_the_line_of_the_tag(tmp_path):
    train, dev = tmp_path / "train.txt", tmp_path / "dev.txt"
    train.write_text("Paris NNP B-LOC\nis VBZ O\n\n")
    dev.write_text("Paris NNP B-LOC\nis VBZ O\nBob NNP B-PER\n\n")
    task = TaggingTask()
    names = task.label_names(task.read(str(train)))
    with pytest.raises(BertforgeError, match=r"dev.txt, line 3: tag 'B-PER' never occurs"):
        task.check_labels(task.read(str(dev)), names)
    dev.write_text("Paris NNP B-LOC\nis VBZ X-LOC\n\n")
    with pytest.raises(BertforgeError, match=r"dev.txt, line 2: tag 'X-LOC' is not O or B-"):
        TaggingTask(scheme="IOB2").read(str(dev))


def test_tokenizer_and_model_files_survive_malformed_content(tmp_path):
    tokenizer = Tokenizer.train(texts=["the café sat on the mat"] * 20, vocab_size=60, min_frequency=1)
    directory = tmp_path / "model"
    save_pretrained(Bert(tiny_config(vocab_size=tokenizer.vocab_size)), str(directory), tokenizer)
    for name, read in (("vocab.txt", lambda p: Tokenizer.from_vocab(p)),
                       ("tokenizer_config.json", lambda p: Tokenizer.from_pretrained(os.path.dirname(p))),
                       ("config.json", lambda p: read_config(os.path.dirname(p))),
                       ("model.safetensors", lambda p: read_weights(os.path.dirname(p)))):
        good = (directory / name).read_bytes()
        assert_reader_survives(read, directory / name, good if name != "model.safetensors" else good[:4096])
        (directory / name).write_bytes(good)
    (directory / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": "yes"}))
    with pytest.raises(BertforgeError, match="do_lower_case must be true or false"):
        Tokenizer.from_pretrained(str(directory))


def test_non_finite_weights_are_refused_unless_asked(tmp_path, monkeypatch):
    model = Bert(tiny_config())
    with torch.no_grad():
        model.layers[0].attention.qkv.weight[0, 0] = float("nan")
    save_pretrained(model, str(tmp_path))
    with pytest.raises(BertforgeError, match=r"model.safetensors: encoder.layer.0.attention.self.query.weight holds NaN"):
        read_weights(str(tmp_path))
    monkeypatch.setenv("BERTFORGE_ALLOW_NONFINITE", "1")
    tensors, _ = read_weights(str(tmp_path))
    assert any(t.isnan().any() for t in tensors.values())


# ---- a full disk at each write ---------------------------------------------------------------------


def snapshot(directory) -> dict:
    """Every file under `directory` with the hash of its bytes."""
    out = {}
    for root, _, names in os.walk(directory):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, directory)] = hashlib.sha256(f.read()).hexdigest()
    return out


def full_disk_at_each_fsync(monkeypatch, write, target, watched):
    """Run `write` with the n-th fsync failing with ENOSPC, n = 1, 2, ... until one succeeds; each
    failure must name `target` and leave `watched` exactly as it was. Returns the failures seen."""
    real = os.fsync
    failures, n = 0, 1
    before = snapshot(watched)
    while True:
        calls = {"n": 0}

        def fsync(fd, n=n, calls=calls):
            calls["n"] += 1
            if calls["n"] == n:
                raise OSError(errno.ENOSPC, "No space left on device")
            return real(fd)

        monkeypatch.setattr(os, "fsync", fsync)
        try:
            write()
        except BertforgeError as e:
            assert str(target) in str(e) and "No space left" in str(e), str(e)
            assert snapshot(watched) == before
            failures += 1
            n += 1
            continue
        finally:
            monkeypatch.setattr(os, "fsync", real)
        return failures


def test_a_full_disk_never_damages_what_was_written_before(tmp_path, monkeypatch):
    from bertforge.embed import write_embeddings

    tokenizer = Tokenizer.train(texts=["the cat sat on the mat"] * 20, vocab_size=60, min_frequency=1)
    tok_dir = tmp_path / "tok"
    tokenizer.save_pretrained(str(tok_dir))
    other = Tokenizer.train(texts=["a dog ran in the park"] * 20, vocab_size=60, min_frequency=1)
    assert full_disk_at_each_fsync(monkeypatch, lambda: other.save_pretrained(str(tok_dir)), tok_dir, tok_dir) >= 1
    assert Tokenizer.from_pretrained(str(tok_dir)).backend.get_vocab() == other.backend.get_vocab()

    model_dir = tmp_path / "model"
    save_pretrained(Bert(tiny_config()), str(model_dir))
    new = Bert(tiny_config())
    assert full_disk_at_each_fsync(monkeypatch, lambda: save_pretrained(new, str(model_dir)), model_dir,
                                   tmp_path) >= 2  # each file of the directory

    out = tmp_path / "vectors"
    out.mkdir()
    for name, vectors in (("v.npy", np.ones((3, 4), np.float32)), ("v.jsonl", np.ones((3, 4), np.float32))):
        write_embeddings(str(out / name), vectors * 0, ["a", "b", "c"])
        assert full_disk_at_each_fsync(
            monkeypatch, lambda name=name, vectors=vectors: write_embeddings(str(out / name), vectors, ["a", "b", "c"]),
            out / name, out) >= 1
    assert not [n for n in os.listdir(out) if ".tmp-" in n]


def test_the_command_line_turns_any_failure_into_one_line(tmp_path, capsys, monkeypatch):
    """An error bertforge did not foresee is one line too, with exit code 1 (a bug, to report)
    where a problem with the input or the machine is 2; --debug or BERTFORGE_DEBUG=1 shows the
    traceback; a warning is one line."""
    import warnings

    import bertforge.cli.info as info

    def unforeseen(args):
        raise RuntimeError("safetensors_rust.SafetensorError: Error while serializing:\n IoError(No space left)")

    monkeypatch.setattr(info, "run", unforeseen)
    assert main(["info", str(tmp_path)]) == 1
    assert one_line_error(capsys, "RuntimeError") == (
        "bertforge: error: RuntimeError: safetensors_rust.SafetensorError: Error while serializing: IoError(No space "
        "left). This is a bug in bertforge: please report it, with the traceback that --debug (or BERTFORGE_DEBUG=1) "
        "shows\n")
    with pytest.raises(RuntimeError):
        main(["info", str(tmp_path), "--debug"])
    with pytest.raises(RuntimeError):
        main(["--debug", "info", str(tmp_path)])
    monkeypatch.setenv("BERTFORGE_DEBUG", "1")
    with pytest.raises(RuntimeError):
        main(["info", str(tmp_path)])
    monkeypatch.delenv("BERTFORGE_DEBUG")

    def machine_failure(args):  # an OSError without a file name, memory running out: not bugs
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(info, "run", machine_failure)
    assert main(["info", str(tmp_path)]) == 2
    assert one_line_error(capsys, "No space left on device") == "bertforge: error: No space left on device\n"

    def warns(args):
        warnings.warn("a first line\nand a second", UserWarning)
        warnings.warn("old", DeprecationWarning)

    def show(message, category, filename, lineno, file=None, line=None):  # Python's own, which pytest replaces
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))

    monkeypatch.setattr(info, "run", warns)
    monkeypatch.setattr(warnings, "showwarning", show)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        assert main(["info", str(tmp_path)]) == 0
    assert capsys.readouterr().err == ("bertforge: warning: a first line and a second\n"
                                       "bertforge: warning: DeprecationWarning: old\n")


CHECKPOINTS = os.path.join(os.path.dirname(__file__), "fixtures", "checkpoints")


def fixture_copy(tmp_path, name: str, config: dict | None = None, drop: tuple = ()) -> str:
    """A copy of a fixture checkpoint, its config.json updated with `config` and the files `drop` left out."""
    import shutil

    out = str(tmp_path / name.replace("/", "-"))
    shutil.copytree(os.path.join(CHECKPOINTS, name), out, ignore=shutil.ignore_patterns(*drop))
    if config:
        path = os.path.join(out, "config.json")
        with open(path) as f:
            saved = json.load(f)
        with open(path, "w") as f:
            json.dump({**saved, **config}, f)
    return out


def test_commands_name_the_file_and_the_real_problem(tmp_path, capsys):
    """Inputs that once ended in an internal exception or a message naming the wrong problem."""
    text = tmp_path / "t.txt"
    text.write_text("alpha beta gamma delta.\nepsilon zeta eta.\n")
    elmo = fixture_copy(tmp_path, "elmo", drop=("words.json",))
    for argv, expected in [
        # an ELMo folder has a word vocabulary: not "no tokenizer here"
        (["embed", "--model", elmo, "--input", str(text), "--output", str(tmp_path / "e.npy")],
         f"{elmo}/words.json: no such file"),
        (["pretrain", "--corpus", str(text), "--out", str(tmp_path / "p"), "--tokenizer", f"{CHECKPOINTS}/elmo",
          "--preset", "bert-tiny", "--steps", "1"],
         f"{CHECKPOINTS}/elmo: a word vocabulary (words.json, of an ELMo or AWD-LSTM model), not a sub-word tokenizer"),
        # a task that is not an object: was ValueError
        (["predict", "--model", fixture_copy(tmp_path, "bert-sst2", {"bertforge_task": "sst2"}), "--input", str(text)],
         f"{tmp_path}/bert-sst2/config.json: config field 'bertforge_task' must be an object"),
        # weights missing or corrupt where info reads their header: was FileNotFoundError, SafetensorError
        (["info", fixture_copy(tmp_path, "awd-lstm", drop=("model.safetensors",))],
         f"{tmp_path}/awd-lstm/model.safetensors: no such file"),
    ]:
        assert main(argv) == 2, argv
        one_line_error(capsys, expected)
    (tmp_path / "awd-lstm" / "model.safetensors").write_bytes(b"garbage")
    assert main(["info", str(tmp_path / "awd-lstm")]) == 2
    one_line_error(capsys, f"{tmp_path}/awd-lstm/model.safetensors: corrupted or truncated safetensors file")
    # an empty list of architectures is the family's default, as when left out: was IndexError
    assert main(["info", fixture_copy(tmp_path, "bert", {"architectures": []})]) == 0
    assert capsys.readouterr().out.startswith(f"{tmp_path}/bert: BertModel, ")


def test_every_family_and_head_works_or_says_why(tmp_path, capsys):
    """What failed with an internal message: ELECTRA's discriminator read as a masked LM (export:
    'missing weights: mlm...'), a fine-tuned ELMo's biLM (embed: missing and unexpected weights)."""
    text = tmp_path / "t.txt"
    text.write_text("alpha beta gamma delta.\nepsilon zeta eta.\n")
    vectors = {}
    for name in ("elmo", "elmo-sst2"):  # the task model's biLM is frozen: the pretrained one's vectors
        vectors[name] = tmp_path / f"{name}.npy"
        assert main(["embed", "--model", f"{CHECKPOINTS}/{name}", "--input", str(text), "--output",
                     str(vectors[name])]) == 0
    assert np.array_equal(np.load(vectors["elmo"]), np.load(vectors["elmo-sst2"]))
    from bertforge.checkpoint import read_config
    from bertforge.formats.hf import has_masked_lm_head

    assert not has_masked_lm_head(read_config(f"{CHECKPOINTS}/electra"))
    assert has_masked_lm_head(read_config(f"{CHECKPOINTS}/electra/generator"))
    assert main(["evaluate-lm", f"{CHECKPOINTS}/elmo", str(tmp_path / "none.txt")]) == 2
    capsys.readouterr()
    (tmp_path / "blank.txt").write_text("\n \n")
    assert main(["evaluate-lm", f"{CHECKPOINTS}/elmo", str(tmp_path / "blank.txt")]) == 2
    one_line_error(capsys, f"{tmp_path}/blank.txt: no text to evaluate (0 words; a language model needs 2 at least)")


def test_modernbert_and_electra_export_to_onnx(tmp_path, capsys):
    """ModernBERT's forward branched on its mask's values, which torch.export cannot trace
    (TorchExportError); an ELECTRA discriminator exports as its encoder."""
    pytest.importorskip("onnxscript")
    pytest.importorskip("onnxruntime")
    for name, outputs in (("modernbert", "logits"), ("electra", "last_hidden_state, pooler_output")):
        assert main(["export", f"{CHECKPOINTS}/{name}", str(tmp_path / f"{name}.onnx")]) == 0, capsys.readouterr().err
        assert f"outputs {outputs}; onnxruntime agrees" in capsys.readouterr().out


def test_a_bad_label_in_the_training_file_is_named_there(tmp_path, capsys):
    """A regression label that is not finite, a label left empty: the training file's line, before
    any training (a NaN label made the loss NaN, and the learning rate was blamed)."""
    rows = "".join(f"alpha beta\tgamma\t{i % 5}\n" for i in range(40))
    dev = tmp_path / "dev.tsv"
    dev.write_text("sentence1\tsentence2\tscore\nalpha\tbeta\t1\n")
    for task, train, expected in [
        ("stsb", "sentence1\tsentence2\tscore\n" + rows + "alpha\tbeta\tnan\n", "line 42: label 'nan' is not a finite"),
        ("classification", "text\tlabel\n" + "".join(f"a {i}\t{i % 2}\n" for i in range(40)) + "a\t \n",
         "line 42: no label (the column 'label' is empty)"),
    ]:
        (tmp_path / "train.tsv").write_text(train)
        argv = ["finetune", "--task", task, "--train", str(tmp_path / "train.tsv"), "--dev", str(dev), "--model",
                f"{CHECKPOINTS}/bert", "--out", str(tmp_path / task), "--epochs", "1", "--batch-size", "8",
                "--max-seq-length", "32"]
        assert main(argv) == 2
        one_line_error(capsys, f"{tmp_path / 'train.tsv'}, {expected}")


# ---- training that goes wrong --------------------------------------------------------------------


def pretrain_argv(tmp_path, out, *extra):
    return ["pretrain", "--corpus", str(tmp_path / "corpus"), "--out", str(out), "--preset", "bert-tiny",
            "--vocab-size", "100", "--batch-size", "8", "--max-seq-length", "32", "--cache-dir",
            str(tmp_path / "cache"), "--quiet", "--log-every", "1", "--eval-every", "0", *extra]


def test_an_update_that_overflows_the_weights_is_never_saved(tmp_path, capsys):
    write_corpus(tmp_path / "corpus")
    out = tmp_path / "run"
    assert main(pretrain_argv(tmp_path, out, "--steps", "3", "--save-every", "1", "--lr", "1e38",
                              "--precision", "fp32", "--positions", "absolute")) == 2
    err = one_line_error(capsys, "the weights became non-finite by step 1")
    assert "No checkpoint was written yet" in err
    assert latest_checkpoint(str(out)) is None and not (out / "model").exists()


def test_resuming_after_the_corpus_changed_is_refused(tmp_path, capsys):
    write_corpus(tmp_path / "corpus")
    out = tmp_path / "run"
    assert main(pretrain_argv(tmp_path, out, "--steps", "4", "--save-every", "2")) == 0
    corpus_file = sorted((tmp_path / "corpus").iterdir())[0]
    corpus_file.write_text(corpus_file.read_text() + "\nalpha beta gamma .\n")
    assert main(pretrain_argv(tmp_path, out, "--steps", "6", "--resume")) == 2
    one_line_error(capsys, f"{out}: the corpus files changed since the run began")


# Runs the command line and kills itself (SIGKILL) at "rename:N", the Nth rename (what it wrote is
# complete under its temporary name), or at "save:N", in the middle of the Nth torch.save (half the
# file written). "none:0" kills nothing and counts both. Only renames into the test's folder count: a
# library's own cache written once per machine (seen once in CI) would shift every later number.
KILLER = """
import io, os, signal, sys
sys.path.insert(0, {src!r})
import torch
kind, n = sys.argv[1].split(":")
n, calls = int(n), {{"rename": 0, "save": 0}}

def kill(what):
    print(f"killed at {{kind}} {{n}}: {{what}}", file=sys.stderr, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)

def renaming(real):
    def call(source, target, *args, **kwargs):
        if not os.fspath(target).startswith({root!r}):  # another library's (a cache of its own): not counted
            return real(source, target, *args, **kwargs)
        calls["rename"] += 1
        if kind == "rename" and calls["rename"] == n:
            kill(source)
        return real(source, target, *args, **kwargs)
    return call

def saving(real):
    def call(obj, path, *args, **kwargs):
        calls["save"] += 1
        if kind == "save" and calls["save"] == n:
            whole = io.BytesIO()
            real(obj, whole, *args, **kwargs)
            with open(path, "wb") as f:
                f.write(whole.getvalue()[: len(whole.getvalue()) // 2])
            kill(path)
        return real(obj, path, *args, **kwargs)
    return call

os.rename, os.replace, torch.save = renaming(os.rename), renaming(os.replace), saving(torch.save)
from bertforge.cli import main
code = main(sys.argv[2:])
print(f"renames: {{calls['rename']}}, saves: {{calls['save']}}", file=sys.stderr)
sys.exit(code)
"""


def leftovers(out) -> list[str]:
    """What a killed write left anywhere under `out`."""
    return [str(path.relative_to(out)) for path in out.rglob("*")
            if ".tmp-" in path.name or ".old-" in path.name or ".pruned" in path.name]


def test_a_kill_at_any_rename_or_mid_write_leaves_a_run_that_resumes_exactly(tmp_path):
    write_corpus(tmp_path / "corpus")
    argv = ["--steps", "4", "--save-every", "1", "--keep", "1", "--positions", "absolute", "--precision", "fp32"]
    script = KILLER.format(src=os.path.abspath(SRC), root=str(tmp_path))

    def run(point: str, out):
        return subprocess.run([sys.executable, "-c", script, point, *pretrain_argv(tmp_path, out, *argv)],
                              capture_output=True, text=True)

    reference = tmp_path / "reference"
    assert main(pretrain_argv(tmp_path, reference, *argv)) == 0  # it also fills the cache the runs below share
    expected = [(r["step"], r["loss"]) for r in read_metrics(str(reference)) if "loss" in r]
    done = run("none:0", tmp_path / "counted")
    assert done.returncode == 0, done.stderr
    renames, saves = map(int, re.search(r"renames: (\d+), saves: (\d+)", done.stderr).groups())
    # A 4-step run renames the shards, run_config, the tokenizer's files, 4 checkpoints (each with
    # its tokenizer), 3 prunes and the model; it saves a trainer state in each checkpoint. Kills at
    # a rename first (the tokenizer), early, midway and in the last three (the model, the plot, the
    # log), and in the middle of writing the second state.
    assert renames >= 13 and saves == 4, (renames, saves)
    chosen = (1, 6, renames // 2, renames - 2, renames - 1, renames)
    points = [f"rename:{n}" for n in (chosen if not DEEP else range(1, renames + 1))]
    points += [f"save:{n}" for n in ((2,) if not DEEP else range(1, saves + 1))]
    left = {}
    for point in points:
        out = tmp_path / point.replace(":", "-")
        done = run(point, out)
        # killed, not finished: mid-write, with what it was writing still there to see
        assert done.returncode == -signal.SIGKILL, (point, done.returncode, done.stderr[-2000:])
        writing = re.search(rf"killed at {point.replace(':', ' ')}: (.+)", done.stderr).group(1)
        assert os.path.exists(writing), (point, writing)
        left[point] = leftovers(out)
        resume = ["--resume"] if latest_checkpoint(str(out)) else []
        assert main(pretrain_argv(tmp_path, out, *argv, *resume)) == 0, point
        assert not leftovers(out), (point, leftovers(out))
        assert [(r["step"], r["loss"]) for r in read_metrics(str(out)) if "loss" in r] == expected, point
        assert read_config(str(out / "model")).vocab_size == read_config(str(reference / "model")).vocab_size
    assert any(left.values()), "no kill left anything for the restart to clean"


def test_written_directories_get_the_umasks_ordinary_permissions(tmp_path):
    # safetensors writes 0600 and mkdtemp makes 0700: a saved model must be readable like any other file
    from safetensors.torch import save_file

    from bertforge.atomic import atomic_directory

    umask = os.umask(0o022)
    try:
        with atomic_directory(str(tmp_path / "model")) as tmp:
            save_file({"w": torch.zeros(2)}, os.path.join(tmp, "model.safetensors"))
            os.mkdir(os.path.join(tmp, "sub"), 0o700)
            save_file({"w": torch.zeros(2)}, os.path.join(tmp, "sub", "inner.safetensors"))
    finally:
        os.umask(umask)
    modes = {p.relative_to(tmp_path).as_posix(): p.stat().st_mode & 0o777 for p in tmp_path.rglob("*")}
    assert modes == {"model": 0o755, "model/model.safetensors": 0o644, "model/sub": 0o755,
                     "model/sub/inner.safetensors": 0o644}
