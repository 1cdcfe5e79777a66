"""Task files as Parquet, Arrow and saved `datasets` folders: every task family reads them into
exactly what it reads from the same rows as JSONL; class labels come back as names; bad rows and a
missing package are one-line errors."""

import json
import sys

import pytest

from bertforge import BertforgeError
from bertforge.cli import main
from bertforge.tasks import make_task

datasets = pytest.importorskip("datasets", reason="the datasets extra is not installed (pip install "
                               "'bertforge[datasets]')")
datasets.disable_progress_bars()

CLASSIFICATION = [{"sentence": "a good film", "pair": "fine", "label": 1, "score": 4.5},
                  {"sentence": "a bad film", "pair": "poor", "label": 0, "score": 1.0},
                  {"sentence": "great acting", "pair": "yes", "label": 1, "score": 3.25}]
TAGGING = [{"tokens": ["-DOCSTART-"], "tags": ["O"]},
           {"tokens": ["John", "lives", "in", "New", "York"], "tags": ["B-PER", "O", "O", "B-LOC", "I-LOC"]},
           {"tokens": ["Acme", "hired", "Mary"], "tags": ["B-ORG", "O", "B-PER"]}]
CONTEXT = "The tower was built in 1889 by Gustave Eiffel for the fair."
QA = [{"id": "q1", "question": "When was it built?", "context": CONTEXT,
       "answers": {"text": ["1889"], "answer_start": [CONTEXT.index("1889")]}},
      {"id": "q2", "question": "Who built it?", "context": CONTEXT,
       "answers": {"text": ["Gustave Eiffel", "Eiffel"],
                   "answer_start": [CONTEXT.index("Gustave"), CONTEXT.index("Eiffel")]}}]
CHOICE = [{"context": "She opened the door", "choices": ["and walked in.", "and the sky ate.", "blue."], "label": 0},
          {"context": "He sat down", "choices": ["on a cloud.", "on the chair.", "the."], "label": 1}]

FAMILIES = [("classification", dict(text_column="sentence", pair_column="pair"), CLASSIFICATION),
            ("regression", dict(text_column="sentence", label_column="score"), CLASSIFICATION),
            ("ner", {}, TAGGING), ("qa", {}, QA), ("multiple-choice", {}, CHOICE)]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def without_place(examples):
    """Examples without the `where` that names the line or row: the data alone."""
    return [{k: v for k, v in e.items() if k != "where"} for e in examples]


@pytest.mark.parametrize("name, options, rows", FAMILIES, ids=[f[0] for f in FAMILIES])
def test_each_family_reads_parquet_arrow_and_saved_folders_as_it_reads_jsonl(tmp_path, name, options, rows):
    task = make_task(name, **options)
    expected = task.read(write_jsonl(tmp_path / "rows.jsonl", rows))
    dataset = datasets.Dataset.from_list(rows)
    dataset.to_parquet(str(tmp_path / "rows.parquet"))
    dataset.save_to_disk(str(tmp_path / "saved"))
    arrow = next((tmp_path / "saved").glob("*.arrow"))  # the IPC stream save_to_disk writes
    datasets.DatasetDict({"train": dataset}).save_to_disk(str(tmp_path / "one-split"))
    for source in ("rows.parquet", "saved", arrow.name, "one-split", "one-split/train"):
        path = str(arrow if source == arrow.name else tmp_path / source)
        got = task.read(path)
        assert without_place(got) == without_place(expected), source
        assert got[0]["where"].startswith(f"{path}, row ")
    if name == "ner":  # the -DOCSTART- row is skipped, and rows keep their own numbers
        assert [s["where"] for s in got] == [f"{path}, row 2", f"{path}, row 3"]


def test_class_labels_are_read_as_names_and_a_datasetdict_names_its_splits(tmp_path):
    features = datasets.Features({
        "tokens": datasets.Sequence(datasets.Value("string")),
        "ner_tags": datasets.Sequence(datasets.ClassLabel(names=["O", "B-PER", "I-PER"])),
        "label": datasets.ClassLabel(names=["negative", "positive"])})
    data = datasets.Dataset.from_dict({"tokens": [["Ann", "Lee", "sang"], ["rain"]], "ner_tags": [[1, 2, 0], [0]],
                                       "label": [1, 0]}, features=features)
    splits = datasets.DatasetDict({"train": data, "validation": data})
    splits.save_to_disk(str(tmp_path / "dd"))
    data.to_parquet(str(tmp_path / "d.parquet"))
    for path in (str(tmp_path / "dd" / "validation"), str(tmp_path / "d.parquet")):
        sentences = make_task("ner").read(path)
        assert [s["tags"] for s in sentences] == [["B-PER", "I-PER", "O"], ["O"]]
        classes = make_task("classification", text_column="tokens").read  # tokens are no text: refused
        with pytest.raises(BertforgeError, match=r", row 1: the text is not a string"):
            classes(path)
    sst2 = make_task("classification", text_column="label", label_column="label")
    assert [e["label"] for e in sst2.read(str(tmp_path / "d.parquet"))] == ["positive", "negative"]
    with pytest.raises(BertforgeError, match=r"dd: a DatasetDict with splits train, validation; name the split to "
                                             r"read as .*dd/train"):
        make_task("ner").read(str(tmp_path / "dd"))


