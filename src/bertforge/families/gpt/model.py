"""GPT-1 (Radford et al., 2018), top to bottom in one file.

token + learned position embeddings (no segments, no embedding LayerNorm), dropout -> N blocks ->
the hidden states, which the LM head reads through the token embeddings (tied). A block is BERT's
post-LayerNorm layer, x = LN(x + Attn(x)); x = LN(x + FFN(x)), with the one difference that makes a
language model of it: each position attends only to itself and the positions before it. Without a
segment table, HF's `OpenAIGPTModel` embeds token types through the token embeddings; we do the same
when they are given.

GPT-2's layer order (`config.pre_norm`, HF's "gpt2"): x = x + Attn(LN(x)); x = x + FFN(LN(x)), and
a LayerNorm after the last block. The residual stream then carries each token's embedding untouched
to the top, where in GPT-1's order each block's output is renormalised: measured here, GPT-1's order
stays on the unigram plateau about twice as many steps (or all of a small run's), GPT-2's leaves it sooner.

Rotary positions (`config.positions`, HF's "gpt_neox"): GPT-2's order without the position table;
each attention turns its queries and keys by their positions instead (`nn.rotary`, in
GPT-NeoX's layout: dimension i pairs with i + D/2), so that scores depend on the distance between
tokens from the first step on. Keys are cached turned, as HF caches them.

For generation the attention keeps each layer's keys and values (`Cache`), so that a new token
costs one position, not the whole prefix.

Shapes: B batch, T tokens (new ones, with a cache), P cached positions, H hidden, N heads, D head size.
"""

from __future__ import annotations

import torch
from torch import nn

from .config import GPTConfig
from ...nn.attention import Cache, attend
from ...nn.layers import Dropout, EncoderOutput, activation, init_weights
from ...nn.rotary import rotary_halves, rotate_part


