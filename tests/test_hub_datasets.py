"""`hf:NAME[:CONFIG][@SPLIT]` where a command reads data (data/hub_datasets.py), offline: a local
folder of Parquet files stands for a Hub dataset (load_dataset reads both the same way, through the
datasets cache). finetune trains on one, a corpus and parallel text become the JSON lines their
readers take, and what cannot be had (offline and not cached, a split or column that is not there)
is one line, exit 2."""

import json
import os

import pytest
import torch
from conftest import tiny_config, word_tokenizer

from bertforge import BertforgeError, save_pretrained
from bertforge.cli import main
from bertforge.data.hub_datasets import HubDataset, parse, resolve
from bertforge.families.bert.model import Bert

datasets = pytest.importorskip("datasets", reason="the datasets extra is not installed (pip install "
                               "'bertforge[datasets]')")
datasets.disable_progress_bars()

GOOD = ["a good film", "truly great acting", "good and great", "a great story"]
BAD = ["a bad film", "truly awful acting", "bad and awful", "an awful story"]


@pytest.fixture
def offline(tmp_path, monkeypatch):
    """The Hub switched off (as HF_HUB_OFFLINE=1 does; datasets reads the variable at import, so
    its flags are set too), and the datasets and bertforge caches in `tmp_path`."""
    import huggingface_hub.constants

    for variable in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.setenv(variable, "1")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True, raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-datasets")
    monkeypatch.setenv("BERTFORGE_CACHE", str(tmp_path / "cache"))
    return tmp_path


def sst2_folder(root) -> str:
    """A dataset as the Hub lays one out, train and validation Parquet files with SST-2's columns."""
    features = datasets.Features({"sentence": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=["negative", "positive"])})
    rows = {"sentence": GOOD + BAD, "label": [1] * len(GOOD) + [0] * len(BAD)}
    folder = root / "sst2-mini"
    folder.mkdir()
    for split in ("train", "validation"):
        datasets.Dataset.from_dict(rows, features=features).to_parquet(str(folder / f"{split}.parquet"))
    return str(folder)


def test_the_syntax_names_dataset_config_and_split():
    assert parse("hf:nyu-mll/glue:sst2@validation") == HubDataset("nyu-mll/glue", "sst2", "validation")
    assert parse("hf:stanfordnlp/sst2", "validation") == HubDataset("stanfordnlp/sst2", None, "validation")
    assert parse("hf:Salesforce/wikitext:wikitext-2-raw-v1@train[:100]").split == "train[:100]"
    assert str(parse("hf:rajpurkar/squad", "train")) == "hf:rajpurkar/squad@train"
    for wrong in ("hf:", "hf::sst2", "hf:nyu-mll/glue:", "hf:glue@", "hf:my data", "data/train.tsv"):
        with pytest.raises(BertforgeError, match="hf:NAME\\[:CONFIG\\]\\[@SPLIT\\]"):
            parse(wrong)


def test_finetune_trains_on_a_dataset_named_by_hf(offline, capsys):
    tokenizer = word_tokenizer(offline, GOOD + BAD)
    torch.manual_seed(0)
    model = offline / "base"
    save_pretrained(Bert(tiny_config(vocab_size=tokenizer.vocab_size)), str(model), tokenizer)
    name = "hf:" + sst2_folder(offline)
    argv = ["finetune", "--task", "sst2", "--train", name, "--dev", name, "--model", str(model), "--steps", "1",
            "--batch-size", "4", "--precision", "fp32", "--quiet"]
    assert main([*argv, "--out", str(offline / "run")]) == 0, capsys.readouterr().err
    err = capsys.readouterr().err
    # the split each option reads by default, and where its copy is
    assert f"{name}@train: 8 rows, read from {offline / 'cache' / 'hub-datasets'}" in err
    assert f"{name}@validation: 8 rows" in err
    config = json.loads((offline / "run" / "model" / "config.json").read_text())
    assert sorted(config["id2label"].values()) == ["negative", "positive"]  # the class labels' names
    copies = sorted(os.listdir(offline / "cache" / "hub-datasets"))
    assert len(copies) == 2
    stamp = [os.stat(offline / "cache" / "hub-datasets" / c).st_mtime_ns for c in copies]
    assert main([*argv, "--out", str(offline / "again")]) == 0
    assert sorted(os.listdir(offline / "cache" / "hub-datasets")) == copies  # made once, then reused
    assert [os.stat(offline / "cache" / "hub-datasets" / c).st_mtime_ns for c in copies] == stamp


def test_a_corpus_and_parallel_text_become_the_json_lines_their_readers_take(offline):
    from bertforge.data.corpus import FileReport, read_units
    from bertforge.data.parallel import read_parallel

    folder = offline / "mixed"
    folder.mkdir()
    datasets.Dataset.from_dict({"text": ["The first document.", "The second one, é."], "id": [1, 2],
                                "translation": [{"en": "a dog", "de": "ein Hund"},
                                                {"en": "a cat", "de": "eine Katze"}]}).to_parquet(
        str(folder / "train.parquet"))
    corpus = resolve(f"hf:{folder}", "text")
    assert corpus.endswith(".jsonl")
    assert [json.loads(line) for line in open(corpus, encoding="utf-8")] == [
        {"text": "The first document."}, {"text": "The second one, é."}]  # only the text column
    assert len(list(read_units(corpus, FileReport(corpus)))) == 2
    pairs = resolve(f"hf:{folder}@train[:1]", "translation")
    assert read_parallel(pairs, "de", "en") == [("ein Hund", "a dog")]
    with pytest.raises(BertforgeError, match=r"no column 'body' \(columns: text, id, translation\); choose one "
                                             "with --text-field"):
        resolve(f"hf:{folder}", "text", column="body")


def test_what_cannot_be_had_is_one_line_exit_2(offline, capsys):
    assert main(["word-vectors", "--corpus", "hf:someone/never-downloaded", "--output",
                 str(offline / "v.txt")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "hf:someone/never-downloaded@train: not in the datasets cache" in err
    assert "HF_HUB_OFFLINE" in err
    folder = sst2_folder(offline)
    with pytest.raises(BertforgeError, match=r"^hf:.*sst2-mini@test: .*test"):  # no such split
        resolve(f"hf:{folder}", default_split="test")
    with pytest.raises(BertforgeError, match="needs the datasets package"):
        import sys

        with pytest.MonkeyPatch.context() as m:
            m.setitem(sys.modules, "datasets", None)
            resolve("hf:nyu-mll/glue:sst2")
