"""Faults on the newest surfaces (issue 43): translation, word vectors, CoVe, `/translate`. Each
class is checked at its root, for every member: every writing command against every kind of input
it reads (an output is never one of its inputs, never holds one, never lands inside an input
folder); every numeric option against its declared range, on the command line and the service
alike; input files against what they declare; resume against changed data."""

from __future__ import annotations

import argparse
import json
import math
import os

import pytest
import torch

from conftest import files_of, write_reversal_pairs
from bertforge import BertforgeError
from bertforge.cli import build_parser, main

WORDS = "red blue green black white dog cat bird fish horse runs jumps".split()


def one_line_error(capsys, *parts: str) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if not line.startswith("bertforge: note:")]  # renamed flags' notes
    assert len(lines) == 1 and lines[0].startswith("bertforge: error: ") and "Traceback" not in err, err
    for part in parts:
        assert part in lines[0], err
    return lines[0]


def command_line(command: str, **values) -> list[str]:
    """The argv of `command` ("tokenizer train" for a nested one) giving each option `values` names
    by its destination, spelled as the parser declares it today (flags are being renamed)."""
    parser = build_parser()
    for word in command.split():
        parser = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[word]
    argv = command.split()
    for dest, value in values.items():
        action = next(a for a in parser._actions if a.dest == dest and a.help != argparse.SUPPRESS)
        given = [str(v) for v in value] if isinstance(value, list) else [str(value)]
        argv += ([action.option_strings[0]] if action.option_strings else []) + given
    return argv


def write_pairs(prefix: str, count: int, seed: int) -> str:
    return write_reversal_pairs(prefix, count, seed, WORDS)


# ---- 1. outputs never over, holding, or inside their inputs ------------------------------------------


