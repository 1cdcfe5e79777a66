"""The encoder-decoder interface translation uses (train_translation, translate, serve): `encode`,
`cross_caches`, `decode` (the whole target, or one step with caches that translate reorders
batch-first) and `logits`."""

import torch
from torch import nn


class GRUTranslator(nn.Module):
    def __init__(self, config, pooler: bool = False):
        super().__init__()
        self.config = config
        H = config.d_model
        self.embed = nn.Embedding(config.vocab_size, H, padding_idx=config.pad_token_id)
        self.encoder = nn.GRU(H, H, batch_first=True)
        self.decoder = nn.GRU(H, H, batch_first=True)
        self.out = nn.Linear(2 * H, H)
        self.dropout = nn.Dropout(config.dropout)

    def encode(self, source, source_mask):
        states, _ = self.encoder(self.dropout(self.embed(source)))  # (B, S, H)
        return states * source_mask[..., None]

    def cross_caches(self, memory):
        return [{}]  # the decoder's state, once a step has run

    def decode(self, tokens, memory, source_mask, caches=None, start=0):
        cache = caches[0] if caches else {}
        h = cache.get("h")  # (B, H): batch-first, as translate reorders caches
        x, last = self.decoder(self.dropout(self.embed(tokens)), None if h is None else h[None].contiguous())
        if caches:
            cache["h"] = last[0]
        scores = (x @ memory.transpose(1, 2)).masked_fill(~source_mask.bool()[:, None, :], float("-inf"))  # (B, T, S)
        context = scores.softmax(-1) @ memory  # (B, T, H)
        return torch.tanh(self.out(torch.cat([x, context], dim=-1)))  # (B, T, H)

    def logits(self, states):
        return states @ self.embed.weight.t()  # tied to the embeddings: (..., V)
