"""Small head modules that sit on the encoder. Each takes flat arguments, not a config tree."""

from __future__ import annotations

import torch
from torch import nn

from .model import activation


class MLMHead(nn.Module):
    """Masked-LM head: dense -> activation -> LayerNorm -> decoder tied to the word embeddings.

    The decoder matrix is not owned here: `forward` takes the word-embedding weight, which keeps
    the tie explicit. Call it on the hidden states of the masked positions only (M, H): computing
    vocabulary logits for every token wastes most of the head's work.
    """

    def __init__(self, hidden_size: int, vocab_size: int, hidden_act: str = "gelu",
                 layer_norm_eps: float = 1e-12):
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.act = activation(hidden_act)
        self.norm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(vocab_size))

    def forward(self, hidden: torch.Tensor, word_embeddings: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.act(self.dense(hidden)))  # (M, H)
        return h @ word_embeddings.t() + self.bias  # (M, V)


class NSPHead(nn.Module):
    """Next-sentence prediction: two logits from the pooled [CLS] vector (0 = B follows A, 1 = random)."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.dense = nn.Linear(hidden_size, 2)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        return self.dense(pooled)  # (B, 2)


class ClassifierHead(nn.Module):
    """Dropout then a linear layer: sentence classes from the pooled [CLS] vector, tags from each
    token's vector, or one score per choice (multiple choice, `num_labels=1`)."""

    def __init__(self, hidden_size: int, num_labels: int, dropout: float = 0.1):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.dense = nn.Linear(hidden_size, num_labels)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.dense(self.dropout(hidden))  # (..., num_labels)
