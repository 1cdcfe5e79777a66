"""ELMo's scalar mix of layers: a block shared by the embedder and the task models that read
every layer of a frozen encoder."""

from __future__ import annotations

import torch
from torch import nn


class ScalarMix(nn.Module):
    """ELMo's mix of layers (Peters et al., 2018): gamma * sum_j softmax(w)_j * h_j, with w and
    gamma learned. Starts as the plain average of the layers."""

    def __init__(self, num_layers: int):
        super().__init__()
        self.weights = nn.Parameter(torch.zeros(num_layers))
        self.gamma = nn.Parameter(torch.ones(1))

    def forward(self, layers: tuple[torch.Tensor, ...]) -> torch.Tensor:
        mix = self.weights.softmax(0)
        return self.gamma * sum(w * h for w, h in zip(mix, layers))  # same shape as each layer
