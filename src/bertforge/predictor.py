"""Predictions in memory: a fine-tuned model kept loaded, requests in, answers out. What `Predictor`
gives a Python user and what `bertforge serve` answers over HTTP (both call `example` and `answers`).

A request is a dict: {"text"[, "pair"]} for classification (the pair when the model reads pairs),
{"text"} for tagging (white space splits the words; entities come back at character offsets into
the text), {"question", "context"} for extractive QA, {"context", "choices"} for multiple choice.
"""

from __future__ import annotations

import re

import torch

from .errors import BertforgeError
from .checkpoint import label_names_of
from .load import load_finetuned
from .quantize import for_inference

# The words of a tagging request and where each starts in its text: white space splits words, as
# `predict` splits standard input, and the offsets let the answer point into the text.
WORD = re.compile(r"\S+")


def example(task, request: dict) -> dict:
    """The task's example for one request, its fields checked."""
    family, fields = task.family, set(request)
    needed = {"classification": {"text"}, "ner": {"text"}, "qa": {"question", "context"},
              "multiple-choice": {"context", "choices"}}[family]
    if family == "classification" and getattr(task, "pair_column", None) is not None:
        needed = {"text", "pair"}
    if fields != needed:
        wanted = ", ".join(f'"{n}"' for n in sorted(needed))
        got = ", ".join(sorted(fields)) or "nothing"
        raise BertforgeError(f"a {task.name} model reads {wanted}; got {got}")
    if family == "classification":
        return {"text": request["text"], "pair": request.get("pair"), "where": "request"}
    if family == "ner":
        matches = list(WORD.finditer(request["text"]))
        return {"words": [m.group() for m in matches], "offsets": [(m.start(), m.end()) for m in matches],
                "where": "request"}
    if family == "qa":
        return {"id": "0", "question": request["question"], "context": request["context"], "where": "request"}
    if len(request["choices"]) < 2:
        raise BertforgeError("multiple choice needs at least two choices")
    return {"context": request["context"], "choices": list(request["choices"]), "where": "request"}


def answers(model, task, tokenizer, names, examples: list[dict], batch_size: int = 64) -> list[dict]:
    """One answer per example (made by `example`), each saying whether its input was cut."""
    features, cuts = [], []
    for number, ex in enumerate(examples):
        mine, cut = task.featurize([ex], tokenizer, names)
        for f in mine:
            if "question" in f:  # QA's windows point at their question by position
                f["question"] = number
        features.extend(mine)
        cuts.append(bool(cut))
    with torch.no_grad():
        logits = task.predict(model, features, batch_size)
    if task.family == "qa":
        spans = task.spans(logits, features, [dict(e, id=str(i)) for i, e in enumerate(examples)])
        out = []
        for i in range(len(examples)):
            span = spans[str(i)]
            answer = {"answer": span["text"], "start": span["start"], "end": span["end"], "score": span["score"]}
            if task.version_2:
                answer.update(null_margin=span["margin"], no_answer=span["margin"] > task.null_threshold)
            out.append(answer)
    else:
        out = task.outputs(logits, names, examples, features)
    if task.family == "ner":  # entities pointed at by character offsets in the request's text
        for answer, ex in zip(out, examples):
            for entity in answer["entities"]:
                entity["start"], entity["end"] = ex["offsets"][entity["start"]][0], ex["offsets"][entity["end"] - 1][1]
            answer.pop("words")
    return [dict(answer, truncated=cut) for answer, cut in zip(out, cuts)]


class Predictor:
    """A fine-tuned model of any family and task, loaded once:

        predictor = Predictor.from_pretrained("runs/sst2/model")
        predictor(["a gripping film", "dull"])  # [{"text": ..., "label": "positive", "probability": ...}, ...]

    Inputs are texts (str), (text, pair) tuples for pair tasks, or request dicts (see the module's
    docstring); answers are what `bertforge predict` writes and the service returns."""

    def __init__(self, model, task, tokenizer, precision: str = "fp32"):
        self.model, self.task, self.tokenizer = model, task, tokenizer
        self.names = label_names_of(model)
        self.autocast = for_inference(model, precision)

    @classmethod
    def from_pretrained(cls, directory: str, device: str | torch.device = "cpu", precision: str = "fp32") -> "Predictor":
        """`precision`: fp32, bf16 (autocast) or int8 (the linear layers quantized; CPU only)."""
        return cls(*load_finetuned(directory, device), precision=precision)

    def __call__(self, inputs: list, batch_size: int = 64) -> list[dict]:
        if isinstance(inputs, (str, tuple, dict)):
            raise BertforgeError("give a list of inputs (one answer each), not a single one")
        family, requests = self.task.family, []
        for x in inputs:
            if isinstance(x, dict):
                requests.append(x)
            elif family == "qa" and isinstance(x, tuple) and len(x) == 2:
                requests.append({"question": x[0], "context": x[1]})
            elif family in ("classification", "ner") and isinstance(x, str):
                requests.append({"text": x})
            elif family == "classification" and isinstance(x, tuple) and len(x) == 2:
                requests.append({"text": x[0], "pair": x[1]})
            else:
                shapes = {"classification": "a text, a (text, pair) tuple or a request dict", "ner": "a text or "
                          "a request dict", "qa": "a (question, context) tuple or a request dict",
                          "multiple-choice": 'a request dict {"context", "choices"}'}[family]
                raise BertforgeError(f"an input of a {self.task.name} model is {shapes}, not {x!r:.60}")
        examples = [example(self.task, r) for r in requests]
        out = []
        with self.autocast:
            for start in range(0, len(examples), batch_size):
                out += answers(self.model, self.task, self.tokenizer, self.names, examples[start:start + batch_size],
                               batch_size)
        return out