def test_bad_rows_name_the_file_and_row(tmp_path):
    def parquet(name, rows):
        datasets.Dataset.from_list(rows).to_parquet(str(tmp_path / name))
        return str(tmp_path / name)

    bad_tags = parquet("t.parquet", [TAGGING[1], {"tokens": ["a", "b"], "tags": ["O"]}])
    with pytest.raises(BertforgeError, match=r"^.*t\.parquet, row 2: 2 tokens but 1 tags$"):
        make_task("ner").read(bad_tags)
    missing = parquet("c.parquet", [{"text": "fine", "label": 1}, {"text": "ok", "label": 0}])
    with pytest.raises(BertforgeError, match=r"c\.parquet, row 1: no column 'sentence' \(found text, label\)"):
        make_task("sst2").read(missing)
    shifted = [dict(QA[0]), dict(QA[1], answers={"text": ["Eiffel"], "answer_start": [3]})]
    with pytest.raises(BertforgeError, match=r"q\.parquet, row 2: answer_start 3 does not point at the answer"):
        make_task("qa").read(parquet("q.parquet", shifted))
    label = parquet("m.parquet", [CHOICE[0], dict(CHOICE[1], label=5)])
    with pytest.raises(BertforgeError, match=r"m\.parquet, row 2: label 5 but only 3 endings"):
        make_task("multiple-choice").read(label)
    (tmp_path / "broken.parquet").write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(BertforgeError, match=r"broken\.parquet: not a readable Parquet file"):
        make_task("sst2").read(str(tmp_path / "broken.parquet"))
    (tmp_path / "plain").mkdir()
    with pytest.raises(BertforgeError, match=r"plain: a folder, but not one written by datasets"):
        make_task("sst2").read(str(tmp_path / "plain"))
    (tmp_path / "e.xlsx").write_text("PK")
    with pytest.raises(BertforgeError, match="cannot tell the format from the name"):
        make_task("sst2").read(str(tmp_path / "e.xlsx"))


@pytest.fixture(scope="module")
def base_model(tmp_path_factory):
    """A tiny 'pretrained' BERT to fine-tune from."""
    import torch
    from conftest import tiny_config

    from bertforge import Tokenizer, save_pretrained
    from bertforge.families.bert.model import Bert

    directory = tmp_path_factory.mktemp("base")
    tokenizer = Tokenizer.train(texts=[r["sentence"] for r in CLASSIFICATION] * 3, vocab_size=60, min_frequency=1)
    torch.manual_seed(0)
    save_pretrained(Bert(tiny_config(vocab_size=tokenizer.vocab_size)), str(directory), tokenizer)
    return str(directory)


def test_finetune_and_evaluate_from_parquet_and_a_saved_folder(base_model, tmp_path):
    datasets.Dataset.from_list(CLASSIFICATION * 4).to_parquet(str(tmp_path / "train.parquet"))
    datasets.Dataset.from_list(CLASSIFICATION).save_to_disk(str(tmp_path / "dev"))
    out = tmp_path / "run"
    assert main(["finetune", "--task", "sst2", "--train", str(tmp_path / "train.parquet"), "--dev",
                 str(tmp_path / "dev"), "--model", base_model, "--out", str(out), "--batch-size", "4",
                 "--epochs", "1", "--quiet"]) == 0
    config = json.loads((out / "run_config.json").read_text())
    assert (config["train_examples"], config["dev_examples"]) == (12, 3)
    assert main(["evaluate", "--model", str(out), "--data", str(tmp_path / "dev")]) == 0


def test_without_the_package_the_error_says_how_to_install_it(base_model, tmp_path, monkeypatch, capsys):
    path = str(tmp_path / "train.parquet")
    datasets.Dataset.from_list(CLASSIFICATION).to_parquet(path)
    datasets.Dataset.from_list(CLASSIFICATION).save_to_disk(str(tmp_path / "saved"))
    for module in [m for m in sys.modules if m.split(".")[0] in ("pyarrow", "datasets")]:
        monkeypatch.setitem(sys.modules, module, None)  # None in sys.modules: `import` raises ImportError
    capsys.readouterr()
    for source in (path, str(tmp_path / "saved")):
        with pytest.raises(BertforgeError, match=r"pip install 'bertforge\[datasets\]'") as error:
            make_task("sst2").read(source)
        assert str(error.value).startswith(source + ": ") and "\n" not in str(error.value)
        assert main(["finetune", "--task", "sst2", "--train", source, "--dev", source, "--model", base_model,
                     "--out", str(tmp_path / "run")]) == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]  # after a note on the model's positions
        assert err.startswith(f"bertforge: error: {source}: ") and err.endswith("pip install 'bertforge[datasets]'")


@pytest.mark.parametrize("suffix", [".parquet", ".arrow"])
def test_malformed_parquet_and_arrow_files_are_one_line_errors(tmp_path, suffix):
    from test_faults import assert_reader_survives

    data = datasets.Dataset.from_list([{"sentence": f"a café film {i}", "label": i % 2} for i in range(40)])
    if suffix == ".parquet":
        data.to_parquet(str(tmp_path / "good.parquet"))
    else:
        data.save_to_disk(str(tmp_path / "saved"))
        next((tmp_path / "saved").glob("*.arrow")).rename(tmp_path / "good.arrow")
    content = (tmp_path / f"good{suffix}").read_bytes()
    assert_reader_survives(lambda p: make_task("sst2").read(p), tmp_path / f"bad{suffix}", content)
