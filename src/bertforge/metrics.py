"""Evaluation metrics, each written from its reference definition (and tested against it):
accuracy, binary F1, Matthews correlation, Pearson and Spearman correlation, entity-level
precision/recall/F1 as `conlleval` and `seqeval` compute them, and SQuAD v1.1 / v2.0 exact match
and F1 as the official evaluation scripts compute them.

One scale everywhere: every rate (accuracy, F1, precision, recall, exact match) is a fraction in
[0, 1], as Hugging Face `evaluate` and `seqeval` return them, in every file bertforge writes
(metrics.jsonl, eval_results.json, `evaluate`'s JSON); correlations are coefficients in [-1, 1].
Only the console shows rates in percent (`format_scores`: `accuracy 91.3%`).
"""

from __future__ import annotations

import collections
import math
import re
import string
from collections.abc import Sequence

# ---- classification and regression ------------------------------------------------------------


def accuracy(predictions: Sequence, labels: Sequence) -> float:
    _same_length(predictions, labels)
    return sum(p == t for p, t in zip(predictions, labels)) / max(len(labels), 1)


def f1_binary(predictions: Sequence, labels: Sequence, positive=1) -> float:
    """F1 of the positive class (GLUE's F1 for MRPC and QQP); 0 when nothing is positive."""
    _same_length(predictions, labels)
    tp = sum(p == positive and t == positive for p, t in zip(predictions, labels))
    fp = sum(p == positive and t != positive for p, t in zip(predictions, labels))
    fn = sum(p != positive and t == positive for p, t in zip(predictions, labels))
    return 2 * tp / (2 * tp + fp + fn) if tp else 0.0


def matthews_corrcoef(predictions: Sequence, labels: Sequence) -> float:
    """Matthews correlation, multi-class form (Gorodkin, 2004); 0 when it is undefined (CoLA)."""
    _same_length(predictions, labels)
    n = len(labels)
    correct = sum(p == t for p, t in zip(predictions, labels))
    predicted = collections.Counter(predictions)
    true = collections.Counter(labels)
    classes = set(predicted) | set(true)
    numerator = correct * n - sum(predicted[k] * true[k] for k in classes)
    denominator = math.sqrt((n * n - sum(v * v for v in predicted.values())) * (n * n - sum(v * v for v in true.values())))
    return numerator / denominator if denominator else 0.0


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    _same_length(x, y)
    n = len(x)
    mx, my = sum(x) / n, sum(y) / n
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y))
    sxx = sum((a - mx) ** 2 for a in x)
    syy = sum((b - my) ** 2 for b in y)
    return sxy / math.sqrt(sxx * syy) if sxx and syy else 0.0


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Pearson correlation of the ranks, ties given their average rank."""
    return pearson(_ranks(x), _ranks(y))


def _ranks(values: Sequence[float]) -> list[float]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def _same_length(a: Sequence, b: Sequence) -> None:
    if len(a) != len(b):
        raise ValueError(f"{len(a)} predictions for {len(b)} labels")


# ---- entities (conlleval / seqeval) ---------------------------------------------------------------


def entities(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """(type, first, last) of every entity in a tag sequence, read as conlleval reads it.

    Works for IOB1, IOB2 and BIOES alike: an entity starts at B- or S-, or at I-/E- after O, after
    the end of another entity, or after a tag of another type; it ends before O, before B- or S-,
    after E- or S-, or before a change of type. Tags are `O` or `X-TYPE`.
    """
    found = []
    previous_tag, previous_type, begin = "O", "", 0
    for i, tag in enumerate(list(tags) + ["O"]):
        kind, _, entity_type = tag.partition("-")
        kind = kind[:1]
        entity_type = entity_type or "_"
        if _chunk_ends(previous_tag, kind, previous_type, entity_type):
            found.append((previous_type, begin, i - 1))
        if _chunk_starts(previous_tag, kind, previous_type, entity_type):
            begin = i
        previous_tag, previous_type = kind, entity_type
    return found


def _chunk_ends(prev: str, tag: str, prev_type: str, type_: str) -> bool:
    if prev in ("E", "S"):
        return True
    if prev in ("B", "I") and tag in ("B", "S", "O"):
        return True
    return prev not in ("O", ".") and prev_type != type_


def _chunk_starts(prev: str, tag: str, prev_type: str, type_: str) -> bool:
    if tag in ("B", "S"):
        return True
    if prev in ("E", "S", "O") and tag in ("E", "I"):
        return True
    return tag not in ("O", ".") and prev_type != type_


def entity_scores(predicted: Sequence[Sequence[str]], gold: Sequence[Sequence[str]]) -> dict:
    """Micro precision, recall and F1 over entities (exact type and span), overall and per type."""
    _same_length(predicted, gold)
    pred_set, gold_set = set(), set()
    for sentence, (p, g) in enumerate(zip(predicted, gold)):
        if len(p) != len(g):
            raise ValueError(f"sentence {sentence}: {len(p)} predicted tags for {len(g)} words")
        pred_set.update((sentence, *e) for e in entities(p))
        gold_set.update((sentence, *e) for e in entities(g))

    def score(pred: set, true: set) -> dict:
        hit = len(pred & true)
        precision = hit / len(pred) if pred else 0.0
        recall = hit / len(true) if true else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        return {"precision": precision, "recall": recall, "f1": f1, "support": len(true)}

    result = score(pred_set, gold_set)
    types = sorted({e[1] for e in pred_set | gold_set})
    result["per_type"] = {t: score({e for e in pred_set if e[1] == t}, {e for e in gold_set if e[1] == t})
                          for t in types}
    return result


# ---- SQuAD (the official evaluate-v1.1.py and evaluate-v2.0.py) ---------------------------------


def normalize_answer(text: str) -> str:
    """Lower case, drop punctuation and the articles a/an/the, collapse white space."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


