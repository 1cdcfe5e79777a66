"""What the console says: one scale for scores (fractions in files, percent on the console), headers
before long commands (on standard error, after the input is checked), and progress for the long steps
as plain lines when the output is not a terminal."""

import functools
import importlib
import io
import json
import re

import pytest
import torch
from conftest import tiny_config

from bertforge import Tokenizer, save_pretrained
from bertforge.cli import main
from bertforge.data.words import WordVocab
from bertforge.load import load_finetuned
from bertforge.metrics import format_score, format_scores
from bertforge.families.bert.model import Bert
from bertforge.progress import progress
from bertforge.tasks import make_task

finetune_module = importlib.import_module("bertforge.finetune")  # the module; `bertforge.finetune` is the function

POSITIVE = ["a good film", "truly great acting", "good and great", "a great story"]
NEGATIVE = ["a bad film", "truly awful acting", "bad and awful", "an awful story"]
CLOCK = r"\b\d+(:\d\d){1,2}\b"  # a duration as progress lines write it; its value depends on the machine


@pytest.fixture(scope="module")
def base_model(tmp_path_factory):
    directory = tmp_path_factory.mktemp("base")
    tokenizer = Tokenizer.train(texts=POSITIVE + NEGATIVE, vocab_size=80, min_frequency=1)
    torch.manual_seed(0)
    save_pretrained(Bert(tiny_config(vocab_size=tokenizer.vocab_size)), str(directory), tokenizer)
    return str(directory)


def write_tsv(path):
    path.write_text("sentence\tlabel\n" + "".join(f"{s}\t1\n" for s in POSITIVE)
                    + "".join(f"{s}\t0\n" for s in NEGATIVE))
    return str(path)


def test_scores_print_as_percent_and_losses_as_numbers():
    scores = {"accuracy": 0.91345, "f1": 1.0, "mcc": 0.41234, "loss": 0.41234, "examples": 872, "truncated": 0,
              "HasAns_exact": 0.5, "HasAns_total": 2, "best_f1_threshold": -1.25, "mlm_accuracy": 0.2}
    assert format_scores(scores) == ("accuracy 91.3%, f1 100.0%, mcc 0.412, loss 0.412, examples 872, truncated 0, "
                                     "HasAns_exact 50.0%, HasAns_total 2, best_f1_threshold -1.250, mlm_accuracy 20.0%")
    assert format_score("pearson", -0.5) == "-0.500"  # a correlation is no rate: never a percent
    assert format_scores({"step": 3, "per_type": {"PER": {}}, "recall": 0.25}) == "recall 25.0%"


def test_a_finetune_run_writes_fractions_and_prints_percent(base_model, tmp_path, capsys):
    data = write_tsv(tmp_path / "d.tsv")
    out = tmp_path / "run"
    assert main(["finetune", "--task", "sst2", "--train", data, "--dev", data, "--model", base_model, "--out",
                 str(out), "--epochs", "2", "--batch-size", "4", "--lr", "3e-3", "--precision", "fp32"]) == 0
    printed = capsys.readouterr()
    evals = [json.loads(line)["eval"] for line in (out / "metrics.jsonl").read_text().splitlines() if '"eval"' in line]
    kept = json.loads((out / "model" / "eval_results.json").read_text())
    assert evals and all(0.0 <= e["accuracy"] <= 1.0 for e in evals) and 0.0 <= kept["accuracy"] <= 1.0
    assert kept["accuracy"] in {e["accuracy"] for e in evals}
    # the console: each evaluation, and the best, in percent with one decimal
    dev_lines = re.findall(r"^dev at step \d+: accuracy (\d+\.\d)%$", printed.err, re.M)
    assert [float(p) for p in dev_lines] == [round(100 * e["accuracy"], 1) for e in evals]
    assert re.search(rf"best accuracy {100 * kept['accuracy']:.1f}% at step {kept['step']}; model in", printed.out)
    assert f"accuracy {100 * kept['accuracy']:.1f}%" in (out / "model" / "README.md").read_text()


