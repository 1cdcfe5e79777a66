"""Sequence classification and regression: overfitting a handful of examples, HF parity of the
saved model, the GLUE readers on the real files, layer-wise rates, and bad input."""

import io
import json
import os

import numpy as np
import pytest
import torch
from conftest import tiny_config, word_tokenizer

from bertforge import BertforgeError, Tokenizer, load_pretrained, save_pretrained
from bertforge.cli import main
from bertforge.finetune import evaluate, finetune, predict
from bertforge.load import load_finetuned
from bertforge.families.bert.model import Bert
from bertforge.families import encoder
from bertforge.tasks import make_task
from bertforge.tasks.classification import SequenceClassifier
from bertforge.training.optim import layer_groups, lr_at
from bertforge.training.trainer import TrainOptions

transformers = pytest.importorskip("transformers")

POSITIVE = ["a good film", "truly great acting", "good and great", "a great story", "good fun", "great cast",
            "very good indeed", "great great film"]
NEGATIVE = ["a bad film", "truly awful acting", "bad and awful", "an awful story", "bad fun", "awful cast",
            "very bad indeed", "awful awful film"]


@pytest.fixture(scope="module")
def base_model(tmp_path_factory):
    """A tiny 'pretrained' BERT with its own vocabulary, as a fine-tuning starting point."""
    directory = tmp_path_factory.mktemp("base")
    tokenizer = word_tokenizer(directory, POSITIVE + NEGATIVE)
    torch.manual_seed(0)
    save_pretrained(Bert(tiny_config(vocab_size=tokenizer.vocab_size)), str(directory), tokenizer)
    return str(directory)


def write_tsv(path, rows, header=("sentence", "label")):
    path.write_text("\t".join(header) + "\n" + "".join("\t".join(map(str, r)) + "\n" for r in rows))
    return str(path)


def quick(out, **kw):
    values = dict(out=str(out), lr=3e-3, warmup=0.1, log_every=5, progress=False, keep=1, precision="fp32")
    values.update(kw)
    return TrainOptions(**values)


def test_a_tiny_model_overfits_a_handful_of_sentences(base_model, tmp_path):
    rows = [(s, 1) for s in POSITIVE] + [(s, 0) for s in NEGATIVE]
    data = write_tsv(tmp_path / "train.tsv", rows)
    result = finetune(make_task("sst2"), data, data, base_model, str(tmp_path / "run"), epochs=15, batch_size=8,
                      options=quick(tmp_path / "run"))
    assert result["best"]["score"] == 1.0
    assert evaluate(str(tmp_path / "run" / "model"), data) == {"accuracy": 1.0, "examples": 16, "truncated": 0}


def test_saved_classifier_matches_transformers_with_label_names(base_model, tmp_path):
    rows = [(s, "pos") for s in POSITIVE] + [(s, "neg") for s in NEGATIVE]
    data = write_tsv(tmp_path / "train.tsv", rows, header=("text", "label"))
    finetune(make_task("classification"), data, data, base_model, str(tmp_path / "run"), epochs=2,
             batch_size=8, options=quick(tmp_path / "run"))
    directory = tmp_path / "run" / "model"
    config = json.loads((directory / "config.json").read_text())
    assert config["id2label"] == {"0": "neg", "1": "pos"} and config["architectures"] == ["BertForSequenceClassification"]
    theirs = transformers.AutoModelForSequenceClassification.from_pretrained(directory).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    ours, task, _ = load_finetuned(str(directory))
    batch = dict(tokenizer(POSITIVE[:3] + NEGATIVE[:2], padding=True, return_tensors="pt"))
    with torch.no_grad():
        assert (ours.logits(batch) - theirs(**batch).logits).abs().max() <= 1e-5
    assert theirs.config.id2label == {0: "neg", 1: "pos"}