@pytest.fixture
def inputs(tmp_path):
    """One of each kind of input, as folders and files with something in them."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "bert"}')
    (model / "tokenizer.json").write_text("{}")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("the cat sat on the mat\n")
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.tsv").write_text("sentence\tlabel\na good film\t1\n")
    (data / "metrics.jsonl").write_text('{"translation": {"en": "a cat", "de": "eine katze"}}\n')
    (data / "vocab.txt").write_text("[PAD]\n[UNK]\n")
    (data / "v.vec").write_text("1 2\ncat 0.1 0.2\n")
    (data / "metrics.en").write_text("a cat\n")
    (data / "metrics.de").write_text("eine katze\n")
    return {"model": str(model), "corpus": str(corpus), "data": str(data)}


def writing_commands(i: dict) -> list[tuple[str, dict]]:
    """Every command that writes, each with an output over, holding or inside one of its inputs."""
    m, c, d = i["model"], i["corpus"], i["data"]
    return [
        ("translate", dict(model=m, output=f"{m}/tokenizer.json")),
        ("predict", dict(model=m, output=f"{m}/config.json")),
        ("embed", dict(model=m, output=f"{m}/vectors.npy")),
        ("export", dict(model=m, out=f"{m}/model.onnx")),
        ("export", dict(model=m, out=os.path.dirname(m))),
        ("finetune", dict(task="sst2", train=f"{d}/train.tsv", dev=f"{d}/train.tsv", model=m, out=f"{m}/ft")),
        ("finetune", dict(task="sst2", train=f"{d}/train.tsv", dev=f"{d}/train.tsv", model=m, out=d)),
        ("pretrain", dict(corpus=[c], out=f"{c}/run")),
        ("pretrain", dict(corpus=[f"{c}/**/*.txt"], out=f"{c}/run")),
        ("pretrain", dict(corpus=[c], out=f"{os.path.dirname(c)}/run", init=m, cache_dir=f"{m}/cache")),
        ("word-vectors", dict(corpus=[c], output=f"{c}/v.txt")),
        ("word-vectors", dict(corpus=[f"{c}/*.txt"], output=f"{c}/v.txt")),
        ("word-vectors", dict(corpus=[f"{c}/a.txt"], output=f"{c}/a.txt")),
        ("train-translation", dict(source_lang="en", target_lang="de", train=f"{d}/metrics.jsonl",
                                   dev=f"{d}/metrics.jsonl", out=d)),
        ("train-translation", dict(source_lang="en", target_lang="de", train=f"{d}/metrics", dev=f"{d}/metrics",
                                   out=f"{d}/metrics.en")),
        ("train-translation", dict(source_lang="en", target_lang="de", train=f"{d}/metrics.jsonl",
                                   dev=f"{d}/metrics.jsonl", out=f"{d}/v.vec", arch="lstm", word_vectors=f"{d}/v.vec")),
        ("tokenizer train", dict(files=[f"{d}/vocab.txt"], out=d)),
        ("tokenizer train", dict(files=[c], out=f"{c}/tok")),
        ("evaluate-lm", dict(model=m, files=[c], cache_dir=f"{c}/cache")),
    ]


def test_every_writing_command_refuses_an_output_over_or_inside_an_input(inputs, tmp_path, capsys):
    kept = files_of(tmp_path)
    cases = writing_commands(inputs)
    for command, values in cases:
        argv = command_line(command, **values)
        assert main(argv) == 2, argv
        one_line_error(capsys, "the input")
        assert files_of(tmp_path) == kept, argv


def test_the_refusal_names_the_output_and_the_input(inputs, capsys):
    m = inputs["model"]
    assert main(command_line("translate", model=m, output=f"{m}/tokenizer.json")) == 2
    one_line_error(capsys, "tokenizer.json: is inside the input folder", m, "name an output outside it")
    d = inputs["data"]
    assert main(command_line("tokenizer train", files=[f"{d}/vocab.txt"], out=d)) == 2
    one_line_error(capsys, f"{d}: holds the input {d}/vocab.txt")


def test_every_path_option_of_every_command_is_an_input_or_an_output():
    """A new command's path option is checked too: its destination is in paths.READS or WRITES."""
    from bertforge.cli import _subcommands
    from bertforge.paths import READS, WRITES

    not_paths = {"source_lang", "target_lang", "text", "prompt", "host", "device", "config", "task",
                 "text_column", "pair_column", "label_column", "prefix_column", "choice_columns", "text_field",
                 "tokenizer_command", "command", "strip_accents", "report_to", "layers"}
    for command in _subcommands(build_parser()):
        for action in command._actions:
            if (action.nargs == 0 or action.choices or action.type not in (None, str) or action.dest in not_paths
                    or action.dest.endswith("_positional") or action.dest in ("help", "debug")):
                continue
            assert action.dest in READS + WRITES, (command.prog, action.dest)


def test_the_python_api_refuses_too(inputs):
    from bertforge.train_translation import train_translation
    from bertforge.word_vectors import train_word_vectors

    c, d = inputs["corpus"], inputs["data"]
    with pytest.raises(BertforgeError, match="is inside the input folder"):
        train_word_vectors([c], f"{c}/v.txt", progress=False)
    with pytest.raises(BertforgeError, match="is inside the input folder"):
        train_word_vectors([f"{c}/**/*.txt"], f"{c}/sub/v.txt", progress=False)
    with pytest.raises(BertforgeError, match="holds the input"):
        train_translation("en", "de", f"{d}/metrics.jsonl", f"{d}/metrics.jsonl", d, progress=False)
    assert not os.path.exists(f"{c}/v.txt.run")


@pytest.fixture(scope="module")
def mt_run(tmp_path_factory):
    """A mt-tiny Transformer after 4 steps (a model directory, a run to resume, its data)."""
    from bertforge.train_translation import train_translation

    root = tmp_path_factory.mktemp("mt")
    train, valid = write_pairs(str(root / "train"), 200, seed=1), write_pairs(str(root / "valid"), 10, seed=2)
    torch.manual_seed(0)
    train_translation("src", "tgt", train, valid, str(root / "run"), preset="mt-tiny", vocab_size=80, batch_tokens=400,
                      steps=4, eval_every=2, save_every=2, bleu_sentences=0, average=1, precision="fp32",
                      progress=False)
    return {"root": str(root), "run": str(root / "run"), "model": str(root / "run" / "model"), "train": train,
            "valid": valid}


