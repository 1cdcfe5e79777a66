"""Small head modules that sit on the encoder. Each takes flat arguments, not a config tree."""

from __future__ import annotations

import torch
from torch import nn

from .layers import activation
from .linear import linear


class MLMHead(nn.Module):
    """Masked-LM head: dense -> activation -> LayerNorm -> decoder tied to the word embeddings.

    The decoder matrix is not owned here: `forward` takes the word-embedding weight, which keeps
    the tie explicit. Call it on the hidden states of the masked positions only (M, H): computing
    vocabulary logits for every token wastes most of the head's work. With factorised embeddings
    (ALBERT, ELECTRA's generator) the dense layer maps H down to the embedding width E. ModernBERT's
    dense and LayerNorm have no biases by default (`dense_bias`, `norm_bias`).
    """

    def __init__(self, hidden_size: int, vocab_size: int, hidden_act: str = "gelu",
                 layer_norm_eps: float = 1e-12, embedding_size: int | None = None,
                 dense_bias: bool = True, norm_bias: bool = True):
        super().__init__()
        E = embedding_size or hidden_size
        self.dense = nn.Linear(hidden_size, E, bias=dense_bias)
        self.act = activation(hidden_act)
        self.norm = nn.LayerNorm(E, eps=layer_norm_eps, bias=norm_bias)
        self.bias = nn.Parameter(torch.zeros(vocab_size))

    def forward(self, hidden: torch.Tensor, word_embeddings: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.act(self.dense(hidden)))  # (M, E)
        # One fused product-and-bias; under autocast `h @ W.t() + bias` would also promote the
        # (M, V) logits to fp32 through the fp32 bias, a costly extra pass.
        return linear(h, word_embeddings, self.bias)  # (M, V)


class SpanBoundaryHead(nn.Module):
    """SpanBERT's span-boundary objective (Joshi et al., 2020): predict each token of a masked span
    from the encodings of the two tokens just outside it and the token's offset in the span.

    y = LN(GELU(W2 LN(GELU(W1 [x_left; x_right; p_offset])))), then the decoder tied to the word
    embeddings with a bias of its own. Offsets past `max_offset` share its embedding.
    """

    def __init__(self, hidden_size: int, vocab_size: int, max_offset: int = 32, layer_norm_eps: float = 1e-12):
        super().__init__()
        self.offset = nn.Embedding(max_offset, hidden_size)
        self.dense1 = nn.Linear(3 * hidden_size, hidden_size)
        self.norm1 = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.dense2 = nn.Linear(hidden_size, hidden_size)
        self.norm2 = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.act = nn.GELU()
        self.bias = nn.Parameter(torch.zeros(vocab_size))

    def forward(self, left: torch.Tensor, right: torch.Tensor, offsets: torch.Tensor,
                word_embeddings: torch.Tensor) -> torch.Tensor:
        """`left`, `right` (M, H): boundary encodings; `offsets` (M,): 0 for a span's first token."""
        p = self.offset(offsets.clamp(max=self.offset.num_embeddings - 1))  # (M, H)
        h = self.norm1(self.act(self.dense1(torch.cat([left, right, p], dim=-1))))  # (M, H)
        h = self.norm2(self.act(self.dense2(h)))  # (M, H)
        return linear(h, word_embeddings, self.bias)  # (M, V)


class DiscriminatorHead(nn.Module):
    """ELECTRA's replaced-token detector: dense -> activation -> one logit per token (1 = replaced)."""

    def __init__(self, hidden_size: int, hidden_act: str = "gelu"):
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.act = activation(hidden_act)
        self.prediction = nn.Linear(hidden_size, 1)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.prediction(self.act(self.dense(hidden))).squeeze(-1)  # (B, T)


class NSPHead(nn.Module):
    """Next-sentence prediction: two logits from the pooled [CLS] vector (0 = B follows A, 1 = random).
    ALBERT's sentence-order prediction is the same head (0 = in order, 1 = swapped)."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.dense = nn.Linear(hidden_size, 2)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        return self.dense(pooled)  # (B, 2)


class ClassifierHead(nn.Module):
    """Dropout then a linear layer: sentence classes from the pooled [CLS] vector, tags from each
    token's vector, or one score per choice (multiple choice, `num_labels=1`). GPT-1's sentence
    classifier has no bias (HF's `score`)."""

    def __init__(self, hidden_size: int, num_labels: int, dropout: float = 0.1, bias: bool = True):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.dense = nn.Linear(hidden_size, num_labels, bias=bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.dense(self.dropout(hidden))  # (..., num_labels)


def concat_pool(states: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """ULMFiT's concat pooling of right-padded `states` (B, T, H) with `lengths` (B,) real steps:
    [the last real state; the max over real steps; their mean] -> (B, 3H)."""
    real = torch.arange(states.shape[1], device=states.device)[None, :] < lengths[:, None]  # (B, T)
    last = states[torch.arange(len(states), device=states.device), lengths - 1]  # (B, H)
    biggest = states.masked_fill(~real[..., None], float("-inf")).amax(1)  # (B, H)
    mean = (states * real[..., None]).sum(1) / lengths[:, None].to(states.dtype)  # (B, H)
    return torch.cat([last, biggest, mean], dim=-1)


class PoolingClassifierHead(nn.Module):
    """ULMFiT's classifier over concat pooling: blocks of BatchNorm -> dropout -> linear (ReLU between),
    widths `sizes` (e.g. [3H, 50, labels]) and one dropout per block (`dropouts`)."""

    def __init__(self, sizes: list[int], dropouts: list[float]):
        super().__init__()
        blocks = []
        for i, (n_in, n_out, p) in enumerate(zip(sizes[:-1], sizes[1:], dropouts)):
            blocks += [nn.BatchNorm1d(n_in), nn.Dropout(p), nn.Linear(n_in, n_out)]
            if i < len(sizes) - 2:
                blocks.append(nn.ReLU())
        self.blocks = nn.Sequential(*blocks)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:  # (B, 3H) -> (B, labels)
        return self.blocks(pooled)