def test_regression_overfits_scores(base_model, tmp_path):
    rows = [(s, 4.0 + i / 8) for i, s in enumerate(POSITIVE)] + [(s, 1.0 - i / 8) for i, s in enumerate(NEGATIVE)]
    data = write_tsv(tmp_path / "train.tsv", rows, header=("text", "score"))
    task = make_task("regression", label_column="score")
    result = finetune(task, data, data, base_model, str(tmp_path / "run"), epochs=60, batch_size=8,
                      options=quick(tmp_path / "run"))
    assert result["best"]["score"] > 0.95  # Pearson, a coefficient
    model, task, _ = load_finetuned(str(tmp_path / "run" / "model"))
    assert model.backbone.config.problem_type == "regression"


def test_predict_and_evaluate_through_the_command_line(base_model, tmp_path, capsys, monkeypatch):
    rows = [(s, 1) for s in POSITIVE] + [(s, 0) for s in NEGATIVE]
    data = write_tsv(tmp_path / "train.tsv", rows)
    assert main(["finetune", "--task", "sst2", "--train", data, "--dev", data, "--model", base_model,
                 "--out", str(tmp_path / "run"), "--epochs", "15", "--batch-size", "8", "--lr", "3e-3",
                 "--precision", "fp32", "--quiet"]) == 0
    model = str(tmp_path / "run" / "model")
    # the scores it was kept for, and a card saying what it is, travel with the model
    kept = json.loads((tmp_path / "run" / "model" / "eval_results.json").read_text())
    assert kept["accuracy"] == 1.0 and kept["step"] >= 1
    card = (tmp_path / "run" / "model" / "README.md").read_text()
    assert "fine-tuned by bertforge for `sst2`" in card and "AutoModelForSequenceClassification" in card
    assert "accuracy 100.0%" in card  # percent for people; fractions in the file
    capsys.readouterr()
    assert main(["evaluate", "--model", str(tmp_path / "run"), "--data", data]) == 0  # a run folder: its model/
    assert json.loads(capsys.readouterr().out)["accuracy"] == 1.0
    monkeypatch.setattr("sys.stdin", io.StringIO("a good film\nawful acting\n"))
    assert main(["predict", "--model", model]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["label"] for r in lines] == ["positive", "negative"] and lines[0]["text"] == "a good film"
    assert predict(model, data, str(tmp_path / "out.jsonl")) == 16
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == 16


def test_bad_input_names_file_and_line(base_model, tmp_path):
    train = write_tsv(tmp_path / "train.tsv", [("good", "1"), ("bad", "0")] * 8)
    dev = write_tsv(tmp_path / "dev.tsv", [("good", "1"), ("odd", "2")])
    with pytest.raises(BertforgeError, match=r"dev.tsv, line 3: label '2' never occurs in the training data"):
        finetune(make_task("classification", text_column="sentence"), train, dev, base_model, str(tmp_path / "r"),
                 options=quick(tmp_path / "r"))
    (tmp_path / "ragged.tsv").write_text("sentence\tlabel\ngood\t1\nbad\t0\textra\n")
    with pytest.raises(BertforgeError, match=r"ragged.tsv, line 3: 3 columns, the header has 2"):
        make_task("sst2").read(str(tmp_path / "ragged.tsv"))
    (tmp_path / "empty.tsv").write_text("")
    with pytest.raises(BertforgeError, match="empty.tsv: no examples"):
        make_task("sst2").read(str(tmp_path / "empty.tsv"))
    with pytest.raises(BertforgeError, match=r"train.tsv, line 2: no column 'text' \(found sentence, label\)"):
        make_task("classification").read(train)
    with pytest.raises(BertforgeError, match="unknown task 'sst3'"):
        make_task("sst3")
    one = write_tsv(tmp_path / "one.tsv", [("good", "1"), ("fine", "1")])
    with pytest.raises(BertforgeError, match="one.tsv: every training example has the label '1'"):
        make_task("classification", text_column="sentence").label_names(
            make_task("classification", text_column="sentence").read(one))


