"""ELMo's pretraining objective: the biLM's two language models."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ...losses import sampled_softmax_loss, vocab_loss
from .config import ELMoConfig
from .model import ELMoLanguageModel


class BiLMPretraining(ELMoLanguageModel):
    """ELMo's biLM objective over truncated-BPTT chunks of two streams (`data.streams` with
    `bidirectional`): the forward LSTMs predict each next word of the forward stream, the backward
    LSTMs each next word of the reversed stream (the previous word in reading order), through the
    shared softmax; the loss is the mean of the two, as bilm-tf's. Each direction carries its own
    state from chunk to chunk (as `RecurrentLMPretraining`). `sampled` trains with a sampled
    softmax of that many words (bilm-tf: 8192); held-out losses use the full softmax."""

    def __init__(self, config: ELMoConfig, sampled: int | None = None):
        super().__init__(config)
        self.loss_weights = {"forward": 0.5, "backward": 0.5}
        self.sampled = sampled
        self.states = {}

    def _direction(self, name: str, layers, chars, targets, batch) -> tuple[torch.Tensor, torch.Tensor | None]:
        key = (batch["stream"], name)
        state = None if batch["reset"] else self.states.get(key)
        outputs, state = self.backbone.run(layers, self.backbone.embeddings(chars), state)
        self.states[key] = [(h.detach(), c.detach()) for h, c in state]
        top = F.dropout(outputs[-1], self.backbone.config.dropout, self.training)
        hidden, targets = top.reshape(-1, top.shape[-1]), targets.reshape(-1)  # (N, P), (N,)
        if self.training and self.sampled:
            return sampled_softmax_loss(hidden, targets, self.softmax.weight, self.softmax.bias, self.sampled), None
        logits = self.softmax(hidden)  # (N, V)
        return vocab_loss(logits, targets)

    def forward(self, batch: dict) -> tuple[dict, dict]:
        losses, correct = {}, {}
        for name, layers, prefix in (("forward", self.backbone.forward_layers, ""),
                                     ("backward", self.backbone.backward_layers, "backward_")):
            losses[name], right = self._direction(name, layers, batch[prefix + "chars"], batch[prefix + "labels"],
                                                  batch)
            if right is not None:
                correct[name] = right
        return losses, correct

    def carried(self) -> list[torch.Tensor]:
        return [t for name in ("forward", "backward") for pair in self.states.get(("train", name), []) for t in pair]

    def carry(self, tensors: list[torch.Tensor]) -> None:
        half = len(tensors) // 2
        for name, part in (("forward", tensors[:half]), ("backward", tensors[half:])):
            self.states[("train", name)] = list(zip(part[0::2], part[1::2]))