def test_the_translation_export_replaces_both_files_as_one(mt_run, tmp_path, monkeypatch):
    """A full disk while the decoder is written leaves the earlier pair whole, and says so truly."""
    import errno

    import bertforge.onnx_translation as onnx_translation

    out = tmp_path / "onnx"
    out.mkdir()
    for name in onnx_translation.FILES:
        (out / name).write_bytes(b"the earlier export's " + name.encode())
    before = files_of(out)

    class Program:
        def __init__(self, name):
            self.name = name

        def save(self, path):
            if self.name == "decoder":
                raise OSError(errno.ENOSPC, "No space left on device")
            with open(path, "wb") as f:
                f.write(b"a new encoder")

    monkeypatch.setattr(torch.onnx, "export", lambda wrapper, *a, **k: Program(type(wrapper).__name__.lower()))
    with pytest.raises(BertforgeError, match="onnx: could not be written .No space left on device.; what was there "
                                             "before is unchanged"):
        onnx_translation.export_translation(mt_run["model"], str(out), check=False)
    assert files_of(out) == before
    assert sorted(os.listdir(tmp_path)) == ["onnx"]  # no temporary folder left beside it
    (out / "notes.txt").write_text("mine")  # a folder that is not an export's alone is never replaced
    with pytest.raises(BertforgeError, match="holds notes.txt, not only an earlier export"):
        onnx_translation.export_translation(mt_run["model"], str(out), check=False)


# ---- 2. numbers checked where they are declared, in one form, for the command line and the service ---


BAD_NUMBERS = [
    ("train-translation", "label_smoothing", "1.5"), ("train-translation", "label_smoothing", "nan"),
    ("train-translation", "average", "-3"), ("train-translation", "bleu_sentences", "-1"),
    ("translate", "max_len_b", "100000000000000000000"), ("translate", "max_len_a", "inf"),
    ("translate", "max_len_a", "nan"), ("translate", "max_len_a", "1e30"), ("translate", "length_penalty", "nan"),
    ("translate", "beam", "0"), ("word-vectors", "dim", "200000"),
]


@pytest.mark.parametrize("command, dest, value", BAD_NUMBERS)
def test_a_bad_number_is_one_line_naming_its_flag_and_range(command, dest, value, tmp_path, capsys):
    required = {"train-translation": dict(source_lang="en", target_lang="de", train=tmp_path / "t.jsonl",
                                          dev=tmp_path / "t.jsonl", out=tmp_path / "run"),
                "translate": dict(model=tmp_path / "model"),
                "word-vectors": dict(corpus=[tmp_path / "c.txt"], output=tmp_path / "v.txt")}[command]
    assert main(command_line(command, **required, **{dest: value})) == 2
    flag = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    spelled = next(a.option_strings[0] for a in flag._actions if a.dest == dest)
    one_line_error(capsys, f"{spelled} must be", "got")
    assert not os.listdir(tmp_path)


def test_every_numeric_option_of_every_command_has_a_rule():
    from bertforge.checks import COMMAND_RULES, RULES
    from bertforge.cli import _subcommands

    for command in _subcommands(build_parser()):
        for action in command._actions:
            if action.type in (int, float):
                name = command.prog.split()[-1]
                assert action.dest in RULES or action.dest in COMMAND_RULES.get(name, {}), (command.prog, action.dest)


def test_the_decoding_options_of_the_python_api_follow_the_same_rules():
    from bertforge.translate import DecodeOptions

    for field, value in (("max_len_b", 10**20), ("max_len_a", math.inf), ("length_penalty", math.nan),
                         ("length_penalty", -1e308), ("beam", 0)):
        with pytest.raises(BertforgeError, match=f"--{field.replace('_', '-')} must be"):
            DecodeOptions(**{field: value})


@pytest.mark.parametrize("body, status", [(b'{"text": "red dog", "length_penalty": 1' + b"0" * 400 + b"}", 422),
                                          (b'{"text": "red dog", "length_penalty": -1e308}', 422),
                                          (b'{"text": "red dog", "beam": 1' + b"0" * 400 + b"}", 413)])