def test_long_texts_are_counted_as_truncated(base_model, tmp_path):
    task = make_task("sst2", max_seq_length=8)
    rows = [(" ".join(["good"] * 20), 1), ("bad", 0)]
    examples = task.read(write_tsv(tmp_path / "t.tsv", rows))
    features, cut = task.featurize(examples, Tokenizer.from_pretrained(base_model), task.label_names(examples))
    assert cut == 1 and len(features[0]["ids"]) == 8


def test_layer_groups_scale_rates_and_thaw_top_down():
    config = tiny_config(num_hidden_layers=3, id2label={0: "a", 1: "b"})
    model = SequenceClassifier(config, encoder(config))
    groups = layer_groups(model, 0.01, layer_decay=0.5, unfreeze_every=10)
    by_depth = {g["depth"]: g for g in groups}
    assert sorted(by_depth) == [0, 1, 2, 3, 4]
    assert [by_depth[d]["lr_scale"] for d in range(5)] == [0.0625, 0.125, 0.25, 0.5, 1.0]
    assert [by_depth[d]["unfreeze_at"] for d in range(5)] == [40, 30, 20, 10, 0]
    covered = {id(p) for g in groups for p in g["params"]}
    assert covered == {id(p) for p in model.parameters()}
    assert {id(p) for p in model.classifier.parameters()} <= {id(p) for g in groups if g["depth"] == 4 for p in g["params"]}


def test_slanted_triangular_schedule():
    rates = [lr_at(s, 100, 10, 1.0, "slanted") for s in range(100)]
    assert rates[0] == pytest.approx(1 / 32) and max(rates) == pytest.approx(1.0) and rates.index(1.0) == 10
    assert rates[99] < 0.05 and all(a <= b for a, b in zip(rates[:10], rates[1:11]))


@pytest.mark.parametrize("name, train_count, dev_count, labels", [
    ("sst2", 67349, 872, {"negative", "positive"}), ("mrpc", 3668, 408, {"not_equivalent", "equivalent"}),
    ("rte", 2490, 277, {"entailment", "not_entailment"}), ("cola", 8551, 1043, {"unacceptable", "acceptable"}),
])
def test_glue_readers_on_the_real_files(shared_data, name, train_count, dev_count, labels):
    task = make_task(name)
    folder = os.path.join(shared_data, "glue", {"sst2": "SST-2", "mrpc": "MRPC", "rte": "RTE", "cola": "CoLA"}[name])
    train = task.read(os.path.join(folder, "train.tsv"))
    dev = task.read(os.path.join(folder, "dev.tsv"))
    assert (len(train), len(dev)) == (train_count, dev_count)
    assert {e["label"] for e in train} == labels  # GLUE's 0/1 read as what they mean
    if name == "sst2":
        assert (train[0]["text"].strip(), train[0]["label"]) == ("hide new secretions from the parental units", "negative")
    assert all(e["text"] for e in train) and (task.pair_column is None or all(e["pair"] for e in train))


