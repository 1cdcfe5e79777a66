"""Token classification: CoNLL reading, schemes, first-piece labels, overfitting, HF parity, output."""

import io
import json
import os

import pytest
import torch
from conftest import tiny_config, word_tokenizer

from bertforge import BertforgeError, Tokenizer, save_pretrained
from bertforge.cli import main
from bertforge.data.masking import IGNORE
from bertforge.finetune import evaluate, finetune, predict
from bertforge.load import load_finetuned
from bertforge.metrics import entities
from bertforge.families.bert.model import Bert
from bertforge.tasks import make_task
from bertforge.tasks.tagging import convert
from bertforge.training.trainer import TrainOptions

transformers = pytest.importorskip("transformers")

SENTENCES = [
    ("John Smith lives in Paris .", "B-PER I-PER O O B-LOC O"),
    ("Mary works for Acme Corp in London .", "B-PER O O B-ORG I-ORG O B-LOC O"),
    ("Acme Corp hired John .", "B-ORG I-ORG O B-PER O"),
    ("Paris and London are cities .", "B-LOC O B-LOC O O O"),
    ("Mary Smith visited Acme Corp .", "B-PER I-PER O B-ORG I-ORG O"),
    ("John met Mary in London .", "B-PER O B-PER O B-LOC O"),
]


def write_conll(path, sentences=SENTENCES, docstart=True):
    lines = ["-DOCSTART- -X- -X- O", ""] if docstart else []
    for words, tags in sentences:
        lines += [f"{w} NNP B-NP {t}" for w, t in zip(words.split(), tags.split())] + [""]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def base_model(tmp_path_factory):
    directory = tmp_path_factory.mktemp("base")
    tokenizer = word_tokenizer(directory, [s for s, _ in SENTENCES], pieces=["##son", "##ian"])  # smith-son-ian
    torch.manual_seed(0)
    save_pretrained(Bert(tiny_config(vocab_size=tokenizer.vocab_size)), str(directory), tokenizer)
    return str(directory)


def quick(out):
    return TrainOptions(out=str(out), lr=3e-3, warmup=0.1, log_every=5, progress=False, keep=1, precision="fp32")


def test_reading_conll_columns(tmp_path):
    path = write_conll(tmp_path / "train.txt")
    sentences = make_task("ner").read(path)
    assert len(sentences) == 6 and sentences[0]["words"][:2] == ["John", "Smith"]
    assert sentences[0]["tags"][:2] == ["B-PER", "I-PER"] and sentences[0]["where"].endswith("line 3")
    chunks = make_task("ner", tag_column=2).read(path)
    assert chunks[0]["tags"][0] == "B-NP"
    (tmp_path / "bad.txt").write_text("John NNP B-NP B-PER\nSmith NNP I-PER\n")
    with pytest.raises(BertforgeError, match=r"bad.txt, line 2: 3 columns where the file has 4"):
        make_task("ner").read(str(tmp_path / "bad.txt"))
    (tmp_path / "empty.txt").write_text("-DOCSTART- -X- -X- O\n\n")
    with pytest.raises(BertforgeError, match="empty.txt: no sentences"):
        make_task("ner").read(str(tmp_path / "empty.txt"))


def test_schemes_convert_without_changing_entities():
    iob2 = "B-PER I-PER O B-LOC B-LOC I-LOC O B-ORG".split()
    bioes = convert(iob2, "BIOES")
    assert bioes == "B-PER E-PER O S-LOC B-LOC E-LOC O S-ORG".split()
    iob1 = convert(iob2, "IOB1")
    assert iob1 == "I-PER I-PER O I-LOC B-LOC I-LOC O I-ORG".split()
    for tags in (bioes, iob1):
        assert entities(tags) == entities(iob2) and convert(tags, "IOB2") == iob2
    singles = "B-PER B-PER B-PER O B-LOC".split()  # three one-word people in a row
    assert convert(singles, "IOB1") == "I-PER B-PER B-PER O I-LOC".split()
    assert entities(convert(singles, "IOB1")) == entities(singles) == [("PER", 0, 0), ("PER", 1, 1), ("PER", 2, 2),
                                                                        ("LOC", 4, 4)]


def test_the_first_piece_of_each_word_carries_the_label(base_model, tmp_path):
    task = make_task("ner")
    sentences = task.read(write_conll(tmp_path / "t.txt", [("Smithsonian Acme", "B-ORG I-ORG")]))
    tokenizer = Tokenizer.from_pretrained(base_model)
    (feature,), cut = task.featurize(sentences, tokenizer, ["O", "B-ORG", "I-ORG"])
    encoding = tokenizer.encode_words([sentences[0]["words"]])[0]
    assert len(encoding.ids) > 4  # "smithsonian" is several pieces
    labelled = [(p, l) for p, l in enumerate(feature["labels"]) if l != IGNORE]
    assert labelled == [(1, 1), (encoding.word_ids.index(1), 2)]
    assert cut == 0