def test_the_service_answers_a_huge_or_tiny_number_with_a_4xx(mt_run, body, status):
    pytest.importorskip("starlette")
    pytest.importorskip("httpx")
    from starlette.testclient import TestClient

    from bertforge.serve.app import create_app
    from bertforge.serve.engine import Engine

    with TestClient(create_app(Engine(mt_run["model"]))) as client:
        answer = client.post("/translate", content=body, headers={"content-type": "application/json"})
        assert answer.status_code == status, answer.text
        assert ("must be" if status == 422 else "over the limit") in answer.json()["error"]
        assert client.post("/translate", json={"text": "red dog"}).status_code == 200  # and it stays up


def test_a_config_too_large_for_the_machine_is_refused_before_the_model_is_built(mt_run, tmp_path, monkeypatch):
    import shutil

    import bertforge.checks as checks
    from bertforge import load

    model = tmp_path / "model"
    shutil.copytree(mt_run["model"], model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 10**9}))
    with pytest.raises(BertforgeError, match="config.json: max_position_embeddings is 1,000,000,000, more than"):
        load(str(model))
    (model / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 500_000}))
    monkeypatch.setattr(checks, "free_memory", lambda device: 2**27)  # 128 MiB free
    with pytest.raises(BertforgeError, match=r"config.json: its model needs .* GiB, more than the 0.1 GiB free; its "
                                             r"largest tensor .* comes of max_position_embeddings 500,000"):
        load(str(model))


def test_max_length_past_the_positions_is_one_line_before_any_step(mt_run, tmp_path):
    from bertforge.train_translation import train_translation

    with pytest.raises(BertforgeError, match="--max-seq-length 1000 is more than the 512 positions of preset mt-tiny"):
        train_translation("src", "tgt", mt_run["train"], mt_run["valid"], str(tmp_path / "run"), preset="mt-tiny",
                          vocab_size=80, max_seq_length=1000, steps=2, bleu_sentences=0, progress=False)
    assert not os.path.exists(tmp_path / "run" / "checkpoints")


# ---- 3. input files checked against what they declare ---------------------------------------------


@pytest.mark.parametrize("text, where, says", [
    ("2 8\ncat " + " ".join(["0.5"] * 16) + "\ndog " + " ".join(["0.5"] * 16) + "\n", ":2:",
     "16 numbers after the word, but the header says 8 dimensions"),
    ("cat " + " ".join(["0.5"] * 8) + "\ndog " + " ".join(["0.5"] * 16) + "\n", ":2:",
     "16 numbers after the word, but the first line has 8 dimensions"),
    ("3 2\ncat 0.5 0.5\ndog 0.5 0.5\n", ":1:", "the header says 3 words, the file has 2"),
    ("cat 0.5 0.5\ndog 0.5 nan\n", ":2:", "a NaN or infinite number in the vector of 'dog'"),
])
def test_a_vectors_file_unlike_its_header_or_first_line_is_refused_at_load(tmp_path, text, where, says):
    from bertforge.formats.word_vectors import read_vectors

    path = tmp_path / "v.vec"
    path.write_text(text)
    with pytest.raises(BertforgeError, match=f"v.vec{where} {says}"):
        read_vectors(str(path))
    spaced = tmp_path / "glove.txt"  # GloVe 840B's words with spaces still read
    spaced.write_text("cat 0.1 0.2\nnew york 0.5 0.5\n")
    assert read_vectors(str(spaced))[0] == ["cat", "new york"]


@pytest.mark.parametrize("size", [60, 120])
def test_a_tokenizer_with_other_ids_than_the_model_is_refused_at_load(mt_run, tmp_path, size):
    import shutil

    from bertforge import load
    from bertforge.data.parallel import TranslationTokenizer

    model = tmp_path / "model"
    shutil.copytree(mt_run["model"], model)
    config = json.loads((model / "config.json").read_text())
    other = TranslationTokenizer.train([" ".join(WORDS + [w + "s" for w in WORDS] + list("qxzjk"))] * 5, size)
    assert other.vocab_size != config["vocab_size"]
    other.save_pretrained(str(model))
    with pytest.raises(BertforgeError, match=f"its tokenizer has {other.vocab_size:,} ids where config.json's "
                                             f"vocab_size is {config['vocab_size']}"):
        load(str(model))


