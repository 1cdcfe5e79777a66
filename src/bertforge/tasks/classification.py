"""Sentence and sentence-pair classification and regression over [CLS] (GLUE and any table).

Reads TSV / CSV / JSONL with chosen text, pair and label columns, or a named GLUE task with its
own column layout, labels and metrics. Saved as HF `BertForSequenceClassification` with the label
names in `config.json`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import nn

from ..config import HFConfig
from ..errors import BertforgeError
from ..losses import classification_losses
from ..metrics import accuracy, f1_binary, matthews_corrcoef, pearson, spearman
from ..nn.layers import init_weights
from ..nn.heads import ClassifierHead
from ..nn.scalar_mix import ScalarMix
from .common import (auxiliary_lm, encoder_inputs, finetuned_config, inference_batches, place,
                     read_records, token_types)
from .common import field as column_of
from .kind import TaskKind


@dataclass
class ClassificationTask(TaskKind):
    """How to read a classification or regression dataset and score predictions on it."""

    # `accepts` (classification, regression and every GLUE name) is set below GLUE's table
    options = ("text_column", "pair_column", "label_column", "max_seq_length", "header", "metrics", "features")
    request = {"text": str, "pair": str}
    inputs = "a text, a (text, pair) tuple or a request dict"
    ensembles = True

    name: str = "classification"
    text_column: str | int = "text"
    pair_column: str | int | None = None
    label_column: str | int = "label"
    labels: list[str] | None = None  # fixed label set (GLUE); else learned from the training file
    # What each of `labels` means, where the files write numbers (SST-2: 0, 1): the names shown in
    # config.json's id2label and in predictions. Files may use either.
    names: list[str] | None = None
    regression: bool = False
    metrics: list[str] = field(default_factory=lambda: ["accuracy"])
    header: bool = True
    max_seq_length: int = 128
    # "pooler": fine-tune everything, classify the pooled [CLS] vector (BERT). "scalar-mix": keep
    # the encoder frozen and classify a learned ELMo-style mix of all layers, mean-pooled.
    features: str = "pooler"
    # A similarity task (MRPC, QQP, STS-B): the pair has no natural order, so GPT-1 reads it both
    # ways and adds the two final states (Radford et al., 2018, 3.3). BERT reads one order.
    symmetric: bool = False
    kind: str = "classification"

    @classmethod
    def make(cls, name: str, options: dict) -> "ClassificationTask":
        if name in GLUE:
            task = glue_task(name, options.get("max_seq_length", 128))
            task.features = options.get("features", task.features)
            return task
        task = super().make(name, options)
        if name == "regression":  # one output, scored by correlation unless told otherwise
            task.regression, task.metrics = True, options.get("metrics", ["pearson", "spearman"])
        return task

    # ---- reading -----------------------------------------------------------------------------

    def read(self, path: str, with_labels: bool = True) -> list[dict]:
        """Examples {text, pair, label, where} from a file; `where` is "file, line N"."""
        examples = []
        for number, record in read_records(path, self.header):
            text = column_of(path, number, record, self.text_column)
            pair = None if self.pair_column is None else column_of(path, number, record, self.pair_column)
            if not isinstance(text, str) or (pair is not None and not isinstance(pair, str)):
                raise BertforgeError(f"{place(path, number)}: the text is not a string")
            example = {"text": text, "pair": pair, "where": place(path, number)}
            if with_labels:
                label = column_of(path, number, record, self.label_column)
                if label is None or isinstance(label, str) and not label.strip():  # not a class called "None"
                    raise BertforgeError(f"{place(path, number)}: no label (the column {self.label_column!r} is empty)")
                if self.regression:
                    try:
                        value = float(label)
                    except (TypeError, ValueError):
                        raise BertforgeError(f"{place(path, number)}: label {label!r} is not a number") from None
                    if not math.isfinite(value):  # else the loss turns NaN and the learning rate is blamed
                        raise BertforgeError(f"{place(path, number)}: label {label!r} is not a finite number")
                    label = value
                else:
                    label = str(label)
                    if self.names and self.labels and label in self.labels:
                        label = self.names[self.labels.index(label)]
                example["label"] = label
            examples.append(example)
        return examples

    def label_names(self, train: list[dict]) -> list[str] | None:
        """The classes, in a stable order: the task's own, else sorted (numerically if all numbers)."""
        if self.regression:
            return None
        if self.labels:
            names = list(self.names or self.labels)
        else:
            seen = {e["label"] for e in train}
            names = sorted(seen, key=lambda x: (0, int(x)) if x.lstrip("-").isdigit() else (1, x))
        known = set(names)
        for e in train:
            if e["label"] not in known:
                raise BertforgeError(f"{e['where']}: label {e['label']!r} is not one of {', '.join(names)}")
        if len({e["label"] for e in train}) < 2:
            where = train[0]["where"].rsplit(",", 1)[0]
            raise BertforgeError(f"{where}: every training example has the label {train[0]['label']!r}; "
                                 "a classifier needs at least two classes")
        return names

    def check_labels(self, examples: list[dict], names: list[str] | None) -> None:
        """Dev or test labels must be among the training labels: a model cannot predict a new one."""
        if names is None:
            return
        known = set(names)
        for e in examples:
            if e.get("label") is not None and e["label"] not in known:
                raise BertforgeError(f"{e['where']}: label {e['label']!r} never occurs in the training data "
                                     f"(known: {', '.join(names)})")

    # ---- features -----------------------------------------------------------------------------

    def featurize(self, examples: list[dict], tokenizer, names: list[str] | None) -> tuple[list[dict], int]:
        """Token ids for each example; returns the features and how many were truncated."""
        texts = [e["text"] for e in examples]
        pairs = [e["pair"] or "" for e in examples] if self.pair_column is not None else None
        encodings = tokenizer.encode_batch(texts, pairs, max_length=self.max_seq_length)
        swapped = [None] * len(examples)
        if self.symmetric and pairs is not None and tokenizer.transforms:
            swapped = tokenizer.encode_batch(pairs, texts, max_length=self.max_seq_length)
        index = {n: i for i, n in enumerate(names or [])}
        features = []
        for e, enc, other in zip(examples, encodings, swapped):
            f = {"ids": enc.ids, "types": enc.token_type_ids}
            if getattr(enc, "chars", None) is not None:  # ELMo's input
                f["chars"] = enc.chars
            if other is not None:
                f["swapped"] = other.ids
            if "label" in e:
                f["label"] = e["label"] if self.regression else index[e["label"]]
            features.append(f)
        return features, sum(enc.truncated for enc in encodings)

    def truncation_message(self, cut: int, total: int) -> str:
        return (f"{cut} of {total} examples are longer than {self.max_seq_length} tokens and were cut "
                "(raise --max-seq-length to keep more)")

    @property
    def term(self) -> str:
        """The loss term's name: what the trainer logs as `<term>_loss` (and `<term>_accuracy`)."""
        return "mse" if self.regression else "cls"

    @staticmethod
    def length(feature: dict) -> int:
        return len(feature["ids"])

    def collate(self, features: list[dict], pad_id: int = 0) -> dict:
        batch = {**encoder_inputs(features, pad_id), "counts": {self.term: len(features)}}
        if "swapped" in features[0]:
            swapped = encoder_inputs([{"ids": f["swapped"]} for f in features], pad_id)
            batch.update(swapped_ids=swapped["input_ids"], swapped_mask=swapped["attention_mask"])
        if "label" in features[0]:
            dtype = torch.float if self.regression else torch.long
            batch["labels"] = torch.tensor([f["label"] for f in features], dtype=dtype)
        return batch

    # ---- model, prediction, scores -----------------------------------------------------------

    def encoder_model(self, config: HFConfig, family) -> "SequenceClassifier":
        return SequenceClassifier(config, family.build_encoder(config))

    def configure(self, config: HFConfig, names: list[str] | None, classifier_dropout: float | None) -> HFConfig:
        """The config of the fine-tuned model: HF's label keys plus how to read inputs."""
        extra = {} if classifier_dropout is None else {"classifier_dropout": classifier_dropout}
        return finetuned_config(config, self, id2label=dict(enumerate(names)) if names else {0: "score"},
                                problem_type="regression" if self.regression else "single_label_classification",
                                **extra)

    def predict(self, model, features: list[dict], batch_size: int = 64) -> torch.Tensor:
        """Logits (N, labels), or scores (N,) for regression, in the order of `features`."""
        out = [None] * len(features)
        for rows, batch in inference_batches(model, self, features, batch_size):
            for i, row in zip(rows, model.logits(batch).float().cpu()):
                out[i] = row
        return torch.stack(out)

    def score(self, logits: torch.Tensor, features: list[dict], names=None, examples=None) -> dict:
        """The task's metrics from model outputs and the features' gold labels: rates as fractions in
        [0, 1], correlations as coefficients (see `metrics`)."""
        gold = [f["label"] for f in features]
        if self.regression:
            predictions = logits.view(-1).tolist()
        else:
            predictions = logits.argmax(-1).tolist()
        functions = {"accuracy": accuracy, "f1": f1_binary, "mcc": matthews_corrcoef,
                     "pearson": pearson, "spearman": spearman}
        return {name: round(functions[name](predictions, gold), 5) for name in self.metrics}

    # ---- requests and plain text ---------------------------------------------------------------

    def needed(self) -> set[str]:
        return {"text", "pair"} if self.pair_column is not None else {"text"}

    def request_example(self, request: dict) -> dict:
        return {"text": request["text"], "pair": request.get("pair")}

    def request_of(self, x) -> dict | None:
        if isinstance(x, str):
            return {"text": x}
        return {"text": x[0], "pair": x[1]} if isinstance(x, tuple) and len(x) == 2 else None

    def single_text(self) -> bool:
        return self.pair_column is None

    def in_layout(self, lines: list[str], names: list[str] | None) -> bool:
        """A table: its first line, split at tabs, is a header naming the text column (a headerless
        task, as CoLA, has that column's position), so that a .txt table stays one."""
        first = lines[0].split("\t")
        if self.header:
            return str(self.text_column) in first
        return isinstance(self.text_column, int) and -len(first) <= self.text_column < len(first)

    def from_lines(self, lines: list[str]) -> list[dict]:
        """Examples from plain text, one per line (standard input)."""
        if self.pair_column is not None:
            raise BertforgeError("this model reads sentence pairs: give --input with both columns")
        return [{"text": line, "pair": None, "where": f"<stdin>, line {i}"} for i, line in enumerate(lines, 1)]

    def outputs(self, logits: torch.Tensor, names: list[str] | None, examples: list[dict], features=None) -> list[dict]:
        """One JSON-ready prediction per example."""
        inputs = [{"text": e["text"], **({"pair": e["pair"]} if e.get("pair") is not None else {})} for e in examples]
        if self.regression:
            return [{**x, "score": float(v)} for x, v in zip(inputs, logits.view(-1))]
        probabilities = logits.softmax(-1)
        return [{**x, "label": names[int(p.argmax())], "probability": round(float(p.max()), 5),
                 "probabilities": {n: round(float(v), 5) for n, v in zip(names, p)}}
                for x, p in zip(inputs, probabilities)]