_PUNCTUATION = set(string.punctuation)


def squad_exact(prediction: str, gold: str) -> int:
    return int(normalize_answer(prediction) == normalize_answer(gold))


def squad_f1(prediction: str, gold: str) -> float:
    """Token-overlap F1 of normalised answers. An empty side (SQuAD 2.0's no-answer) scores 1
    only when both are empty."""
    pred_tokens, gold_tokens = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not pred_tokens or not gold_tokens:
        return float(pred_tokens == gold_tokens)
    common = collections.Counter(pred_tokens) & collections.Counter(gold_tokens)
    overlap = sum(common.values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / len(pred_tokens), overlap / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def squad_scores(predictions: dict[str, str], golds: dict[str, list[str]]) -> dict:
    """Exact match and F1 as fractions (the official script's percent / 100), each the max over a
    question's gold answers. A question with no gold answer (SQuAD 2.0) has the single gold answer
    "". With any such question, the scores are also given for the answerable (`HasAns_`) and
    unanswerable (`NoAns_`) halves."""
    exact, f1 = {}, {}
    for qid, answers in golds.items():
        answers = [a for a in answers if normalize_answer(a)] or [""]
        prediction = predictions.get(qid, "")
        exact[qid] = max(squad_exact(prediction, a) for a in answers)
        f1[qid] = max(squad_f1(prediction, a) for a in answers)
    result = _means(exact, f1, list(golds))
    has_answer = [q for q, a in golds.items() if any(normalize_answer(x) for x in a)]
    no_answer = [q for q in golds if q not in set(has_answer)]
    if no_answer:
        for name, qids in (("HasAns", has_answer), ("NoAns", no_answer)):
            if qids:
                result.update({f"{name}_{k}": v for k, v in _means(exact, f1, qids).items()})
    return result


def _means(exact: dict, f1: dict, qids: list[str]) -> dict:
    n = max(len(qids), 1)
    return {"exact": sum(exact[q] for q in qids) / n, "f1": sum(f1[q] for q in qids) / n,
            "total": len(qids)}


def best_null_threshold(predictions: dict[str, str], null_margins: dict[str, float],
                        golds: dict[str, list[str]], metric: str = "f1") -> tuple[float, float]:
    """The no-answer threshold that maximises `metric` (as the official v2.0 script's search).

    `predictions` are the best non-null answers, `null_margins[qid]` the null score minus the best
    non-null score; a question is answered "" when its margin exceeds the threshold. Returns
    (threshold, score as a fraction).
    """
    score_of = squad_f1 if metric == "f1" else squad_exact
    has_answer = {q: any(normalize_answer(a) for a in answers) for q, answers in golds.items()}
    # Start from answering nothing: unanswerable questions are right, the rest wrong.
    current = sum(1 for q in golds if not has_answer[q])
    best, best_threshold = current, max(null_margins.values(), default=0.0) + 1.0
    for qid in sorted(golds, key=lambda q: null_margins.get(q, 0.0)):
        if has_answer[qid]:
            current += max(score_of(predictions.get(qid, ""), a) for a in golds[qid] if normalize_answer(a))
        elif normalize_answer(predictions.get(qid, "")):
            current -= 1
        if current > best:
            best, best_threshold = current, null_margins.get(qid, 0.0)
    return best_threshold, best / max(len(golds), 1)


# ---- the console ------------------------------------------------------------------------------------

# Scores that are rates (a share of examples, tokens or entities): fractions in files, percent on the
# console. Correlations (mcc, pearson, spearman) are not rates and print as coefficients.
RATES = ("accuracy", "f1", "precision", "recall", "exact")


def is_rate(name: str) -> bool:
    """Whether a metric key names a rate: `accuracy`, `f1`, ... alone or after a prefix
    (`mlm_accuracy`, `HasAns_exact`, `best_f1`); not a count (`HasAns_total`) or a threshold."""
    return any(name == r or name.endswith(f"_{r}") for r in RATES)


def format_scores(scores: dict, skip: tuple = ("step",)) -> str:
    """Scores for people: rates in percent with one decimal (`accuracy 91.3%`), losses and other
    numbers plain (`loss 0.412`, `pearson 0.873`), counts as integers; nested values are left out."""
    parts = []
    for name, value in scores.items():
        if name in skip or isinstance(value, (dict, list)) or value is None:
            continue
        parts.append(f"{name} {format_score(name, value)}")
    return ", ".join(parts)


def format_score(name: str, value) -> str:
    """One score as `format_scores` shows it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if is_rate(name):
        return f"{100 * value:.1f}%"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:.3f}" if abs(value) < 1000 else f"{value:,.0f}"