# A few rows of each GLUE task's files as the GLUE distribution lays them out (all their columns, in
# order; bare quote characters; MNLI's dev rows have five annotators' labels and the gold one apart),
# and the (text, pair, label) each must read as.
GLUE_FILES = {
    "mnli": ("train.tsv", [
        "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1_parse"
        "\tsentence2_parse\tsentence1\tsentence2\tlabel1\tgold_label",
        "0\t31193\t31193n\tgovernment\t( ( Conceptually ( cream skimming ) ) ( has ( ( two ( basic dimensions ) ) "
        ".. ) ) )\t( ( Product and ) geography )\t(ROOT (S (NP (JJ Conceptually))))\t(ROOT (S (NP (NN Product))))"
        "\tConceptually cream skimming has two basic dimensions - product and geography.\tProduct and geography "
        "are what make cream skimming work. \tneutral\tneutral",
        "1\t101457\t101457e\ttelephone\t( you ( ( know ( during ... ) ) ) )\t( You ( ( lose ( the things ) ) ) )"
        "\t(ROOT (S (NP (PRP you))))\t(ROOT (S (NP (PRP You))))\tyou know during the season and i guess at at "
        "your level uh you lose them\tYou lose the things to the \"following\" level if the people recall."
        "\tentailment\tentailment",
    ], [("Conceptually cream skimming has two basic dimensions - product and geography.",
         "Product and geography are what make cream skimming work. ", "neutral"),
        ("you know during the season and i guess at at your level uh you lose them",
         'You lose the things to the "following" level if the people recall.', "entailment")]),
    "mnli-dev": ("dev_matched.tsv", [
        "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1_parse"
        "\tsentence2_parse\tsentence1\tsentence2\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label",
        "0\t63735\t63735n\tslate\t( ( The ( new rights ) ) ( are ( nice enough ) ) )\t( Everyone ( ( really likes ) "
        "( the ( newest benefits ) ) ) )\t(ROOT (S (NP (DT The))))\t(ROOT (S (NP (NN Everyone))))\tThe new rights "
        "are nice enough\tEveryone really likes the newest benefits \tneutral\tentailment\tneutral\tneutral"
        "\tneutral\tneutral",
        "1\t91383\t91383c\tgovernment\t( ( This site ) ( includes ... ) )\t( ( The ( Government ( Executive "
        "articles ) ) ) ( ... ) )\t(ROOT (S (NP (DT This))))\t(ROOT (S (NP (DT The))))\tThis site includes a list "
        "of all award winners.\tThe Government Executive articles housed on the website are not able to be "
        "searched.\tneutral\tcontradiction\tcontradiction\tcontradiction\tcontradiction\tcontradiction",
    ], [("The new rights are nice enough", "Everyone really likes the newest benefits ", "neutral"),
        ("This site includes a list of all award winners.",
         "The Government Executive articles housed on the website are not able to be searched.", "contradiction")]),
    "qqp": ("train.tsv", [
        "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate",
        "133273\t213221\t213222\tHow is the life of a math student? Could you describe your own experiences?"
        "\tWhich level of prepration is enough for the exam jlpt5?\t0",
        "402555\t536040\t536041\tHow do I control my horny emotions?\tHow do you control your horniness?\t1",
        '360472\t364011\t490273\tWhat causes stool color to change to \"yellow\"?\tWhat can cause stool to come '
        "out as little balls?\t0",
    ], [("How is the life of a math student? Could you describe your own experiences?",
         "Which level of prepration is enough for the exam jlpt5?", "not_duplicate"),
        ("How do I control my horny emotions?", "How do you control your horniness?", "duplicate"),
        ('What causes stool color to change to "yellow"?', "What can cause stool to come out as little balls?",
         "not_duplicate")]),
    "qnli": ("train.tsv", [
        "index\tquestion\tsentence\tlabel",
        "0\tWhen did the third Digimon series begin?\tUnlike the two seasons before it and most of the seasons "
        "that followed, Digimon Tamers takes a darker and more realistic approach to its story.\tnot_entailment",
        "1\tWhich missile batteries often have individual launchers several kilometres from one another?\tWhen "
        "MANPADS is operated by specialists, batteries may have several dozen teams deploying separately in small "
        "sections; self-propelled air defence guns may deploy in pairs.\tnot_entailment",
        "2\tWhat two things does Popper argue Tarski's theory involves in an evaluation of truth?\tHe bases this "
        "interpretation on the fact that examples such as the one described above refer to two things: assertions "
        "and the facts to which they refer.\tentailment",
    ], [("When did the third Digimon series begin?", "Unlike the two seasons before it and most of the seasons "
         "that followed, Digimon Tamers takes a darker and more realistic approach to its story.", "not_entailment"),
        ("Which missile batteries often have individual launchers several kilometres from one another?",
         "When MANPADS is operated by specialists, batteries may have several dozen teams deploying separately in "
         "small sections; self-propelled air defence guns may deploy in pairs.", "not_entailment"),
        ("What two things does Popper argue Tarski's theory involves in an evaluation of truth?",
         "He bases this interpretation on the fact that examples such as the one described above refer to two "
         "things: assertions and the facts to which they refer.", "entailment")]),
    "stsb": ("train.tsv", [
        "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore",
        "0\tmain-captions\tMSRvid\t2012test\t0001\tnone\tnone\tA plane is taking off.\tAn air plane is taking off."
        "\t5.000",
        "1\tmain-captions\tMSRvid\t2012test\t0004\tnone\tnone\tA man is playing a large flute.\tA man is playing a "
        "flute.\t3.800",
        "2\tmain-news\theadlines\t2013\t0078\tnone\tnone\tIsrael \"holds\" two Palestinians\tIndia hangs 2001 "
        "parliament attacker\t0.000",
    ], [("A plane is taking off.", "An air plane is taking off.", 5.0),
        ("A man is playing a large flute.", "A man is playing a flute.", 3.8),
        ('Israel "holds" two Palestinians', "India hangs 2001 parliament attacker", 0.0)]),
    "wnli": ("train.tsv", [
        "index\tsentence1\tsentence2\tlabel",
        "0\tI stuck a pin through a carrot. When I pulled the pin out, it had a hole.\tThe carrot had a hole.\t1",
        "1\tJohn couldn't see the stage with Billy in front of him because he is so short.\tJohn is so short.\t1",
        "2\tThe police arrested all of the gang members. They were trying to stop the drug trade in the "
        "neighborhood.\tThe police were trying to stop the drug trade in the neighborhood.\t1",
        "3\tSteve follows Fred's example in everything. He influences him hugely.\tSteve influences him hugely.\t0",
    ], [("I stuck a pin through a carrot. When I pulled the pin out, it had a hole.", "The carrot had a hole.",
         "entailment"),
        ("John couldn't see the stage with Billy in front of him because he is so short.", "John is so short.",
         "entailment"),
        ("The police arrested all of the gang members. They were trying to stop the drug trade in the neighborhood.",
         "The police were trying to stop the drug trade in the neighborhood.", "entailment"),
        ("Steve follows Fred's example in everything. He influences him hugely.", "Steve influences him hugely.",
         "not_entailment")]),
}