def test_blank_lines_are_answered_with_blank_lines(mt_run, tmp_path, capsys):
    source = tmp_path / "in.txt"
    source.write_text("red dog runs\n\n   \nblue cat\n")
    assert main(command_line("translate", model=mt_run["model"], input=source, beam=2)) == 0
    lines = capsys.readouterr().out.split("\n")
    assert lines[1:3] == ["", ""] and len(lines) == 5


# ---- 7. resuming over changed data is refused by every trainer ------------------------------------------


def test_word_vectors_resume_over_a_changed_corpus_is_refused(tmp_path):
    from bertforge.word_vectors import GloveOptions, train_word_vectors

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat sat on the mat\nthe dog sat on the log\n" * 20)
    out = str(tmp_path / "v.txt")
    options = GloveOptions(dim=4, epochs=1, min_count=1, batch_size=64)
    train_word_vectors(str(corpus), out, options, progress=False)
    with open(corpus, "a") as f:
        f.write("a bird sat on the cat\n")
    with pytest.raises(BertforgeError, match=r"v.txt.run: the corpus files changed since the run began"):
        train_word_vectors(str(corpus), out, GloveOptions(dim=4, epochs=2, min_count=1, batch_size=64), resume=True,
                           progress=False)


def test_train_translation_resume_over_changed_data_is_refused(mt_run):
    from bertforge.train_translation import train_translation

    source = mt_run["train"] + ".src"
    before = os.stat(source)
    os.utime(source, ns=(before.st_atime_ns, before.st_mtime_ns + 10**9))  # other text at the same path
    try:
        with pytest.raises(BertforgeError, match="run: the data files changed since the run began"):
            train_translation("src", "tgt", mt_run["train"], mt_run["valid"], mt_run["run"], preset="mt-tiny",
                              vocab_size=80, batch_tokens=400, steps=6, eval_every=2, save_every=2, bleu_sentences=0,
                              average=1, precision="fp32", resume=True, progress=False)
    finally:
        os.utime(source, ns=(before.st_atime_ns, before.st_mtime_ns))


# ---- 5. the command line's decoding bounded by the service's cost estimate --------------------------


def test_a_huge_beam_is_refused_before_decoding_with_the_flag_that_raises_the_bound(mt_run, tmp_path, capsys):
    source = tmp_path / "in.txt"
    source.write_text("red dog runs\nblue cat\n")
    assert main(command_line("translate", model=mt_run["model"], input=source, beam=50000)) == 2
    one_line_error(capsys, "in.txt:1: decoding it with --beam 50000 may read", "over the limit of 32,768",
                   "raise --max-tokens")


def test_batches_are_cut_to_the_token_bound_and_translate_as_one(mt_run):
    from bertforge import load
    from bertforge.translate import DecodeOptions, decode_tokens, translate

    loaded = load(mt_run["model"])
    sentences = ["red dog runs", "blue cat", "fish"]
    whole = translate(loaded.model, loaded.tokenizer, sentences, DecodeOptions(beam=2))
    options = DecodeOptions(beam=2, max_tokens=decode_tokens(8, DecodeOptions(beam=2), 512))  # ~one sentence a batch
    assert translate(loaded.model, loaded.tokenizer, sentences, options) == whole
    cost = loaded.tokenizer.encode_source_batch(["red dog runs"])
    service = __import__("bertforge.serve.translation", fromlist=["Translator"]).Translator(loaded)
    assert service.translate_cost(["red dog runs"], 2).tokens == decode_tokens(len(cost[0]), DecodeOptions(beam=2),
                                                                               loaded.config.max_position_embeddings)


# ---- 6. word vectors that hardly cover the corpus are refused before training ----------------------


