"""Extractive QA: windows, answer labels, the answer search, overfitting, HF parity, SQuAD 2.0."""

import json
import os

import pytest
import torch
from conftest import tiny_config, word_tokenizer

from bertforge import BertforgeError, Tokenizer, save_pretrained
from bertforge.finetune import evaluate, finetune, predict
from bertforge.load import load_finetuned
from bertforge.checkpoint import read_config
from bertforge.families.bert.model import Bert
from bertforge.tasks import make_task
from bertforge.training.trainer import TrainOptions

transformers = pytest.importorskip("transformers")

CONTEXT = ("The castle was built in 1280 by King Edward. It stands on a hill above the river Conwy. "
           "Its walls are made of grey stone and it has eight towers.")
QUESTIONS = [("When was the castle built?", "1280"), ("Who built the castle?", "King Edward"),
             ("What river is below the castle?", "Conwy"), ("What are the walls made of?", "grey stone"),
             ("How many towers does it have?", "eight")]


def squad_file(path, questions=QUESTIONS, context=CONTEXT, impossible=()):
    qas = []
    for i, (question, answer) in enumerate(questions):
        answers = [{"text": answer, "answer_start": context.index(answer)}] if answer else []
        qas.append({"id": f"q{i}", "question": question, "answers": answers, "is_impossible": not answer})
    for j, question in enumerate(impossible):
        qas.append({"id": f"n{j}", "question": question, "answers": [], "is_impossible": True})
    path.write_text(json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": context, "qas": qas}]}]}))
    return str(path)


@pytest.fixture(scope="module")
def base_model(tmp_path_factory):
    directory = tmp_path_factory.mktemp("base")
    # a word vocabulary (see word_tokenizer): one machine's learned pieces made the overfitting test stall at 0.6
    tokenizer = word_tokenizer(directory, [CONTEXT] + [q for q, _ in QUESTIONS])
    torch.manual_seed(0)
    save_pretrained(Bert(tiny_config(vocab_size=tokenizer.vocab_size, max_position_embeddings=128)), str(directory),
                    tokenizer)
    return str(directory)


def test_windows_cover_the_context_and_each_token_has_one_home(base_model, tmp_path):
    task = make_task("qa", max_seq_length=24, doc_stride=6)
    questions = task.read(squad_file(tmp_path / "s.json"))
    tokenizer = Tokenizer.from_pretrained(base_model)
    features, _ = task.featurize(questions[:1], tokenizer)
    doc_length = len(tokenizer.tokenize(CONTEXT))
    assert len(features) > 3 and all(len(f["ids"]) <= 24 for f in features)
    homes = {}
    begin = 0
    for f in features:
        assert f["offsets"][0] == tokenizer.backend.encode(CONTEXT, add_special_tokens=False).offsets[begin]
        for i, is_home in enumerate(f["max_context"]):
            homes[begin + i] = homes.get(begin + i, 0) + is_home
        begin += 6
    assert sorted(homes) == list(range(doc_length)) and set(homes.values()) == {1}


def test_answer_labels_point_at_the_answer_tokens(base_model, tmp_path):
    task = make_task("qa", max_seq_length=40, doc_stride=10)
    questions = task.read(squad_file(tmp_path / "s.json"))
    tokenizer = Tokenizer.from_pretrained(base_model)
    features, _ = task.featurize(questions, tokenizer)
    for f in features:
        q = questions[f["question"]]
        if f["start"] == 0:  # this window does not hold the whole answer
            continue
        i, j = f["start"] - f["shift"], f["end"] - f["shift"]
        assert CONTEXT[f["offsets"][i][0]: f["offsets"][j][1]] == q["answers"][0]["text"]
    assert all(any(f["start"] > 0 for f in features if f["question"] == n) for n in range(len(questions)))


def test_a_tiny_model_overfits_questions_and_matches_transformers(base_model, tmp_path):
    data = squad_file(tmp_path / "s.json")
    result = finetune(make_task("qa", max_seq_length=128), data, data, base_model, str(tmp_path / "run"), epochs=300,
                      batch_size=5, options=TrainOptions(out=str(tmp_path / "run"), lr=3e-3, warmup=0.1,
                                                         log_every=50, progress=False, precision="fp32"))
    assert result["best"]["score"] == 1.0
    model_dir = tmp_path / "run" / "model"
    assert evaluate(str(model_dir), data)["exact"] == 1.0
    assert predict(str(model_dir), data, str(tmp_path / "pred.json")) == 5
    assert json.loads((tmp_path / "pred.json").read_text()) == {f"q{i}": a for i, (_, a) in enumerate(QUESTIONS)}
    theirs = transformers.AutoModelForQuestionAnswering.from_pretrained(model_dir).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    ours, _, _ = load_finetuned(str(model_dir))
    batch = dict(tokenizer([q for q, _ in QUESTIONS[:2]], [CONTEXT, CONTEXT[:60]], padding=True, return_tensors="pt"))
    with torch.no_grad():
        start, end = ours.logits(batch)
        expected = theirs(**batch)
    real = batch["attention_mask"] == 1
    assert (start - expected.start_logits)[real].abs().max() <= 1e-5
    assert (end - expected.end_logits)[real].abs().max() <= 1e-5


def test_squad2_no_answer_labels_and_scores(base_model, tmp_path):
    data = squad_file(tmp_path / "s.json", impossible=["Who painted the towers?"])
    task = make_task("qa", max_seq_length=64)
    questions = task.read(data)
    features, _ = task.featurize(questions, Tokenizer.from_pretrained(base_model))
    impossible = [f for f in features if questions[f["question"]]["impossible"]]
    assert impossible and all((f["start"], f["end"]) == (0, 0) for f in impossible)
    model = task.build_model(task.configure(read_config(base_model), None, None))
    with torch.no_grad():
        scores = task.score(task.predict(model.eval(), features), features, None, questions)
    assert {"HasAns_exact", "NoAns_exact", "best_f1", "best_f1_threshold"} <= set(scores)
    assert task.label_names(questions) is None and task.version_2
    # Prediction input carries no labels: answerable and unanswerable questions batch together.
    unlabelled = task.read(data, with_labels=False)
    features, _ = task.featurize(unlabelled, Tokenizer.from_pretrained(base_model))
    with torch.no_grad():
        logits = task.predict(model, features)
    texts, margins = task.answers(logits, features, unlabelled)
    task.null_threshold = min(margins.values()) - 1  # every question now prefers "no answer"
    assert set(task.outputs(logits, None, unlabelled, features).values()) == {""}
    task.version_2 = False  # a SQuAD 1.1 model always answers
    assert task.outputs(logits, None, unlabelled, features) == texts


def test_answer_start_that_misses_its_text_names_the_question(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"data": [{"paragraphs": [{"context": "abc def", "qas": [
        {"id": "x1", "question": "q?", "answers": [{"text": "def", "answer_start": 0}]}]}]}]}))
    with pytest.raises(BertforgeError, match=r"bad.json, question x1: answer_start 0 does not point at the answer 'def'"):
        make_task("qa").read(str(path))
    path.write_text(json.dumps({"version": 1}))
    with pytest.raises(BertforgeError, match="not a SQuAD file"):
        make_task("qa").read(str(path))
    path.write_text(json.dumps({"data": [{"paragraphs": [{"context": "abc", "qas": [
        {"id": "x2", "question": "q?", "answers": []}]}]}]}))
    with pytest.raises(BertforgeError, match="question x2: no answers, and not marked is_impossible"):
        make_task("qa").read(str(path))


