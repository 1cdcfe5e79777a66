"""AWD-LSTM's pretraining objective (ULMFiT's language model)."""

from __future__ import annotations

import torch

from ...losses import sampled_softmax_loss, vocab_loss
from .config import AWDLSTMConfig
from .model import AWDLSTMLanguageModel


class RecurrentLMPretraining(AWDLSTMLanguageModel):
    """AWD-LSTM's objective over truncated-BPTT chunks (`data.streams`): every next word, plus
    activation regularisation (AR: `ar` x the mean square of the last layer's dropped output) and
    temporal activation regularisation (TAR: `tar` x the mean square of the step-to-step change of
    its raw output), both while training only (Merity et al.'s alpha = 2, beta = 1).

    The hidden state is carried from one chunk to the next of the same stream ("train", "eval"),
    detached, and reset where a chunk says `reset`. `carried()` and `carry()` hand the training
    stream's state to a checkpoint and back, so that a resumed run continues exactly. Its weights
    are the language model's (it is one), so what it saves loads as `AWDLSTMLanguageModel`."""

    def __init__(self, config: AWDLSTMConfig, ar: float = 2.0, tar: float = 1.0, sampled: int | None = None):
        super().__init__(config)
        self.loss_weights = {"ar": ar, "tar": tar}
        self.sampled = sampled  # train with a sampled softmax of this many words (held-out loss: the full one)
        self.states = {}

    def forward(self, batch: dict) -> tuple[dict, dict]:
        stream = batch["stream"]
        state = None if batch["reset"] else self.states.get(stream)
        dropped, raw, state = super().forward(batch["input_ids"], state)  # (B, T, E) each
        self.states[stream] = [(h.detach(), c.detach()) for h, c in state]
        targets = batch["labels"].reshape(-1)
        hidden = dropped.reshape(-1, dropped.shape[-1])  # (N, E)
        if self.training and self.sampled:
            loss = sampled_softmax_loss(hidden, targets, self.decoder.weight, self.decoder.bias, self.sampled)
            losses, correct = {"lm": loss}, {}
        else:
            logits = self.decoder(hidden)  # (N, V)
            loss, hits = vocab_loss(logits, targets)
            losses, correct = {"lm": loss}, {"lm": hits}
        if self.training:
            width = raw.shape[-1]
            losses["ar"] = dropped.float().pow(2).sum() / width  # / count of tokens: the mean
            losses["tar"] = (raw[:, 1:] - raw[:, :-1]).float().pow(2).sum() / width
        return losses, correct

    def carried(self) -> list[torch.Tensor]:
        return [t for pair in self.states.get("train", []) for t in pair]

    def carry(self, tensors: list[torch.Tensor]) -> None:
        self.states["train"] = list(zip(tensors[0::2], tensors[1::2]))
