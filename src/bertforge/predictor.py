"""Predictions in memory: a fine-tuned model kept loaded, requests in, answers out. What `Predictor`
gives a Python user and what `bertforge serve` answers over HTTP (both make examples with the
task's `example` and answer them with `answers`).

A request is a dict: {"text"[, "pair"]} for classification (the pair when the model reads pairs),
{"text"} for tagging (white space splits the words; entities come back at character offsets into
the text), {"question", "context"} for extractive QA, {"context", "choices"} for multiple choice.
"""

from __future__ import annotations

import torch

from .errors import BertforgeError
from .checkpoint import label_names_of
from .load import load_finetuned
from .quantize import for_inference


def answers(model, task, tokenizer, names, examples: list[dict], batch_size: int = 64) -> list[dict]:
    """One answer per example (made by the task's `example`), each saying whether its input was cut."""
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
    out = task.served(logits, names, examples, features)
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
        requests = []
        for x in inputs:
            request = x if isinstance(x, dict) else self.task.request_of(x)
            if request is None:
                raise BertforgeError(f"an input of a {self.task.name} model is {self.task.inputs}, not {x!r:.60}")
            requests.append(request)
        examples = [self.task.example(r) for r in requests]
        out = []
        with self.autocast:
            for start in range(0, len(examples), batch_size):
                out += answers(self.model, self.task, self.tokenizer, self.names, examples[start:start + batch_size],
                               batch_size)
        return out