def test_vectors_covering_too_little_of_the_corpus_are_refused_before_training(mt_run, tmp_path, capsys):
    from bertforge.formats.word_vectors import write_vectors

    vectors = str(tmp_path / "v.txt")
    write_vectors(vectors, ["apple", "pear", "plum"], torch.ones(3, 4).numpy())
    common = dict(source_lang="src", target_lang="tgt", train=mt_run["train"], dev=mt_run["valid"],
                  out=tmp_path / "run", arch="lstm", word_vectors=vectors, preset="cove-tiny", vocab_size=80, steps=2)
    assert main(command_line("train-translation", **common)) == 2
    one_line_error(capsys, "v.txt: only 0.0% of the", "training source words have a vector (--min-vector-coverage 0.5)",
                   "the commonest without one:", "--min-vector-coverage 0 trains anyway")
    assert not os.path.exists(tmp_path / "run" / "checkpoints")


# ---- 8. messages that say what is wrong, and the weak spots ---------------------------------------


@pytest.fixture(scope="module")
def cove_model(mt_run, tmp_path_factory):
    """A CoVe (MT-LSTM) model after 2 steps over fixed vectors of every word."""
    from bertforge.formats.word_vectors import write_vectors
    from bertforge.train_translation import train_translation

    root = tmp_path_factory.mktemp("cove")
    vectors = str(root / "v.txt")
    write_vectors(vectors, WORDS, torch.randn(len(WORDS), 8, generator=torch.Generator().manual_seed(0)).numpy())
    torch.manual_seed(0)
    train_translation("src", "tgt", mt_run["train"], mt_run["valid"], str(root / "run"), arch="lstm",
                      word_vectors=vectors, preset="cove-tiny", vocab_size=80, batch_tokens=400, steps=2, eval_every=2,
                      save_every=2, bleu_sentences=0, average=1, precision="fp32", progress=False)
    return str(root / "run" / "model")


def test_a_directory_or_a_file_in_the_wrong_place_is_named_as_such(mt_run, tmp_path, capsys):
    """Not "no such file" for what is there: a folder where a file is read, a file where a model's
    folder is, a file on the way to a path."""
    folder, file = tmp_path / "folder", tmp_path / "file.txt"
    folder.mkdir()
    file.write_text("red dog\n")
    for argv, said in (
            (["translate", "--model", str(file), "--input", str(file)], f"{file}: is a file, not a directory"),
            (["embed", "--model", mt_run["model"], "--input", str(folder)], f"{folder}: is a directory, not a file"),
            (["train-translation", "--source-lang", "src", "--target-lang", "tgt", "--train", mt_run["train"],
              "--dev", mt_run["valid"], "--out", str(tmp_path / "run"), "--arch", "lstm", "--word-vectors",
              str(folder)], f"{folder}: is a directory, not a file"),
            (["train-translation", "--source-lang", "src", "--target-lang", "tgt", "--train", str(folder),
              "--dev", mt_run["valid"], "--out", str(tmp_path / "run")],
             f"{folder}: is a directory; parallel text is named by its files' prefix")):
        assert main(argv) == 2
        one_line_error(capsys, said)
    from bertforge.config.base import _read_json
    from bertforge.formats.tensors import read_safetensors

    with pytest.raises(BertforgeError, match=f"{file}/config.json: {file} is a file, not a directory"):
        _read_json(str(file / "config.json"))
    with pytest.raises(BertforgeError, match=f"{folder}: is a directory, not a file"):
        read_safetensors(str(folder))  # safetensors' own word for it: "No such device"


@pytest.mark.parametrize("layers", ["1", "all", "last"])
def test_embed_layers_on_a_cove_model_is_refused(cove_model, tmp_path, capsys, layers):
    from bertforge.embed import Embedder

    (tmp_path / "in.txt").write_text("red dog\n")
    out = tmp_path / "v.npy"
    assert main(["embed", "--model", cove_model, "--input", str(tmp_path / "in.txt"), "--output", str(out),
                 "--layers", layers]) == 2
    one_line_error(capsys, f"{cove_model}: --layers is for BERT-family and ELMo models",
                   "chosen by --features (glove, cove, glove+cove)")
    assert not out.exists()
    embedder = Embedder.from_pretrained(cove_model)
    with pytest.raises(BertforgeError, match="--layers is for BERT-family"):
        embedder.encode(["red dog"], layers=1)
    assert embedder.encode(["red dog"]).shape[0] == 1  # its own vectors, as before