def test_a_tiny_model_overfits_ner_and_matches_transformers(base_model, tmp_path):
    data = write_conll(tmp_path / "train.txt")
    result = finetune(make_task("ner"), data, data, base_model, str(tmp_path / "run"), epochs=40, batch_size=6,
                      options=quick(tmp_path / "run"))
    assert result["best"]["score"] == 1.0
    model_dir = tmp_path / "run" / "model"
    scores = evaluate(str(model_dir), data)
    assert scores["f1"] == 1.0 and scores["accuracy"] == 1.0
    config = json.loads((model_dir / "config.json").read_text())
    assert config["architectures"] == ["BertForTokenClassification"] and config["id2label"]["0"] == "O"
    # without --crf: no CRF recorded, no heads file beside the HF weights (see test_crf.py for one with)
    assert "crf" not in config["bertforge_task"] and not (model_dir / "bertforge_heads.safetensors").exists()
    theirs = transformers.AutoModelForTokenClassification.from_pretrained(model_dir).eval()
    ours, _, _ = load_finetuned(str(model_dir))
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    batch = dict(tokenizer([s for s, _ in SENTENCES[:3]], padding=True, return_tensors="pt"))
    with torch.no_grad():
        assert (ours.logits(batch) - theirs(**batch).logits).abs().max() <= 1e-5

    out = tmp_path / "pred.conll"
    assert predict(str(model_dir), data, str(out), output_format="conll") == 6
    first = out.read_text().split("\n\n")[0].splitlines()
    assert first[0] == "John B-PER B-PER" and first[-1] == ". O O"  # word, gold (the file has it), predicted


def test_predict_from_standard_input_lists_entities(base_model, tmp_path, capsys, monkeypatch):
    data = write_conll(tmp_path / "train.txt")
    assert main(["finetune", "--task", "ner", "--train", data, "--dev", data, "--model", base_model,
                 "--out", str(tmp_path / "run"), "--epochs", "40", "--batch-size", "6", "--lr", "3e-3",
                 "--precision", "fp32", "--quiet"]) == 0
    capsys.readouterr()
    monkeypatch.setattr("sys.stdin", io.StringIO("John Smith lives in London .\n"))
    assert main(["predict", "--model", str(tmp_path / "run" / "model")]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["entities"] == [{"type": "PER", "start": 0, "end": 2, "text": "John Smith"},
                                  {"type": "LOC", "start": 4, "end": 5, "text": "London"}]


def test_unseen_dev_tags_and_truncation_are_reported(base_model, tmp_path):
    train = write_conll(tmp_path / "train.txt")
    dev = write_conll(tmp_path / "dev.txt", [("John lives", "B-PER O"), ("Acme Tower", "B-FAC I-FAC")], docstart=False)
    with pytest.raises(BertforgeError, match=r"dev.txt, line 4: tag 'B-FAC' never occurs in the training data"):
        finetune(make_task("ner"), train, dev, base_model, str(tmp_path / "r"), options=quick(tmp_path / "r"))
    task = make_task("ner", max_seq_length=5)
    sentences = task.read(train)
    features, cut = task.featurize(sentences, Tokenizer.from_pretrained(base_model), task.label_names(sentences))
    assert cut == 6  # every sentence is longer than 3 pieces
    assert len(features[1]["first_piece"]) < features[1]["words"]  # cut words get no piece (and predict O)


def test_conll2003_reader_on_the_real_files(shared_data):
    task = make_task("ner")
    train = task.read(os.path.join(shared_data, "conll2003", "train.txt"))
    valid = task.read(os.path.join(shared_data, "conll2003", "valid.txt"))
    assert (len(train), len(valid)) == (14041, 3250)
    assert task.label_names(train) == ["O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG", "B-PER", "I-PER"]


def test_tags_without_entity_prefixes_are_chosen_by_accuracy(tmp_path):
    task = make_task("ner", tag_column=1)  # the POS column
    sentences = task.read(write_conll(tmp_path / "t.txt"))
    assert task.label_names(sentences) == ["NNP"] and task.metrics == ("accuracy",)



def test_output_suffixes_choose_the_format_or_are_refused(base_model, tmp_path, capsys):
    data = write_conll(tmp_path / "train.txt")
    assert main(["finetune", "--task", "ner", "--train", data, "--dev", data, "--model", base_model,
                 "--out", str(tmp_path / "run"), "--steps", "2", "--batch-size", "6", "--quiet"]) == 0
    model = str(tmp_path / "run" / "model")
    assert main(["predict", "--model", model, "--input", data, "--output", str(tmp_path / "p.conll")]) == 0
    lines = (tmp_path / "p.conll").read_text().split("\n")
    assert len(lines[0].split()) == 3  # word, gold tag, predicted tag: CoNLL, chosen by the suffix
    assert main(["predict", "--model", model, "--input", data, "--output", str(tmp_path / "p.jsonl")]) == 0
    assert "entities" in json.loads((tmp_path / "p.jsonl").read_text().split("\n")[0])
    capsys.readouterr()
    for output, flags, message in (("p.csv", [], "written as .jsonl or .conll"),
                                   ("q.conll", ["--format", "jsonl"], "does not match")):
        assert main(["predict", "--model", model, "--input", data, "--output", str(tmp_path / output), *flags]) == 2
        assert message in capsys.readouterr().err
        assert not (tmp_path / output).exists()
    assert main(["embed", "--model", model, "--input", data, "--output", str(tmp_path / "v.csv")]) == 2
    assert ".npy (sentence vectors) or .jsonl" in capsys.readouterr().err
