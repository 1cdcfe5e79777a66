"""CoVe inside a task model, as McCann et al. (2017) use it: the MT-LSTM trained by translation,
frozen, gives each word [GloVe; CoVe] (or either alone: the config's `task_features`, set by
`finetune --features`), and a task network of its own reads them.

Classification: a compact biattentive classification network (BCN, the paper's section 4): a ReLU
feed-forward layer, a biLSTM encoder, biattention of the text with itself (the paper's second
input is the same text for single-sentence tasks), an integrating biLSTM over [X; X - C; X * C],
then max, min, mean and self-attentive pooling, and a two-layer classifier (the paper's
batch-normalised maxout network, made compact). Tagging: a biLSTM over the features and a tag
per word. Saved in CoVe's layout, the encoder included, so that a fine-tuned model stands alone.
"""

from __future__ import annotations

import torch
from torch import nn

from ..errors import BertforgeError
from ..losses import classification_losses, tagging_losses
from ..models.cove import MTLSTM
from ..models.lstm import packed_bilstm as bilstm

HIDDEN = 150  # each direction of the task's biLSTMs (the paper's BCN: 300)
DROPOUT = 0.2


class OverFrozenCoVe(nn.Module):
    """The frozen MT-LSTM at `.backbone` (where every family's encoder is) and the features it gives."""

    def __init__(self, config):
        super().__init__()
        self.backbone = MTLSTM(config)
        self.backbone.requires_grad_(False)
        self.features = config.task_features
        self.width = {"glove": config.word_dim, "cove": 2 * config.encoder_hidden}
        self.dropout = nn.Dropout(DROPOUT)

    @property
    def feature_width(self) -> int:
        return sum(self.width[f] for f in self.features.split("+"))

    def train(self, mode: bool = True):
        super().train(mode)
        self.backbone.eval()  # frozen: no dropout inside it either
        return self

    def inputs(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """Each position's features (B, T, D) and the mask of real positions (B, T)."""
        mask = batch["attention_mask"].bool()
        ids = batch["input_ids"].masked_fill(~mask, 0)
        with torch.no_grad():
            parts = {"glove": self.backbone.vectors(ids)}
            if "cove" in self.features:
                parts["cove"] = self.backbone(ids, mask)
        return torch.cat([parts[f] for f in self.features.split("+")], dim=-1), mask


class BiattentiveClassifier(OverFrozenCoVe):
    architecture = "CoveBCNForSequenceClassification"

    def __init__(self, config):
        super().__init__(config)
        self.regression = config.problem_type == "regression"
        self.feedforward = nn.Sequential(nn.Linear(self.feature_width, 2 * HIDDEN), nn.ReLU())
        self.encoder = nn.LSTM(2 * HIDDEN, HIDDEN, batch_first=True, bidirectional=True)
        self.integrator = nn.LSTM(3 * 2 * HIDDEN, HIDDEN, batch_first=True, bidirectional=True)
        self.attention = nn.Linear(2 * HIDDEN, 1)  # self-attentive pooling's scores
        self.classifier = nn.Sequential(nn.Dropout(DROPOUT), nn.Linear(4 * 2 * HIDDEN, 2 * HIDDEN), nn.ReLU(),
                                        nn.Dropout(DROPOUT), nn.Linear(2 * HIDDEN, 1 if self.regression else config.num_labels))

    def logits(self, batch: dict) -> torch.Tensor:
        x, mask = self.inputs(batch)
        states = bilstm(self.encoder, self.dropout(self.feedforward(x)), mask)  # X = Y: (B, T, 2H)
        affinity = (states @ states.transpose(1, 2)).masked_fill(~mask[:, None, :], float("-inf"))  # (B, T, T)
        context = affinity.softmax(-1) @ states  # C: what each word draws from the text, (B, T, 2H)
        merged = torch.cat([states, states - context, states * context], dim=-1)
        integrated = bilstm(self.integrator, self.dropout(merged), mask)  # (B, T, 2H)
        outside = ~mask[..., None]
        biggest = integrated.masked_fill(outside, float("-inf")).amax(1)
        smallest = integrated.masked_fill(outside, float("inf")).amin(1)
        mean = integrated.sum(1) / mask.sum(1, keepdim=True)
        weights = self.attention(integrated).masked_fill(outside, float("-inf")).softmax(1)  # (B, T, 1)
        attended = (weights * integrated).sum(1)
        logits = self.classifier(torch.cat([biggest, mean, smallest, attended], dim=-1))
        return logits.squeeze(-1) if self.regression else logits

    def forward(self, batch: dict) -> tuple[dict, dict]:
        return classification_losses(self.logits(batch), batch["labels"], self.regression)


class CoveTagger(OverFrozenCoVe):
    architecture = "CoveForTokenClassification"

    def __init__(self, config):
        super().__init__(config)
        self.lstm = nn.LSTM(self.feature_width, HIDDEN, batch_first=True, bidirectional=True)
        self.classifier = nn.Linear(2 * HIDDEN, config.num_labels)

    def logits(self, batch: dict) -> torch.Tensor:
        x, mask = self.inputs(batch)
        return self.classifier(self.dropout(bilstm(self.lstm, self.dropout(x), mask)))  # (B, T, labels)

    def forward(self, batch: dict) -> tuple[dict, dict]:
        return tagging_losses(self.logits(batch), batch["labels"])


def task_model(task, config) -> nn.Module:
    """A CoVe model's task model: the BCN for classification, the biLSTM tagger for tagging."""
    if task.family == "classification":
        if getattr(task, "pair_column", None) is not None:
            raise BertforgeError("CoVe's classifier reads one text per example (the BCN over a text and itself); "
                                 "a sentence-pair task is not supported")
        return BiattentiveClassifier(config)
    if task.crf or task.tagger is not None:
        raise BertforgeError("--crf and --tagger are not for CoVe models; their tagger tags each word on its own")
    return CoveTagger(config)
