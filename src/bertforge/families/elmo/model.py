"""ELMo (Peters et al., 2018): deep contextual word vectors from a bidirectional language model whose
input is characters.

Characters -> a word vector per word (char embeddings, convolutions of several widths max-pooled
over the word, highway layers, a projection) -> `n_layers` projected LSTMs reading left to right
and, separately, `n_layers` reading right to left, with a residual connection from the second layer
up. The language model predicts the next word from the forward states and the previous word from
the backward ones, through one softmax both share. A word's representations are layer 0, its word
vector twice ([x; x]), and each layer's [forward; backward] states: 2 x projection_dim wide each.

Words come in as characters (`data.words.word_characters`: UTF-8 bytes between begin- and
end-of-word marks, AllenNLP's ELMoCharacterMapper layout), 0 marking padding.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .config import ELMoConfig
from ...nn.lstm import ProjectedLSTM

NUM_CHARACTERS = 262  # 256 bytes, 5 marks, and the 0 of padding positions (see data.words.word_characters)


class CharacterEncoder(nn.Module):
    def __init__(self, config: ELMoConfig):
        super().__init__()
        self.embedding = nn.Embedding(NUM_CHARACTERS, config.char_embedding_dim, padding_idx=0)
        nn.init.uniform_(self.embedding.weight, -1.0, 1.0)
        self.convs = nn.ModuleList(nn.Conv1d(config.char_embedding_dim, count, width)
                                   for width, count in config.filters)
        width = sum(count for _, count in config.filters)
        self.highways = nn.ModuleList(nn.Linear(width, 2 * width) for _ in range(config.n_highway))
        for highway in self.highways:  # the gate starts open towards carrying its input (AllenNLP's Highway)
            nn.init.constant_(highway.bias[width:], 1.0)
        self.projection = nn.Linear(width, config.projection_dim)
        self.activation = torch.relu if config.activation == "relu" else torch.tanh

    def forward(self, chars: torch.Tensor) -> torch.Tensor:
        """`chars` (B, T, C) -> word vectors (B, T, P)."""
        batch, steps, length = chars.shape
        x = self.embedding(chars.reshape(-1, length)).transpose(1, 2)  # (B*T, E, C)
        # each filter's best match anywhere in the word, then the activation (AllenNLP's order)
        h = torch.cat([self.activation(conv(x).amax(-1)) for conv in self.convs], dim=-1)  # (B*T, F)
        for highway in self.highways:
            nonlinear, gate = highway(h).chunk(2, dim=-1)
            gate = torch.sigmoid(gate)  # how much of the input is carried
            h = gate * h + (1 - gate) * torch.relu(nonlinear)  # (B*T, F)
        return self.projection(h).view(batch, steps, -1)  # (B, T, P)


class ELMo(nn.Module):
    """The biLM without its softmax: `forward` gives every layer of both directions."""

    def __init__(self, config: ELMoConfig):
        super().__init__()
        self.config = config
        c = config

        def stack():
            return nn.ModuleList(ProjectedLSTM(c.projection_dim, c.cell_size, c.projection_dim, c.cell_clip,
                                               c.proj_clip) for _ in range(c.n_layers))

        self.embeddings = CharacterEncoder(config)
        self.forward_layers, self.backward_layers = stack(), stack()
        self.pooler = None  # what shared code asks of an encoder

    def run(self, layers: nn.ModuleList, x: torch.Tensor, state=None):
        """One direction over word vectors `x` (B, T, P) already in its reading order: every layer's
        output (B, T, P) and the new state per layer."""
        outputs, new_state = [], []
        for i, layer in enumerate(layers):
            out, layer_state = layer(F.dropout(x, self.config.dropout, self.training), state[i] if state else None)
            if i > 0:
                out = out + x  # residual connection from the second layer up
            outputs.append(out)
            new_state.append(layer_state)
            x = out
        return outputs, new_state

    def forward(self, chars: torch.Tensor, mask: torch.Tensor | None = None) -> list[torch.Tensor]:
        """Representations of right-padded sentences `chars` (B, T, C) with `mask` (B, T) true at
        real words: layer 0 ([x; x]) and every LSTM layer ([forward; backward]), each (B, T, 2P).
        The backward LSTMs read each sentence's real words from its last to its first."""
        mask = torch.ones(chars.shape[:2], dtype=torch.bool, device=chars.device) if mask is None else mask.bool()
        x = self.embeddings(chars) * mask[..., None]  # (B, T, P)
        forward_outputs, _ = self.run(self.forward_layers, x)
        order = reverse_order(mask)  # (B, T): reverses each row's real words, keeps the padding after them
        backward_x = x.gather(1, order[..., None].expand_as(x))
        backward_outputs, _ = self.run(self.backward_layers, backward_x)
        layers = [torch.cat([x, x], dim=-1)]
        for f, b in zip(forward_outputs, backward_outputs):
            layers.append(torch.cat([f, b.gather(1, order[..., None].expand_as(b))], dim=-1) * mask[..., None])
        return layers


def reverse_order(mask: torch.Tensor) -> torch.Tensor:
    """For right-padded rows with `mask` (B, T): the index permutation that reverses each row's real
    positions and leaves its padding where it is (it is its own inverse)."""
    lengths = mask.sum(1, keepdim=True)  # (B, 1)
    steps = torch.arange(mask.shape[1], device=mask.device)[None, :]  # (1, T)
    return torch.where(steps < lengths, lengths - 1 - steps, steps)  # (B, T)


class ELMoLanguageModel(nn.Module):
    """The biLM with its softmax: the encoder at `.backbone` and one linear softmax over words for both
    directions (ELMo ties the softmax across directions, not to its input, which is characters)."""

    architecture = "ELMoLanguageModel"

    def __init__(self, config: ELMoConfig):
        super().__init__()
        self.backbone = ELMo(config)
        self.softmax = nn.Linear(config.projection_dim, config.vocab_size)
        nn.init.zeros_(self.softmax.bias)