@pytest.mark.parametrize("case", list(GLUE_FILES))
def test_glue_readers_read_each_tasks_own_layout(tmp_path, case):
    name, (filename, lines, expected) = case.split("-")[0], GLUE_FILES[case]
    (tmp_path / filename).write_text("\n".join(lines) + "\n", encoding="utf-8")
    examples = make_task(name).read(str(tmp_path / filename))
    assert [(e["text"], e["pair"], e["label"]) for e in examples] == expected
    assert [e["where"] for e in examples] == [f"{tmp_path / filename}, line {n}" for n in range(2, len(lines) + 1)]


def test_frozen_features_with_a_scalar_mix(base_model, tmp_path):
    rows = [(s, 1) for s in POSITIVE] + [(s, 0) for s in NEGATIVE]
    data = write_tsv(tmp_path / "train.tsv", rows)
    task = make_task("sst2", features="scalar-mix")
    finetune(task, data, data, base_model, str(tmp_path / "run"), epochs=5, batch_size=8,
             options=quick(tmp_path / "run"))
    model, _, _ = load_finetuned(str(tmp_path / "run" / "model"))
    base = load_pretrained(base_model)
    # The encoder did not move; the mix did.
    assert all(torch.equal(a, b) for a, b in zip(model.backbone.state_dict().values(), base.state_dict().values()))
    assert not torch.equal(model.mix.weights, torch.zeros_like(model.mix.weights))