def test_evaluate_and_predict_print_a_header_on_standard_error(base_model, tmp_path, capsys, monkeypatch):
    data = write_tsv(tmp_path / "d.tsv")
    assert main(["finetune", "--task", "sst2", "--train", data, "--dev", data, "--model", base_model, "--out",
                 str(tmp_path / "run"), "--steps", "2", "--batch-size", "4", "--precision", "fp32", "--quiet"]) == 0
    model = load_finetuned(str(tmp_path / "run" / "model"))[0]
    parameters = sum(p.numel() for p in model.parameters())
    capsys.readouterr()

    assert main(["evaluate", "--model", str(tmp_path / "run"), "--data", data, "--device", "cpu"]) == 0
    printed = capsys.readouterr()
    result = json.loads(printed.out)  # standard output: the JSON alone, in fractions
    assert 0.0 <= result["accuracy"] <= 1.0 and result["examples"] == 8
    err = printed.err.splitlines()
    vocabulary = Tokenizer.from_pretrained(base_model).vocab_size
    assert err[:4] == [f"model: bert, 2 layers x 32, {parameters:,} parameters; vocabulary {vocabulary}",
                       "on cpu in fp32", f"data: 8 sst2 examples in {data}",
                       "output: the scores as JSON on standard output (fractions; in percent on standard error)"]
    assert err[4] == f"accuracy {100 * result['accuracy']:.1f}%, examples 8, truncated 0"

    monkeypatch.setattr("sys.stdin", io.StringIO("a good film\nawful acting\n"))
    assert main(["predict", "--model", str(tmp_path / "run"), "--device", "cpu"]) == 0
    printed = capsys.readouterr()
    assert [json.loads(line)["text"] for line in printed.out.splitlines()] == ["a good film", "awful acting"]
    assert printed.err.splitlines()[1:] == ["on cpu in fp32", "data: 2 sst2 examples from standard input",
                                            "output: standard output (JSON lines)"]
    assert printed.err.startswith("model: bert, 2 layers x 32, ")

    assert main(["predict", "--model", str(tmp_path / "run"), "--input", data, "--output",
                 str(tmp_path / "p.jsonl")]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[2:] == [f"data: 8 sst2 examples from {data}", f"output: {tmp_path / 'p.jsonl'} (JSON lines)",
                       f"wrote 8 predictions to {tmp_path / 'p.jsonl'}"]

    # bad input: one error line, no header before it
    (tmp_path / "bad.tsv").write_text("sentence\tlabel\nfine\t1\nshort\n")
    for argv in (["evaluate", "--model", str(tmp_path / "run"), "--data", str(tmp_path / "bad.tsv")],
                 ["predict", "--model", str(tmp_path / "run"), "--input", str(tmp_path / "missing.tsv")],
                 ["evaluate", "--model", str(tmp_path / "run"), "--data", str(tmp_path / "missing.tsv")]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("bertforge: error: "), err


def test_featurising_and_predicting_in_pieces_show_plain_lines_and_change_nothing(base_model, tmp_path,
                                                                                   monkeypatch):
    log = io.StringIO()  # not a terminal: a log file, CI, nohup
    monkeypatch.setattr(finetune_module, "progress_bar", functools.partial(progress, file=log, every=0))
    monkeypatch.setattr(finetune_module, "PROGRESS_FROM", 2)
    monkeypatch.setattr(finetune_module, "PIECE", 3)
    tokenizer = Tokenizer.from_pretrained(base_model)
    task = make_task("sst2")
    examples = task.read(write_tsv(tmp_path / "d.tsv"))
    names = task.label_names(examples)
    whole = task.featurize(examples, tokenizer, names)
    assert finetune_module.featurize(task, examples, tokenizer, names, "featurising dev", show=True) == whole
    lines = log.getvalue().split("\n")
    assert "\r" not in log.getvalue() and lines[-1] == ""
    assert [re.sub(CLOCK, "M:SS", line) for line in lines[:-1]] == [
        f"featurising dev: {n}/8 examples ({100 * n / 8:.0f}%), M:SS elapsed" + (", ~M:SS left" if n < 8 else "")
        for n in (3, 6, 8)]

    # QA: each window names its question by index, shifted by its piece's start
    context = "the film was good and the acting was great " * 6
    qas = [{"id": f"q{i}", "question": f"what was {w}?", "answers": [{"text": w, "answer_start": context.index(w)}]}
           for i, w in enumerate(["good", "great", "the acting", "the film", "acting"])]
    (tmp_path / "s.json").write_text(json.dumps({"data": [{"paragraphs": [{"context": context, "qas": qas}]}]}))
    qa = make_task("qa", max_seq_length=32, doc_stride=8)
    questions = qa.read(str(tmp_path / "s.json"))
    assert finetune_module.featurize(qa, questions, tokenizer, None, show=True) == qa.featurize(questions, tokenizer)

    classifier = SequenceClassifierFromTask(task, names)
    log.truncate(0), log.seek(0)
    features = whole[0]
    with torch.no_grad():
        pieces = finetune_module.predict_features(task, classifier, features, 2, "evaluating dev", show=True)
        assert torch.allclose(pieces, task.predict(classifier, features, 2), atol=1e-6)
    assert "\r" not in log.getvalue() and log.getvalue().splitlines()[-1].startswith("evaluating dev: 8/8 examples")


def SequenceClassifierFromTask(task, names):
    torch.manual_seed(0)
    config = task.configure(tiny_config(vocab_size=80), names, None)
    return task.build_model(config).eval()


def test_vocabulary_training_says_when_it_starts_and_ends_when_not_on_a_terminal(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(f"line {i} of the tiny corpus, with words repeated" for i in range(200)))
    assert main(["tokenizer", "train", str(corpus), "--out", str(tmp_path / "tok"), "--vocab-size", "120",
                 "--min-count", "1"]) == 0
    printed = capsys.readouterr()
    assert "\r" not in printed.err
    assert re.sub(CLOCK, "M:SS", printed.err).splitlines() == [
        f"data: 1 file(s), {corpus.stat().st_size / 1e6:.1f} MB",
        "vocabulary: 120 tokens, wordpiece, lowercased, min frequency 1", f"output: {tmp_path / 'tok'}",
        "learning a 120-token wordpiece vocabulary ...", "learning a 120-token wordpiece vocabulary: done in M:SS"]
    assert printed.out.startswith("wrote a 120-token WordPiece vocabulary")
    # a missing file: one error line and no header
    assert main(["tokenizer", "train", str(tmp_path / "none.txt"), "--out", str(tmp_path / "t")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("bertforge: error: ")


def test_word_vocabulary_counts_texts_with_plain_lines(capsys):
    vocab = WordVocab.train(["a b c", "a b", "a"] * 5, min_freq=1, show_progress=True)
    err = capsys.readouterr().err
    assert "\r" not in err
    assert re.sub(CLOCK, "M:SS", err).splitlines() == ["learning the vocabulary: 15 texts, M:SS elapsed"]
    assert vocab.words[-3:] == ["a", "b", "c"]
