"""Multiple choice (SWAG-style): a context and N endings; each pair `[CLS] context [SEP] ending
[SEP]` gets one score from the pooled vector, and a softmax runs over the choices.

Reads CSV / TSV / JSONL. Columns: the context, the endings (a list of columns, or one JSONL field
holding a list), an optional prefix added before every ending (SWAG's `sent2`), and the index of
the right ending. Saved as HF `BertForMultipleChoice`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from ..config import HFConfig
from ..families import family_of
from ..errors import BertforgeError
from ..nn.heads import ClassifierHead
from ..metrics import accuracy
from ..nn.layers import init_weights
from .common import auxiliary_lm, finetuned_config, inference_batches, pad, place, read_records, token_types
from .common import field as column_of
from .kind import TaskKind


@dataclass
class MultipleChoiceTask(TaskKind):

    accepts = ("multiple-choice",)
    options = ("text_column", "choice_columns", "prefix_column", "label_column", "max_seq_length")
    request = {"context": str, "choices": list}
    inputs = 'a request dict {"context", "choices"}'
    onnx_choices = 2  # (batch, choices, sequence) inputs
    name: str = "multiple-choice"
    text_column: str = "context"
    choice_columns: list[str] = field(default_factory=lambda: ["choices"])  # one list-valued field, or several
    prefix_column: str | None = None
    label_column: str = "label"
    max_seq_length: int = 128
    kind: str = "multiple-choice"
    regression: bool = False
    metrics: tuple = ("accuracy",)

    def read(self, path: str, with_labels: bool = True) -> list[dict]:
        examples = []
        for number, record in read_records(path):
            where = place(path, number)
            context = column_of(path, number, record, self.text_column)
            choices = [column_of(path, number, record, c) for c in self.choice_columns]
            if len(choices) == 1 and isinstance(choices[0], list):
                choices = choices[0]
            prefix = column_of(path, number, record, self.prefix_column) if self.prefix_column else ""
            if len(choices) < 2 or not all(isinstance(c, str) for c in choices):
                raise BertforgeError(f"{where}: expected at least two endings as text")
            example = {"context": context, "choices": [f"{prefix} {c}".strip() for c in choices], "where": where}
            if with_labels:
                label = column_of(path, number, record, self.label_column)
                try:
                    label = int(label)
                except (TypeError, ValueError):
                    raise BertforgeError(f"{where}: label {label!r} is not the index of an ending") from None
                if not 0 <= label < len(choices):
                    raise BertforgeError(f"{where}: label {label} but only {len(choices)} endings")
                example["label"] = label
            examples.append(example)
        counts = {len(e["choices"]) for e in examples}
        if len(counts) > 1:
            raise BertforgeError(f"{path}: examples have different numbers of endings ({sorted(counts)})")
        return examples

    def label_names(self, train):
        return None

    def check_labels(self, examples, names) -> None:
        pass

    def featurize(self, examples: list[dict], tokenizer, names=None) -> tuple[list[dict], int]:
        contexts = [e["context"] for e in examples for _ in e["choices"]]
        endings = [c for e in examples for c in e["choices"]]
        encodings = tokenizer.encode_batch(contexts, endings, max_length=self.max_seq_length)
        features, k, cut = [], 0, 0
        for e in examples:
            n = len(e["choices"])
            group = encodings[k: k + n]
            k += n
            cut += any(g.truncated for g in group)
            f = {"ids": [g.ids for g in group], "types": [g.token_type_ids for g in group]}
            if "label" in e:
                f["label"] = e["label"]
            features.append(f)
        return features, cut

    def truncation_message(self, cut: int, total: int) -> str:
        return (f"{cut} of {total} examples have a (context, ending) pair longer than {self.max_seq_length} "
                "tokens, cut to fit (raise --max-seq-length to keep more)")

    @property
    def term(self) -> str:
        return "choice"

    @staticmethod
    def length(feature: dict) -> int:
        return max(len(ids) for ids in feature["ids"])

    def collate(self, features: list[dict], pad_id: int = 0) -> dict:
        flat_ids = [ids for f in features for ids in f["ids"]]
        C = len(features[0]["ids"])
        ids = pad(flat_ids, pad_id)
        batch = {"input_ids": ids.view(len(features), C, -1),
                 "token_type_ids": pad([t for f in features for t in f["types"]], 0).view(len(features), C, -1),
                 "attention_mask": pad([[1] * len(x) for x in flat_ids], 0).view(len(features), C, -1),
                 "tokens": sum(len(x) for x in flat_ids)}
        if "label" in features[0]:
            batch["labels"] = torch.tensor([f["label"] for f in features])
            batch["counts"] = {self.term: len(features)}
        return batch

    def encoder_model(self, config: HFConfig, family) -> "ChoiceScorer":
        return ChoiceScorer(config, family.build_encoder(config))

    def configure(self, config: HFConfig, names, classifier_dropout) -> HFConfig:
        extra = {} if classifier_dropout is None else {"classifier_dropout": classifier_dropout}
        if family_of(config).one_choice_label:  # HF's multiple-choice head projects to num_labels: one score
            extra["id2label"] = {0: "LABEL_0"}
        return finetuned_config(config, self, drop=("id2label", "problem_type"), **extra)

    def predict(self, model, features: list[dict], batch_size: int = 16) -> torch.Tensor:
        out = [None] * len(features)
        for rows, batch in inference_batches(model, self, features, batch_size):
            for i, row in zip(rows, model.logits(batch).float().cpu()):
                out[i] = row
        return torch.stack(out)  # (N, choices)

    def score(self, logits, features, names=None, examples=None) -> dict:
        return {"accuracy": round(accuracy(logits.argmax(-1).tolist(), [f["label"] for f in features]), 5)}

    def request_example(self, request: dict) -> dict:
        if len(request["choices"]) < 2:
            raise BertforgeError("multiple choice needs at least two choices")
        return {"context": request["context"], "choices": list(request["choices"])}

    def from_lines(self, lines):
        raise BertforgeError("multiple choice reads a CSV/JSONL file with a context and endings: give --input")

    def outputs(self, logits, names, examples, features=None) -> list[dict]:
        probabilities = logits.softmax(-1)
        return [{"context": e["context"], "choice": int(p.argmax()), "ending": e["choices"][int(p.argmax())],
                 "probabilities": [round(float(v), 5) for v in p]} for e, p in zip(examples, probabilities)]


class ChoiceScorer(nn.Module):
    """Encoder + dropout + one score per (context, ending) from the pooled vector; HF `BertForMultipleChoice`
    (GPT-1: the state at `extract`, HF `OpenAIGPTDoubleHeadsModel`'s multiple-choice head)."""

    architecture = "BertForMultipleChoice"

    def __init__(self, config: HFConfig, backbone: nn.Module):
        super().__init__()
        self.backbone = backbone
        dropout = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        self.classifier = ClassifierHead(config.hidden_size, 1, dropout)
        self.classifier.apply(lambda m: init_weights(m, config.initializer_range))

    def logits(self, batch: dict) -> torch.Tensor:
        return self._logits(batch)[0]

    def _logits(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """Scores (B, C) and the encoder's last hidden states (B * C, T, H)."""
        B, C, T = batch["input_ids"].shape
        types = token_types(self.backbone, batch["token_type_ids"].view(B * C, T))
        out = self.backbone(batch["input_ids"].view(B * C, T), types, batch["attention_mask"].view(B * C, T))
        return self.classifier(out.pooler_output).view(B, C), out.last_hidden_state  # (B, C)

    def forward(self, batch: dict) -> tuple[dict, dict]:
        logits, hidden = self._logits(batch)
        logits, labels = logits.float(), batch["labels"]
        return ({"choice": F.cross_entropy(logits, labels, reduction="sum"), **auxiliary_lm(self, hidden, batch)},
                {"choice": (logits.argmax(-1) == labels).sum()})