class SequenceClassifier(nn.Module):
    """Encoder + dropout + linear layer over the pooled [CLS] vector; HF `BertForSequenceClassification`.
    GPT-1's reads its state at `extract` (`OpenAIGPTForSequenceClassification`), both orders added
    for a similarity task (HF's class reads the one order it is given), and can add the auxiliary
    LM loss on its inputs (`tasks.common.auxiliary_lm`).

    With the task's `features="scalar-mix"`, the encoder is frozen and the head reads a learned mix
    of all layers instead (its weights are saved too, but `transformers` knows only the pooler path).
    """

    architecture = "BertForSequenceClassification"

    def __init__(self, config: HFConfig, backbone: nn.Module):
        super().__init__()
        self.backbone = backbone
        dropout = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        self.regression = config.problem_type == "regression"
        self.classifier = ClassifierHead(config.hidden_size, 1 if self.regression else config.num_labels, dropout,
                                         bias=config.score_bias)
        self.classifier.apply(lambda m: init_weights(m, config.initializer_range))
        self.mix = None
        if (config.bertforge_task or {}).get("features") == "scalar-mix":
            self.mix = ScalarMix(config.num_hidden_layers + 1)
            self.backbone.requires_grad_(False)

    def logits(self, batch: dict) -> torch.Tensor:
        return self._logits(batch)[0]

    def _logits(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """The logits and the encoder's last hidden states (B, T, H)."""
        types = token_types(self.backbone, batch["token_type_ids"])
        if self.mix is None:
            out = self.backbone(batch["input_ids"], types, batch["attention_mask"])
            pooled = out.pooler_output  # (B, H)
            if "swapped_ids" in batch:
                pooled = pooled + self.backbone(batch["swapped_ids"], None, batch["swapped_mask"]).pooler_output
            logits, hidden = self.classifier(pooled), out.last_hidden_state  # (B, labels)
        else:
            with torch.no_grad():  # frozen features
                self.backbone.eval()
                states = self.backbone(batch["input_ids"], types, batch["attention_mask"],
                                       output_hidden_states=True).hidden_states
            mask = batch["attention_mask"].unsqueeze(-1).to(states[0].dtype)
            mixed = self.mix(states)  # (B, T, H)
            logits, hidden = self.classifier((mixed * mask).sum(1) / mask.sum(1)), states[-1]
        return (logits.squeeze(-1) if self.regression else logits), hidden

    def forward(self, batch: dict) -> tuple[dict, dict]:
        logits, hidden = self._logits(batch)
        losses, correct = classification_losses(logits, batch["labels"], self.regression)
        return {**losses, **auxiliary_lm(self, hidden, batch)}, correct


# The GLUE tasks as the GLUE distribution lays them out (Wang et al., 2019), with their metrics;
# the first metric is the one the best model is chosen by.
GLUE = {
    "sst2": dict(text_column="sentence", label_column="label", labels=["0", "1"], names=["negative", "positive"],
                 metrics=["accuracy"]),
    "mrpc": dict(text_column="#1 String", pair_column="#2 String", label_column="Quality", labels=["0", "1"],
                 names=["not_equivalent", "equivalent"], metrics=["f1", "accuracy"], symmetric=True),
    "rte": dict(text_column="sentence1", pair_column="sentence2", label_column="label",
                labels=["entailment", "not_entailment"], metrics=["accuracy"]),
    "cola": dict(text_column=3, label_column=1, labels=["0", "1"], names=["unacceptable", "acceptable"],
                 metrics=["mcc", "accuracy"], header=False),
    "qqp": dict(text_column="question1", pair_column="question2", label_column="is_duplicate", labels=["0", "1"],
                names=["not_duplicate", "duplicate"], metrics=["f1", "accuracy"], symmetric=True),
    "mnli": dict(text_column="sentence1", pair_column="sentence2", label_column="gold_label",
                 labels=["contradiction", "entailment", "neutral"], metrics=["accuracy"]),
    "qnli": dict(text_column="question", pair_column="sentence", label_column="label",
                 labels=["entailment", "not_entailment"], metrics=["accuracy"]),
    "stsb": dict(text_column="sentence1", pair_column="sentence2", label_column="score", regression=True,
                 metrics=["pearson", "spearman"], symmetric=True),
    "wnli": dict(text_column="sentence1", pair_column="sentence2", label_column="label", labels=["0", "1"],
                 names=["not_entailment", "entailment"], metrics=["accuracy"]),
}


ClassificationTask.accepts = ("classification", "regression", *GLUE)


def glue_task(name: str, max_seq_length: int = 128) -> ClassificationTask:
    if name not in GLUE:
        raise BertforgeError(f"unknown GLUE task {name!r}; choose one of {', '.join(GLUE)}")
    return ClassificationTask(name=name, max_seq_length=max_seq_length, **GLUE[name])
