"""Recurrent building blocks of BERT's ancestors: AWD-LSTM's regularisers (Merity et al., 2018) and
the LSTM layer they wrap.

- `LockedDropout`: variational dropout, one mask per sequence shared by every time step (Gal &
  Ghahramani), so the recurrence sees the same units dropped throughout.
- `embedding_dropout`: whole rows of the embedding matrix dropped, i.e. every occurrence of a word.
- `WeightDropLSTM`: DropConnect on the hidden-to-hidden weights, one mask per forward pass; with
  no dropout it is exactly `nn.LSTM` (one layer, batch first).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


class LockedDropout(nn.Module):
    def __init__(self, p: float):
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (B, T, H)
        if not self.training or self.p == 0.0:
            return x
        keep = 1.0 - self.p
        mask = x.new_empty(x.shape[0], 1, x.shape[2]).bernoulli_(keep) / keep  # (B, 1, H)
        return x * mask


def embedding_dropout(weight: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """`weight` (V, E) with whole rows zeroed with probability `p` and the rest scaled by 1/(1-p)."""
    if not training or p == 0.0:
        return weight
    keep = 1.0 - p
    mask = weight.new_empty(weight.shape[0], 1).bernoulli_(keep) / keep  # (V, 1)
    return weight * mask


class WeightDropLSTM(nn.Module):
    """One LSTM layer (batch first) whose recurrent weight matrix is dropped (DropConnect) with
    probability `weight_p` at each training forward. The raw weights are the parameters; the dropped
    copy is made per call, so nothing is patched into a module as the reference code does. Gate
    order and initialisation are `nn.LSTM`'s (i, f, g, o; uniform in +-1/sqrt(hidden))."""

    def __init__(self, input_size: int, hidden_size: int, weight_p: float = 0.0):
        super().__init__()
        self.input_size, self.hidden_size, self.weight_p = input_size, hidden_size, weight_p
        self.weight_ih = nn.Parameter(torch.empty(4 * hidden_size, input_size))
        self.weight_hh = nn.Parameter(torch.empty(4 * hidden_size, hidden_size))
        self.bias_ih = nn.Parameter(torch.empty(4 * hidden_size))
        self.bias_hh = nn.Parameter(torch.empty(4 * hidden_size))
        bound = 1.0 / math.sqrt(hidden_size)
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)

    def forward(self, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor] | None = None):
        """`x` (B, T, I) and the state `(h, c)`, each (B, H) (zeros when None) -> outputs (B, T, H)
        and the final state."""
        if state is None:
            zeros = x.new_zeros(x.shape[0], self.hidden_size)
            state = (zeros, zeros)
        weight_hh = F.dropout(self.weight_hh, self.weight_p, self.training) if self.weight_p else self.weight_hh
        weights = [self.weight_ih, weight_hh, self.bias_ih, self.bias_hh]
        # torch.lstm is nn.LSTM's own kernel (cuDNN on GPUs); arguments: has_biases, num_layers,
        # dropout, train, bidirectional, batch_first.
        out, h, c = torch.lstm(x, (state[0][None], state[1][None]), weights, True, 1, 0.0, self.training, False, True)
        return out, (h[0], c[0])


class ProjectedLSTM(nn.Module):
    """ELMo's LSTM layer (AllenNLP's LstmCellWithProjection): `cell_size` cells whose output is
    projected to `hidden_size`; the cell clipped to +-`cell_clip` and the projection to
    +-`proj_clip` at every step (None: no clipping), which keeps a long-running state bounded.
    Gates in the order input, forget, cell, output; the forget gate's bias starts at 1. One step at
    a time (the clipping sits inside the recurrence, where no fused kernel reaches), the input's
    part of every gate computed for all steps at once."""

    def __init__(self, input_size: int, cell_size: int, hidden_size: int, cell_clip: float | None = None,
                 proj_clip: float | None = None):
        super().__init__()
        self.cell_size, self.hidden_size = cell_size, hidden_size
        self.cell_clip, self.proj_clip = cell_clip, proj_clip
        self.input_linearity = nn.Linear(input_size, 4 * cell_size, bias=False)
        self.state_linearity = nn.Linear(hidden_size, 4 * cell_size)
        self.state_projection = nn.Linear(cell_size, hidden_size, bias=False)
        with torch.no_grad():
            self.state_linearity.bias.zero_()
            self.state_linearity.bias[cell_size:2 * cell_size] = 1.0

    def forward(self, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor] | None = None):
        """`x` (B, T, I), state `(h (B, H), c (B, C))` (zeros when None) -> outputs (B, T, H), final state."""
        batch, steps, _ = x.shape
        h = x.new_zeros(batch, self.hidden_size) if state is None else state[0]
        c = x.new_zeros(batch, self.cell_size) if state is None else state[1]
        from_input = self.input_linearity(x)  # (B, T, 4C)
        outputs = []
        for t in range(steps):
            gates = from_input[:, t] + self.state_linearity(h)  # (B, 4C)
            i, f, g, o = gates.chunk(4, dim=-1)
            c = torch.sigmoid(i) * torch.tanh(g) + torch.sigmoid(f) * c  # (B, C)
            if self.cell_clip is not None:
                c = c.clamp(-self.cell_clip, self.cell_clip)
            h = self.state_projection(torch.sigmoid(o) * torch.tanh(c))  # (B, H)
            if self.proj_clip is not None:
                h = h.clamp(-self.proj_clip, self.proj_clip)
            outputs.append(h)
        out = torch.stack(outputs, dim=1) if outputs else x.new_zeros(batch, 0, self.hidden_size)
        return out, (h, c)


def packed_bilstm(lstm: nn.LSTM, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """`lstm` over the real positions of right-padded `x` (B, T, D) -> (B, T, 2 hidden), zeros at
    padding: the task models' biLSTMs never read padding (an empty row reads its first position)."""
    packed = pack_padded_sequence(x, mask.sum(1).clamp(min=1).cpu(), batch_first=True, enforce_sorted=False)
    return pad_packed_sequence(lstm(packed)[0], batch_first=True, total_length=x.shape[1])[0]
