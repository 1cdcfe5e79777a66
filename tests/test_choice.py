"""Multiple choice: reading SWAG-style CSV and JSONL, overfitting, HF parity."""

import json

import pytest
import torch
from conftest import tiny_config, word_tokenizer

from bertforge import BertforgeError, save_pretrained
from bertforge.finetune import evaluate, finetune
from bertforge.load import load_finetuned
from bertforge.families.bert.model import Bert
from bertforge.tasks import make_task
from bertforge.training.trainer import TrainOptions

transformers = pytest.importorskip("transformers")

ITEMS = [("the dog barked", ["at the cat", "the sky sang", "a number slept"], 0),
         ("she opened the door", ["the door ate", "and walked in", "the moon typed"], 1),
         ("he drank the water", ["water drank him", "the chair ran", "because he was thirsty"], 2),
         ("the sun rose", ["over the hills", "under the soup", "the hills drank"], 0)]


def jsonl(path, items=ITEMS):
    path.write_text("".join(json.dumps({"context": c, "choices": e, "label": l}) + "\n" for c, e, l in items))
    return str(path)


@pytest.fixture(scope="module")
def base_model(tmp_path_factory):
    directory = tmp_path_factory.mktemp("base")
    tokenizer = word_tokenizer(directory, [c + " " + " ".join(e) for c, e, _ in ITEMS])
    torch.manual_seed(0)
    save_pretrained(Bert(tiny_config(vocab_size=tokenizer.vocab_size)), str(directory), tokenizer)
    return str(directory)


def test_swag_csv_with_a_prefix_column(tmp_path):
    path = tmp_path / "swag.csv"
    path.write_text("sent1,sent2,ending0,ending1,label\n"
                    "A man sits down.,He,\"reads a book, slowly\",eats the chair,0\n")
    task = make_task("multiple-choice", text_column="sent1", prefix_column="sent2",
                     choice_columns=["ending0", "ending1"])
    (example,) = task.read(str(path))
    assert example["choices"] == ["He reads a book, slowly", "He eats the chair"] and example["label"] == 0
    path.write_text("sent1,sent2,ending0,ending1,label\nA,He,x,y,2\n")
    with pytest.raises(BertforgeError, match=r"swag.csv, line 2: label 2 but only 2 endings"):
        task.read(str(path))


def test_a_tiny_model_overfits_choices_and_matches_transformers(base_model, tmp_path):
    data = jsonl(tmp_path / "train.jsonl")
    result = finetune(make_task("multiple-choice"), data, data, base_model, str(tmp_path / "run"), epochs=60,
                      batch_size=4, options=TrainOptions(out=str(tmp_path / "run"), lr=3e-3, warmup=0.1,
                                                         log_every=20, progress=False, precision="fp32"))
    assert result["best"]["score"] == 1.0
    model_dir = tmp_path / "run" / "model"
    assert evaluate(str(model_dir), data)["accuracy"] == 1.0
    theirs = transformers.AutoModelForMultipleChoice.from_pretrained(model_dir).eval()
    ours, task, tokenizer = load_finetuned(str(model_dir))
    features, _ = task.featurize(task.read(data), tokenizer)
    batch = task.collate(features[:2])
    with torch.no_grad():
        expected = theirs(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"],
                          attention_mask=batch["attention_mask"]).logits
        assert (ours.logits(batch) - expected).abs().max() <= 1e-5