def test_length_grouped_batches_cover_every_example_and_group_lengths():
    from bertforge.data.batches import Position
    from bertforge.tasks.common import FinetuneData

    features = [{"ids": [0] * n} for n in range(1, 1001)]
    data = FinetuneData(features, lambda rows: rows, lambda f: len(f["ids"]), batch_size=16, seed=3)
    seen = []
    for epoch in range(3):
        batches = data.epoch_batches(epoch)
        assert len(batches) == 62 and all(len(b) == 16 for b in batches)
        seen.append({int(i) for b in batches for i in b})
        # Within a batch the lengths are close (random batches would span ~900): pools of 800 sorted, cut in 16s.
        spreads = [np.ptp([len(features[i]["ids"]) for i in b]) for b in batches]
        assert np.mean(spreads) < 40 and max(spreads) < 200
    assert seen[0] != seen[1]  # the dropped remainder is random, not always the longest
    assert max(len(features[i]["ids"]) for s in seen for i in s) > 990
    step = next(data.batches(Position(0, 5)))
    assert step[0] == Position(0, 6)


def test_cosine_schedule_is_transformers():
    transformers = pytest.importorskip("transformers")
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    theirs = transformers.get_cosine_schedule_with_warmup(optimizer, num_warmup_steps=10, num_training_steps=100)
    expected = []
    for _ in range(100):
        expected.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        theirs.step()
    ours = [lr_at(s, 100, 10, 1.0, "cosine") for s in range(100)]
    # transformers' warm-up starts at 0 where ours starts at peak / warmup (the first step is not wasted)
    assert ours[10:] == pytest.approx(expected[10:], abs=1e-9)
    assert [lr_at(s, 100, 10, 1.0, "one-cycle") for s in range(100)] == ours


def test_json_arrays_read_like_jsonl_and_unknown_suffixes_are_refused(tmp_path):
    rows = [{"sentence": "a good film", "label": 1}, {"sentence": "a bad film", "label": 0}]
    task = make_task("sst2")
    (tmp_path / "a.json").write_text(json.dumps(rows, indent=2))
    (tmp_path / "b.json").write_text(json.dumps({"version": 1, "data": rows}))
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    expected = [(e["text"], e["label"]) for e in task.read(str(tmp_path / "c.jsonl"))]
    for name in ("a.json", "b.json"):
        assert [(e["text"], e["label"]) for e in task.read(str(tmp_path / name))] == expected
    (tmp_path / "d.json").write_text('[\n  {"sentence": "fine", "label": 1},\n  7\n]')
    with pytest.raises(BertforgeError, match=r"d.json, line 3: example 2 is not a JSON object"):
        task.read(str(tmp_path / "d.json"))
    (tmp_path / "e.xlsx").write_text("PK")
    with pytest.raises(BertforgeError, match="cannot tell the format"):
        task.read(str(tmp_path / "e.xlsx"))


def test_sample_limits_and_a_time_budget(base_model, tmp_path, capsys):
    rows = [row for pair in zip([(s, 1) for s in POSITIVE], [(s, 0) for s in NEGATIVE]) for row in pair]
    data = write_tsv(tmp_path / "train.tsv", rows)
    out = tmp_path / "run"
    assert main(["finetune", "--task", "sst2", "--train", data, "--dev", data, "--model", base_model, "--out", str(out),
                 "--max-train-samples", "8", "--max-eval-samples", "5", "--batch-size", "4", "--epochs", "1000000",
                 "--max-minutes", "0.002", "--quiet"]) == 0
    config = json.loads((out / "run_config.json").read_text())
    assert (config["train_examples"], config["dev_examples"]) == (8, 5)
    # 2 million steps planned, which no machine runs in 0.12 s: stopped by the clock, however fast
    assert "time budget reached" in capsys.readouterr().out
    assert (out / "model" / "config.json").exists()  # the best model so far is kept
