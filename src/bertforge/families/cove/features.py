"""CoVe inside a task model, as McCann et al. (2017) use it: the MT-LSTM trained by translation,
frozen, gives each word [GloVe; CoVe] (or either alone: the config's `task_features`, set by
`finetune --features`), and a task network of its own reads them.

Classification: a compact biattentive classification network (BCN, the paper's section 4): a ReLU
feed-forward layer, a biLSTM encoder, biattention of the two inputs (a sentence pair's two texts,
each read by the MT-LSTM on its own; for one text, the paper's second input is the same text), an
integrating biLSTM over [X; X - C; X * C], then max, min, mean and self-attentive pooling of each,
and a two-layer classifier (the paper's batch-normalised maxout network, made compact). Tagging: a
biLSTM over the features and a tag per word. Saved in CoVe's layout, the encoder included, so that
a fine-tuned model stands alone.
"""

from __future__ import annotations

import torch
from torch import nn

from ...errors import BertforgeError
from ...losses import classification_losses, tagging_losses
from .model import MTLSTM
from ...nn.lstm import packed_bilstm as bilstm
from ...nn.frozen_outputs import FrozenOutputs

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

    def keep_frozen_outputs(self) -> None:
        """From now on keep the MT-LSTM's states per sentence (fine-tuning turns this on, never
        inference, which serves any number of texts)."""
        self.kept = FrozenOutputs()

    def inputs(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """Each position's features (B, T, D) and the mask of real positions (B, T)."""
        return self.features_of(batch["input_ids"], batch["attention_mask"].bool())

    def features_of(self, ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ids = ids.masked_fill(~mask, 0)
        with torch.no_grad():
            parts = {"glove": self.backbone.vectors(ids)}
        if "cove" in self.features:
            kept = self.__dict__.get("kept")  # a plain attribute: never in the state dict
            if kept is None:
                with torch.no_grad():
                    parts["cove"] = self.backbone(ids, mask)
            else:
                parts["cove"] = kept(ids, mask, lambda ids, mask: [self.backbone(ids, mask)])[0]
        return torch.cat([parts[f] for f in self.features.split("+")], dim=-1), mask


def split_pair(ids: torch.Tensor, mask: torch.Tensor, types: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Rows holding a text then its pair (segments 0 then 1, as `CoveTokenizer` writes them) as two
    batches, each left-aligned with its mask, so that the MT-LSTM reads each text on its own."""
    first, second = mask & (types == 0), mask & (types == 1)
    n_first, n_second = first.sum(1), second.sum(1)
    longest = int(n_second.max())
    at = torch.arange(longest, device=ids.device)
    pair_mask = at < n_second[:, None]
    pair = ids.gather(1, (n_first[:, None] + at).clamp(max=ids.shape[1] - 1)).masked_fill(~pair_mask, 0)
    width = int(n_first.max())
    return [(ids[:, :width].masked_fill(~first[:, :width], 0), first[:, :width]), (pair, pair_mask)]


class BiattentiveClassifier(OverFrozenCoVe):
    """The BCN. With `pairs`, the paper's two inputs: each text attends over the other, both are
    pooled and the classifier reads both; otherwise the text is its own second input."""

    architecture = "CoveBCNForSequenceClassification"

    def __init__(self, config, pairs: bool = False):
        super().__init__(config)
        self.regression, self.pairs = config.problem_type == "regression", pairs
        self.feedforward = nn.Sequential(nn.Linear(self.feature_width, 2 * HIDDEN), nn.ReLU())
        self.encoder = nn.LSTM(2 * HIDDEN, HIDDEN, batch_first=True, bidirectional=True)
        self.integrator = nn.LSTM(3 * 2 * HIDDEN, HIDDEN, batch_first=True, bidirectional=True)
        self.attention = nn.Linear(2 * HIDDEN, 1)  # self-attentive pooling's scores
        pooled = 4 * 2 * HIDDEN * (2 if pairs else 1)
        self.classifier = nn.Sequential(nn.Dropout(DROPOUT), nn.Linear(pooled, 2 * HIDDEN), nn.ReLU(),
                                        nn.Dropout(DROPOUT), nn.Linear(2 * HIDDEN, 1 if self.regression else config.num_labels))

    def logits(self, batch: dict) -> torch.Tensor:
        ids, mask = batch["input_ids"], batch["attention_mask"].bool()
        texts = split_pair(ids, mask, batch["token_type_ids"]) if self.pairs else [(ids, mask)]
        encoded = []
        for text_ids, text_mask in texts:
            x, text_mask = self.features_of(text_ids, text_mask)
            encoded.append((bilstm(self.encoder, self.dropout(self.feedforward(x)), text_mask), text_mask))
        pooled = [self.attend_and_pool(*encoded[0], *encoded[-1])]  # X with Y (Y = X for one text)
        if self.pairs:
            pooled.append(self.attend_and_pool(*encoded[1], *encoded[0]))
        logits = self.classifier(torch.cat(pooled, dim=-1))
        return logits.squeeze(-1) if self.regression else logits

    def attend_and_pool(self, states, mask, other, other_mask) -> torch.Tensor:
        """`states` (B, T, 2H) with what each word draws from `other` (B, U, 2H), integrated, then
        max, mean, min and self-attentive pooling: (B, 4 x 2H)."""
        affinity = (states @ other.transpose(1, 2)).masked_fill(~other_mask[:, None, :], float("-inf"))  # (B, T, U)
        context = affinity.softmax(-1) @ other
        merged = torch.cat([states, states - context, states * context], dim=-1)
        integrated = bilstm(self.integrator, self.dropout(merged), mask)  # (B, T, 2H)
        outside = ~mask[..., None]
        biggest = integrated.masked_fill(outside, float("-inf")).amax(1)
        smallest = integrated.masked_fill(outside, float("inf")).amin(1)
        mean = integrated.sum(1) / mask.sum(1, keepdim=True)
        weights = self.attention(integrated).masked_fill(outside, float("-inf")).softmax(1)  # (B, T, 1)
        return torch.cat([biggest, mean, smallest, (weights * integrated).sum(1)], dim=-1)

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
    if task.kind == "classification":
        return BiattentiveClassifier(config, pairs=getattr(task, "pair_column", None) is not None)
    if task.crf or task.tagger is not None:
        raise BertforgeError("--crf and --tagger are not for CoVe models; their tagger tags each word on its own")
    return CoveTagger(config)