def test_squad_dev_split_by_articles(shared_data):
    path = os.path.join(shared_data, "squad", "dev-v1.1.json")
    task = make_task("qa")
    everything = task.read(path)
    train, dev = task.read(path + "@0-37"), task.read(path + "@38-47")
    assert len(everything) == 10570 and len(train) + len(dev) == 10570
    assert not {q["context"] for q in train} & {q["context"] for q in dev}


def test_answer_search_uses_only_tokens_in_their_max_context_window():
    task = make_task("qa")
    context = "alpha beta gamma"
    offsets = [(0, 5), (6, 10), (11, 16)]
    question = [{"id": "q", "question": "?", "context": context}]

    def window(max_context):  # [CLS] ? [SEP] alpha beta gamma [SEP]
        return {"question": 0, "offsets": offsets, "shift": 3, "max_context": max_context, "ids": [0] * 7}

    features = [window([True, False, True]), window([False, True, False])]
    strong, weak = torch.full((7,), -5.0), torch.full((7,), -5.0)
    strong[4] = 9.0  # "beta" scores highest in the window that is not its home ...
    weak[4] = 6.0  # ... and lower in the window that is
    texts, _ = task.answers([(strong, strong), (weak, weak)], features, question)
    assert texts == {"q": "beta"}
    features[1]["max_context"] = [False, False, False]  # no window is beta's home: it is never chosen
    texts, _ = task.answers([(strong, strong), (weak, weak)], features, question)
    assert texts["q"] != "beta"