@pytest.mark.parametrize("features", ["scalar-mix", "pooler"])
def test_a_transformers_feature_set_on_a_cove_model_is_refused(cove_model, tmp_path, capsys, features):
    train = tmp_path / "train.tsv"
    train.write_text("sentence\tlabel\nred dog\t0\nblue cat\t1\n")
    assert main(["finetune", "--task", "sst2", "--model", cove_model, "--train", str(train), "--dev", str(train),
                 "--out", str(tmp_path / "run"), "--features", features]) == 2
    one_line_error(capsys, f"--features {features} is for Transformer encoders; a CoVe model's task network reads "
                           "glove, cove, glove+cove")
    assert not (tmp_path / "run").exists()


def test_finetuning_a_translation_model_says_what_to_do_instead(mt_run, tmp_path, capsys):
    train = tmp_path / "train.tsv"
    train.write_text("sentence\tlabel\nred dog\t0\nblue cat\t1\n")
    assert main(["finetune", "--task", "sst2", "--model", mt_run["model"], "--train", str(train), "--dev", str(train),
                 "--out", str(tmp_path / "run")]) == 2
    one_line_error(capsys, f"{mt_run['model']}: a translation Transformer model cannot be fine-tuned for sst2; "
                           "translation models train further on parallel text with train-translation --init")


def test_a_binary_vectors_header_larger_than_its_file_is_refused_before_allocating(tmp_path):
    """A header asking for 10^12 words of 16,000 dimensions (57 PiB): said from the file's size, at
    once, not as memory running out."""
    from bertforge.formats.word_vectors import read_vectors

    path = tmp_path / "v.bin"
    path.write_bytes(b"1000000000000 16000\nred " + b"\0" * 64000 + b"\n")
    with pytest.raises(BertforgeError, match=r"v.bin:1: the header says 1,000,000,000,000 words of 16,000 "
                                             r"dimensions, at least 64,002,000,000,000,000 bytes, but the file holds "
                                             r"64,005 after it: a truncated file, or a header inconsistent with it"):
        read_vectors(str(path))


@pytest.mark.parametrize("cut", ["rows", "columns"])
def test_a_marian_projection_cut_in_rows_or_columns_is_one_line(mt_run, tmp_path, cut):
    import shutil

    from safetensors.torch import load_file, save_file

    from bertforge import load

    model = tmp_path / "model"
    shutil.copytree(mt_run["model"], model)
    tensors = load_file(str(model / "model.safetensors"))
    name = "model.decoder.layers.1.self_attn.q_proj.weight"
    d = tensors[name].shape[0]
    tensors[name] = tensors[name][: d // 2] if cut == "rows" else tensors[name][:, : d // 2].contiguous()
    save_file(tensors, str(model / "model.safetensors"), metadata={"format": "pt"})
    shape = (d // 2, d) if cut == "rows" else (d, d // 2)
    with pytest.raises(BertforgeError, match=rf"model.safetensors: wrong shapes: {name} \({shape[0]}, {shape[1]}\) "
                                             rf"\(the model needs \({d}, {d}\)\)"):
        load(str(model))


def test_an_output_beside_a_pattern_it_does_not_match_is_accepted(tmp_path, monkeypatch):
    """A pattern reads only what it matches: `--corpus '*.txt' --out runs/x` is fine, an output the
    pattern would read next time is not; a recursive pattern stands for its whole folder."""
    from bertforge.paths import check_outputs

    monkeypatch.chdir(tmp_path)
    (tmp_path / "corpus").mkdir()
    for accepted in ({"corpus": ["*.txt"], "out": "runs/x"}, {"corpus": ["a.txt", "*.md"], "out": "runs/x"},
                     {"corpus": ["corpus/*.txt"], "out": "corpus/run"}, {"model": "m", "output": "preds.jsonl"}):
        check_outputs(accepted)
    for refused, words in (({"corpus": ["corpus/*.txt"], "output": "corpus/v.txt"}, "matches the input pattern"),
                           ({"corpus": ["corpus/**/*.txt"], "out": "corpus/run"}, "inside the input folder")):
        with pytest.raises(BertforgeError, match=words):
            check_outputs(refused)
