"""Every metric against its reference implementation: scikit-learn, scipy, seqeval, and the
official SQuAD evaluation rules."""

import random

import pytest

from bertforge import metrics

sklearn_metrics = pytest.importorskip("sklearn.metrics")
scipy_stats = pytest.importorskip("scipy.stats")
seqeval_metrics = pytest.importorskip("seqeval.metrics")


def labels(n, classes, seed):
    rng = random.Random(seed)
    return [rng.choice(classes) for _ in range(n)]


@pytest.mark.parametrize("seed", range(5))
def test_classification_metrics_equal_scikit_learn(seed):
    gold, pred = labels(300, [0, 1], seed), labels(300, [0, 1], seed + 100)
    assert metrics.accuracy(pred, gold) == pytest.approx(sklearn_metrics.accuracy_score(gold, pred), abs=1e-12)
    assert metrics.f1_binary(pred, gold) == pytest.approx(sklearn_metrics.f1_score(gold, pred), abs=1e-12)
    assert metrics.matthews_corrcoef(pred, gold) == pytest.approx(sklearn_metrics.matthews_corrcoef(gold, pred), abs=1e-12)
    gold3, pred3 = labels(300, ["a", "b", "c"], seed), labels(300, ["a", "b", "c"], seed + 7)
    assert metrics.matthews_corrcoef(pred3, gold3) == pytest.approx(
        sklearn_metrics.matthews_corrcoef(gold3, pred3), abs=1e-12)


def test_degenerate_cases():
    assert metrics.matthews_corrcoef([1, 1, 1], [0, 1, 0]) == 0.0  # constant prediction, as sklearn
    assert metrics.f1_binary([0, 0], [0, 0]) == 0.0
    with pytest.raises(ValueError):
        metrics.accuracy([1], [1, 0])


@pytest.mark.parametrize("seed", range(5))
def test_correlations_equal_scipy_with_ties(seed):
    rng = random.Random(seed)
    x = [rng.choice([0.0, 1.0, 2.5, 3.0, 4.2, 5.0]) for _ in range(200)]  # many ties
    y = [v + rng.gauss(0, 1.5) for v in x]
    assert metrics.pearson(x, y) == pytest.approx(scipy_stats.pearsonr(x, y)[0], abs=1e-10)
    assert metrics.spearman(x, y) == pytest.approx(scipy_stats.spearmanr(x, y)[0], abs=1e-10)


def random_tags(rng, n, scheme):
    types = ["PER", "ORG", "LOC"]
    if scheme == "mess":  # ill-formed sequences: I- after O, type changes inside, stray E-
        return [rng.choice(["O", "B-PER", "I-PER", "I-ORG", "E-LOC", "S-ORG", "B-LOC"]) for _ in range(n)]
    tags, i = [], 0
    while i < n:
        if rng.random() < 0.5:
            tags.append("O")
            i += 1
            continue
        t, length = rng.choice(types), rng.randint(1, 3)
        for j in range(length):
            if scheme == "IOB2":
                tags.append(("B-" if j == 0 else "I-") + t)
            elif scheme == "IOB1":
                tags.append("I-" + t)
            else:  # BIOES
                tags.append(("S-" if length == 1 else "B-" if j == 0 else "E-" if j == length - 1 else "I-") + t)
        i += length
    return tags[:n]


@pytest.mark.parametrize("scheme", ["IOB2", "IOB1", "BIOES", "mess"])
def test_entity_scores_equal_seqeval(scheme):
    rng = random.Random(scheme)
    gold = [random_tags(rng, rng.randint(1, 30), scheme) for _ in range(300)]
    pred = [[t if rng.random() < 0.8 else rng.choice(["O", "B-PER", "I-ORG", "I-LOC", "E-PER", "S-LOC"])
             for t in sentence] for sentence in gold]
    ours = metrics.entity_scores(pred, gold)
    assert ours["f1"] == pytest.approx(seqeval_metrics.f1_score(gold, pred), abs=1e-12)
    assert ours["precision"] == pytest.approx(seqeval_metrics.precision_score(gold, pred), abs=1e-12)
    assert ours["recall"] == pytest.approx(seqeval_metrics.recall_score(gold, pred), abs=1e-12)
    from seqeval.metrics.sequence_labeling import get_entities

    for sentence in gold + pred:
        assert sorted(metrics.entities(sentence)) == sorted(get_entities(sentence))


def test_squad_normalisation_and_scores_follow_the_official_script():
    assert metrics.normalize_answer("The  Quick, brown FOX!") == "quick brown fox"
    assert metrics.normalize_answer("an apple a day") == "apple day"
    assert metrics.squad_exact("the Eiffel Tower.", "Eiffel tower") == 1
    # F1 over tokens: "denver broncos" vs "the broncos": one shared token of 2 and 1.
    assert metrics.squad_f1("Denver Broncos", "the Broncos") == pytest.approx(2 * 0.5 * 1 / 1.5)
    scores = metrics.squad_scores({"q1": "Denver Broncos", "q2": "1990", "q3": ""},
                                  {"q1": ["Broncos", "Denver Broncos"], "q2": ["in 1991"], "q3": ["", ""]})
    # fractions in [0, 1]: the official script's percent / 100
    assert scores["exact"] == pytest.approx(2 / 3)
    assert scores["f1"] == pytest.approx(2 / 3)
    assert scores["HasAns_total"] == 2 and scores["NoAns_exact"] == 1.0 and scores["HasAns_exact"] == 0.5


def test_null_threshold_search_maximises_f1():
    golds = {"a": ["paris"], "b": [""], "c": ["rome"], "d": [""]}
    predictions = {"a": "paris", "b": "london", "c": "milan", "d": "oslo"}
    margins = {"a": -3.0, "b": 2.0, "c": 0.5, "d": -1.0}
    threshold, best = metrics.best_null_threshold(predictions, margins, golds)
    # Answering only "a" (margin -3) and "d" loses d; the best is to answer where margin <= -3.
    chosen = {q: (predictions[q] if margins[q] <= threshold else "") for q in golds}
    assert metrics.squad_scores(chosen, golds)["f1"] == pytest.approx(best)
    for t in sorted(margins.values()) + [10.0]:
        other = {q: (predictions[q] if margins[q] <= t else "") for q in golds}
        assert metrics.squad_scores(other, golds)["f1"] <= best + 1e-9