class Embeddings(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.word = nn.Embedding(config.vocab_size, config.n_embd)
        # rotary positions: no table; positions enter each attention as rotations
        self.position = nn.Embedding(config.n_positions, config.n_embd) if config.positions == "absolute" else None
        self.dropout = Dropout(config.embd_pdrop)

    def forward(self, input_ids, position_ids, token_type_ids=None):
        x = self.word(input_ids)  # (B, T, H)
        if self.position is not None:
            x = x + self.position(position_ids)
        if token_type_ids is not None:  # HF's convention: types are tokens of the vocabulary
            x = x + self.word(token_type_ids)
        return self.dropout(x)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.num_heads = config.n_head
        self.qkv = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.out = nn.Linear(config.n_embd, config.n_embd)
        self.dropout_p = config.attn_pdrop

    def forward(self, x, mask, layer: int, cache: Cache | None, rotary=None):
        """`rotary`: cos and sin (B, 1, T, D') of the new positions, for rotary positions."""
        B, T, H = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.num_heads, H // self.num_heads).permute(2, 0, 3, 1, 4)  # (B, N, T, D)
        if rotary is not None:
            q, k = rotate_part(q, *rotary), rotate_part(k, *rotary)
        if cache is not None:
            if layer < len(cache.keys):  # earlier positions first
                k = torch.cat((cache.keys[layer], k), dim=2)  # (B, N, P + T, D)
                v = torch.cat((cache.values[layer], v), dim=2)
                cache.keys[layer], cache.values[layer] = k, v
            else:
                cache.keys.append(k)
                cache.values.append(v)
        # mask None: a fresh sequence without padding, SDPA's own causal path
        y = attend(q, k, v, mask, self.dropout_p if self.training else 0.0, causal=True)  # (B, N, T, D)
        return self.out(y.transpose(1, 2).reshape(B, T, H))  # (B, T, H)


class Block(nn.Module):
    """BERT's post-LayerNorm layer with causal attention (OpenAI's `Block`), or GPT-2's pre-LayerNorm one."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.pre_norm = config.pre_norm
        self.attention = CausalSelfAttention(config)
        self.attention_norm = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.ffn_in = nn.Linear(config.n_embd, 4 * config.n_embd)
        self.act = activation(config.hidden_act)
        self.ffn_out = nn.Linear(4 * config.n_embd, config.n_embd)
        self.ffn_norm = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.dropout = Dropout(config.resid_pdrop)

    def forward(self, x, mask, layer, cache, rotary=None):
        if self.pre_norm:  # GPT-2
            x = x + self.dropout(self.attention(self.attention_norm(x), mask, layer, cache, rotary))
            return x + self.dropout(self.ffn_out(self.act(self.ffn_in(self.ffn_norm(x)))))
        x = self.attention_norm(x + self.dropout(self.attention(x, mask, layer, cache, rotary)))  # (B, T, H)
        return self.ffn_norm(x + self.dropout(self.ffn_out(self.act(self.ffn_in(x)))))  # (B, T, H)


class GPT(nn.Module):
    """The GPT-1 decoder. `pooler` is accepted for a signature common to the encoders; GPT-1 has
    none. Its `pooler_output` is the hidden state at the last real token, where the input transforms
    put `extract`, the one position that has seen the whole input: what its task heads read, as
    HF's `OpenAIGPTForSequenceClassification` does."""

    def __init__(self, config: GPTConfig, pooler: bool = False):
        super().__init__()
        self.config = config
        self.embeddings = Embeddings(config)
        self.layers = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.final_norm = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon) if config.pre_norm else None
        self.pooler = None
        self.apply(lambda m: init_weights(m, config.initializer_range))
        if config.pre_norm:  # GPT-2: each residual branch's last projection scaled by 1/sqrt(2 x layers)
            for layer in self.layers:
                for projection in (layer.attention.out, layer.ffn_out):
                    nn.init.normal_(projection.weight, std=config.initializer_range / (2 * config.n_layer) ** 0.5)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        output_hidden_states: bool = False,
        cache: Cache | None = None,
    ) -> EncoderOutput:
        """Hidden states (B, T, H) of token ids (B, T), each position seeing only those before it.
        `attention_mask` is 1 for real tokens and 0 for padding, which must come after them (right
        padding; P + T columns with a cache); with a `cache` the ids continue the cached positions
        and the cache grows by them."""
        B, T = input_ids.shape
        past = cache.length if cache is not None else 0
        if past + T > self.config.n_positions:
            raise ValueError(f"{past + T} positions, but the model has {self.config.n_positions}")
        if attention_mask is not None and attention_mask.shape[-1] != past + T:
            raise ValueError(f"attention_mask covers {attention_mask.shape[-1]} positions, not the {past + T} "
                             "cached and new ones")
        if position_ids is None:
            position_ids = torch.arange(past, past + T, device=input_ids.device).expand(B, T)
        mask = None
        padded = attention_mask is not None and not bool(attention_mask.all())
        if past or padded:
            # (T, P + T): query i (at position P + i) sees keys up to P + i; padding keys never.
            keys = torch.arange(past + T, device=input_ids.device)
            mask = keys[None, :] <= keys[past:, None]
            if padded:
                mask = mask & attention_mask.bool()[:, None, None, :]  # (B, 1, T, P + T)
        x = self.embeddings(input_ids, position_ids, token_type_ids)  # (B, T, H)
        rotary = None
        if self.config.positions == "rotary":  # (B, 1, T, D'): broadcast over the heads of (B, N, T, D)
            rotary = rotary_halves(position_ids.expand(B, T)[:, None], self.config.rotary_dims,
                                   self.config.rotary_emb_base)
        states = [x] if output_hidden_states else None
        for i, layer in enumerate(self.layers):
            x = layer(x, mask, i, cache, rotary)
            if states is not None:
                states.append(x)
        if self.final_norm is not None:
            x = self.final_norm(x)
            if states is not None:  # HF's last hidden state is after it, as its last output
                states[-1] = x
        last = (attention_mask[:, past:].sum(-1) - 1).clamp(min=0) if attention_mask is not None \
            else torch.full((B,), T - 1, device=x.device)
        pooled = x[torch.arange(B, device=x.device), last]  # (B, H)
        return EncoderOutput(x, pooled, tuple(states) if states is not None else None)
