"""AWD-LSTM (Merity, Keskar & Socher, 2018): the word-level LSTM language model ULMFiT fine-tunes.

Embedding (with embedding dropout) -> locked input dropout -> `n_layers` weight-dropped LSTMs, with
locked dropout between them -> (the LM's) locked output dropout -> a decoder tied to the embedding.
The encoder returns every layer's output (before the dropout that follows it): TAR regularises the
last one, a classifier pools it, ELMo-style features could mix them all.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .config import AWDLSTMConfig
from ...nn.lstm import LockedDropout, WeightDropLSTM, embedding_dropout

State = list[tuple[torch.Tensor, torch.Tensor]]  # one (h, c) per layer, each (B, H_layer)


class AWDLSTM(nn.Module):
    def __init__(self, config: AWDLSTMConfig):
        super().__init__()
        self.config = config
        c = config
        self.embeddings = nn.Embedding(c.vocab_size, c.emb_sz, padding_idx=c.pad_token_id)
        # fastai's initialisation: uniform in +-0.1 (the LSTMs keep nn.LSTM's).
        nn.init.uniform_(self.embeddings.weight, -0.1, 0.1)
        with torch.no_grad():
            self.embeddings.weight[c.pad_token_id].zero_()
        sizes = [c.emb_sz] + [c.n_hid] * (c.n_layers - 1) + [c.emb_sz]  # the last one feeds the tied decoder
        self.layers = nn.ModuleList(WeightDropLSTM(sizes[i], sizes[i + 1], c.weight_p) for i in range(c.n_layers))
        self.input_dropout = LockedDropout(c.input_p)
        self.hidden_dropout = nn.ModuleList(LockedDropout(c.hidden_p) for _ in range(c.n_layers - 1))
        self.pooler = None  # what shared code asks of an encoder

    def forward(self, input_ids: torch.Tensor, state: State | None = None):
        """`input_ids` (B, T) and the state carried from the previous chunk (None: zeros) ->
        (the output of each layer, (B, T, H_layer); the new state)."""
        weight = embedding_dropout(self.embeddings.weight, self.config.embed_p, self.training)
        x = self.input_dropout(F.embedding(input_ids, weight, self.config.pad_token_id))  # (B, T, E)
        outputs, new_state = [], []
        for i, layer in enumerate(self.layers):
            x, layer_state = layer(x, state[i] if state is not None else None)  # (B, T, H_i)
            outputs.append(x)
            new_state.append(layer_state)
            if i < len(self.layers) - 1:
                x = self.hidden_dropout[i](x)
        return outputs, new_state


class AWDLSTMLanguageModel(nn.Module):
    """The encoder at `.backbone` (the name every family's encoder has here) and a linear decoder whose
    weight is the embedding matrix (`tie_weights`), after locked dropout on the last layer."""

    architecture = "AWDLSTMLanguageModel"

    def __init__(self, config: AWDLSTMConfig):
        super().__init__()
        self.backbone = AWDLSTM(config)
        self.output_dropout = LockedDropout(config.output_p)
        self.decoder = nn.Linear(config.emb_sz, config.vocab_size, bias=config.out_bias)
        if config.tie_weights:
            self.decoder.weight = self.backbone.embeddings.weight
        if config.out_bias:
            nn.init.zeros_(self.decoder.bias)

    def forward(self, input_ids: torch.Tensor, state: State | None = None):
        """-> (the last layer's output after dropout (B, T, E): the decoder's input, and AR's; before
        dropout (TAR's); the new state). `decoder(hidden)` gives the logits."""
        outputs, new_state = self.backbone(input_ids, state)
        return self.output_dropout(outputs[-1]), outputs[-1], new_state
