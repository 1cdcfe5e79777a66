"""CoVe (McCann et al., 2017): "Learned in Translation: Contextualized Word Vectors".

The encoder, MT-LSTM, reads fixed word vectors (GloVe) through a 2-layer bidirectional LSTM; its
top layer's states are CoVe, used beside GloVe by a task model once translation has trained it.
Translation trains it with an attentional LSTM decoder (Luong et al., 2015, as OpenNMT builds it):
each step the decoder's LSTM layers read the previous target word and the previous attentional
state (input feeding), attend over the encoder's states with the "general" score h^T W m, and
make the attentional state tanh(W [context; h]), from which the next word is predicted.

The decoder keeps the interface of the Transformer's (`encode`, `cross_caches`, `decode` with a
cache, `logits`), so that translate.py's greedy and beam search and the trainer's objective serve
both. The encoder's LSTM is a plain `nn.LSTM`, its parameters named as in the released CoVe weights
(`weight_ih_l0` ... `bias_hh_l1_reverse`).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from .config import CoveConfig


class MTLSTM(nn.Module):
    """Fixed word vectors, then the bidirectional LSTM; returns the top layer's states (B, S, 2H)."""

    def __init__(self, config: CoveConfig):
        super().__init__()
        self.config = config
        self.vectors = nn.Embedding(config.source_vocab_size, config.word_dim)
        self.vectors.weight.requires_grad_(False)  # CoVe keeps GloVe fixed
        self.rnn = nn.LSTM(config.word_dim, config.encoder_hidden, num_layers=config.encoder_layers,
                           bidirectional=True, batch_first=True)

    def forward(self, source: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.vectors(source.masked_fill(~mask, 0))  # (B, S, word_dim); padding reads word 0, then is dropped
        lengths = mask.sum(1).clamp(min=1).cpu()
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        states, _ = self.rnn(packed)
        states, _ = pad_packed_sequence(states, batch_first=True, total_length=source.shape[1])
        return states  # (B, S, 2H), zeros at padding


class CoveTranslator(nn.Module):
    """MT-LSTM and the attentional decoder."""

    shares_source = True  # beam search may give `decode` one memory row per sentence (see `decode`)

    def __init__(self, config: CoveConfig):
        super().__init__()
        self.config = config
        memory, hidden = 2 * config.encoder_hidden, config.decoder_hidden
        self.encoder = MTLSTM(config)
        self.embeddings = nn.Embedding(config.vocab_size, config.target_embed_dim, padding_idx=config.pad_token_id)
        self.cells = nn.ModuleList(nn.LSTMCell(config.target_embed_dim + hidden if layer == 0 else hidden, hidden)
                                   for layer in range(config.decoder_layers))
        self.attend = nn.Linear(hidden, memory, bias=False)  # the "general" score: (W^T h) . m
        self.combine = nn.Linear(memory + hidden, hidden, bias=False)
        self.output = nn.Linear(hidden, config.vocab_size)
        self.dropout = nn.Dropout(config.dropout)
        for name, p in self.named_parameters():  # OpenNMT's initialisation; the word vectors are loaded
            if not name.startswith("encoder.vectors"):
                nn.init.uniform_(p, -0.1, 0.1)
        with torch.no_grad():
            self.embeddings.weight[config.pad_token_id].zero_()

    def encode(self, source: torch.Tensor, source_mask: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.encoder(source, source_mask))

    def cross_caches(self, memory: torch.Tensor) -> list[dict]:
        """The decoder's state before its first word: zeros (batch first, so that decoding can
        reorder every entry along dim 0)."""
        n, layers, hidden = memory.shape[0], len(self.cells), self.config.decoder_hidden
        zeros = memory.new_zeros(n, layers, hidden)
        return [{"h": zeros, "c": zeros.clone(), "feed": memory.new_zeros(n, hidden)}]

    def decode(self, tokens: torch.Tensor, memory: torch.Tensor, source_mask: torch.Tensor,
               caches: list[dict] | None = None, start: int = 0, attention: list | None = None) -> torch.Tensor:
        """The attentional states (N, T, hidden) after each of `tokens` (N, T). With `caches` (from
        `cross_caches`) the decoding continues from the state there and leaves its new state there;
        `memory` and `source_mask` may then have one row per sentence for N / n hypotheses each.
        `attention`, a list, receives each step's weights over the source (N, S)."""
        state = (caches or self.cross_caches(memory))[0]
        n = memory.shape[0]  # sentences: fewer than the N rows where a beam's hypotheses share them
        h, c, feed = list(state["h"].unbind(1)), list(state["c"].unbind(1)), state["feed"]
        words = self.dropout(self.embeddings(tokens))  # (N, T, E)
        outputs = []
        for t in range(tokens.shape[1]):
            x = torch.cat([words[:, t], feed], dim=-1)
            for layer, cell in enumerate(self.cells):
                h[layer], c[layer] = cell(x, (h[layer], c[layer]))
                x = self.dropout(h[layer]) if layer + 1 < len(self.cells) else h[layer]
            # (n, g, S): a beam's g hypotheses of each of the n sentences read its states in one product
            scores = torch.bmm(self.attend(x).unflatten(0, (n, -1)), memory.transpose(1, 2))
            weights = scores.masked_fill(~source_mask[:, None], float("-inf")).softmax(-1)
            context = torch.bmm(weights, memory).flatten(0, 1)  # (N, memory)
            feed = torch.tanh(self.combine(torch.cat([context, x], dim=-1)))  # (N, hidden)
            outputs.append(feed)
            if attention is not None:
                attention.append(weights.flatten(0, 1))  # (N, S)
        if caches is not None:
            state.update(h=torch.stack(h, 1), c=torch.stack(c, 1), feed=feed)
        return self.dropout(torch.stack(outputs, 1))

    def logits(self, states: torch.Tensor) -> torch.Tensor:
        return self.output(states)

    def forward(self, source, source_mask, target_in) -> torch.Tensor:
        return self.logits(self.decode(target_in, self.encode(source, source_mask), source_mask))
