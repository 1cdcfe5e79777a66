"""ULMFiT's task model: its classifier over the AWD-LSTM (Howard & Ruder, 2018)."""

from __future__ import annotations

import torch
from torch import nn

from ...losses import classification_losses
from .model import AWDLSTM
from ...nn.heads import PoolingClassifierHead, concat_pool


class RecurrentClassifier(nn.Module):
    """ULMFiT's classifier (Howard & Ruder, 2018, section 3.3): the AWD-LSTM encoder reads the whole
    document in chunks of `CHUNK` words, its state carried from chunk to chunk (gradients flow
    through all of them), and concat pooling of the last layer's states ([last; max; mean] over the
    real words) feeds two blocks of batch norm, dropout and linear layers (50 units between). Inputs
    are right-padded, which a left-to-right LSTM never sees before a real word; a backward model
    reads each document's real words reversed. Saved in bertforge's own format (no HF class)."""

    architecture = "AWDLSTMForSequenceClassification"
    CHUNK = 70

    def __init__(self, config):
        super().__init__()
        self.backbone = AWDLSTM(config)
        self.regression = config.problem_type == "regression"
        first = config.output_p if config.classifier_dropout is None else config.classifier_dropout
        self.classifier = PoolingClassifierHead([3 * config.emb_sz, 50, 1 if self.regression else config.num_labels],
                                                [first, 0.1])

    def logits(self, batch: dict) -> torch.Tensor:
        ids, lengths = batch["input_ids"], batch["attention_mask"].sum(1)
        if self.backbone.config.backwards:  # row b: its real words reversed, then its padding
            steps = torch.arange(ids.shape[1], device=ids.device)[None, :]
            ids = ids.gather(1, torch.where(steps < lengths[:, None], lengths[:, None] - 1 - steps, steps))
        outputs, state = [], None
        for start in range(0, ids.shape[1], self.CHUNK):
            layers, state = self.backbone(ids[:, start:start + self.CHUNK], state)
            outputs.append(layers[-1])  # (B, chunk, H)
        logits = self.classifier(concat_pool(torch.cat(outputs, 1), lengths))
        return logits.squeeze(-1) if self.regression else logits

    def forward(self, batch: dict) -> tuple[dict, dict]:
        return classification_losses(self.logits(batch), batch["labels"], self.regression)


def task_model(task, config) -> RecurrentClassifier:
    """An AWD-LSTM's task model: ULMFiT's classifier (the family fine-tunes for nothing else)."""
    return RecurrentClassifier(config)
