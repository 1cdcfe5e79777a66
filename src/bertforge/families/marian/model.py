"""The Transformer for translation (Vaswani et al., 2017): an encoder over the source, a decoder
that attends to its own past (causally) and to the encoder's states, one embedding matrix shared by
source, target and output. Laid out as HF's MarianMTModel (formats/marian.py maps the names).

For decoding, the decoder runs one position at a time with a key/value cache: each layer keeps the
keys and values of the positions decoded so far, and the keys and values of the encoder's states
are computed once per sentence (`cross_cache`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .config import MarianConfig
from ...nn.attention import KeyValues, attend
from ...nn.layers import Dropout
from ...nn.linear import add_linear, linear, linear_act, tracing

ACTIVATION = {"relu": F.relu, "gelu": F.gelu, "swish": F.silu, "silu": F.silu}


def sinusoids(length: int, width: int) -> torch.Tensor:
    """The paper's position signals in Marian's layout: sin(pos / 10000^(2i/d)) in the first half
    of the width, the matching cosines in the second half."""
    position = torch.arange(length, dtype=torch.float64)[:, None]
    rates = 10000.0 ** (-2 * torch.arange(width // 2, dtype=torch.float64) / width)  # (d/2,)
    angles = position * rates  # (T, d/2)
    table = torch.zeros(length, width, dtype=torch.float64)
    table[:, :width // 2] = torch.sin(angles)
    table[:, width // 2: 2 * (width // 2)] = torch.cos(angles)
    return table.float()


class Attention(nn.Module):
    """Multi-head attention, its query, key and value projections fused (self-attention) or the
    key and value fused (attention to another sequence)."""

    def __init__(self, width: int, heads: int, dropout: float, cross: bool):
        super().__init__()
        self.heads, self.dropout, self.cross = heads, dropout, cross
        self.query = nn.Linear(width, width) if cross else None
        self.qkv = nn.Linear(width, 2 * width if cross else 3 * width)  # cross: keys and values only
        self.out = nn.Linear(width, width)

    def split(self, x: torch.Tensor) -> torch.Tensor:
        return x.unflatten(-1, (self.heads, -1)).transpose(1, 2)  # (B, T, d) -> (B, H, T, d/H)

    def keys_values(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Cross-attention's keys and values of the encoder's states, (B, H, S, d/H) each."""
        k, v = self.qkv(memory).chunk(2, dim=-1)
        return self.split(k), self.split(v)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, causal: bool = False, memory=None,
                cache: dict | None = None, weights: list | None = None, residual=None) -> torch.Tensor:
        """With `residual`, returns residual + the output (see `Sublayer`)."""
        if self.cross:
            q = self.split(self.query(x))
            k, v = cache["cross"] if cache is not None and "cross" in cache else self.keys_values(memory)
            if k.shape[0] < q.shape[0]:  # a beam: the hypotheses of a sentence share its source
                return self.grouped(q, k, v, mask, residual)
        else:
            q, k, v = (self.split(t) for t in self.qkv(x).chunk(3, dim=-1))
            if cache is not None:  # decoding: this position's keys and values join the past ones
                if "self" not in cache:
                    cache["self"] = KeyValues()
                k, v = cache["self"].add(k, v)
                causal = False  # one new position sees every cached one
        dropout = self.dropout if self.training else 0.0
        if weights is not None:  # the page shows what each head looked at: computed in full
            scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
            if causal:
                scores = scores.masked_fill(torch.ones_like(scores, dtype=torch.bool).triu(1), float("-inf"))
            if mask is not None:
                scores = scores.masked_fill(~mask, float("-inf"))
            probs = scores.softmax(-1)
            weights.append(probs)
            out = probs @ v
        elif tracing():  # export: one attention operator in the graph
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
        else:  # on a CPU, written out where that is faster: training's dropout, short rows, a decoding step
            out = attend(q, k, v, mask, dropout, causal)
        return add_linear(residual, self.out, out.transpose(1, 2).flatten(2))  # (B, T, d)

    def grouped(self, q, k, v, mask, residual) -> torch.Tensor:
        """Attention of the queries of n x g hypotheses (n*g, H, T, D) to the n sentences' keys and
        values (n, H, S, D), each sentence's g hypotheses in one product: the source's keys are read
        once per sentence, not once per hypothesis, and are not repeated in memory."""
        n, (rows, heads, length, size) = k.shape[0], q.shape
        q = q.unflatten(0, (n, -1)).transpose(1, 2).flatten(2, 3)  # (n, H, g*T, D)
        out = attend(q, k, v, mask, 0.0).unflatten(2, (-1, length)).transpose(1, 2)  # (n, g, H, T, D)
        return add_linear(residual, self.out, out.reshape(rows, heads, length, size).transpose(1, 2).flatten(2))


class FeedForward(nn.Module):
    def __init__(self, width: int, inner: int, activation: str, dropout: float):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(width, inner), nn.Linear(inner, width)
        self.activation, self.dropout = ACTIVATION[activation], Dropout(dropout)

    def forward(self, x: torch.Tensor, residual=None) -> torch.Tensor:
        """With `residual`, returns residual + the output; without dropout, the activation and the
        addition happen inside the products where `nn.linear` can."""
        if residual is None or (self.training and self.dropout.p > 0):
            y = self.fc2(self.dropout(self.activation(self.fc1(x))))
            return y if residual is None else residual + y
        return add_linear(residual, self.fc2, linear_act(self.fc1, self.activation, x))


class Sublayer(nn.Module):
    """A residual around `inner` with its LayerNorm after the sum (the paper's order) or before
    the sublayer (pre-LN), and dropout on the sublayer's output."""

    def __init__(self, inner: nn.Module, width: int, dropout: float, before: bool):
        super().__init__()
        self.inner, self.norm, self.dropout, self.before = inner, nn.LayerNorm(width), Dropout(dropout), before

    def forward(self, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        if self.training and self.dropout.p > 0:
            if self.before:
                return x + self.dropout(self.inner(self.norm(x), *args, **kwargs))
            return self.norm(x + self.dropout(self.inner(x, *args, **kwargs)))
        # no dropout: the residual is added inside the sublayer's last product (see nn.linear)
        if self.before:
            return self.inner(self.norm(x), *args, residual=x, **kwargs)
        return self.norm(self.inner(x, *args, residual=x, **kwargs))


class EncoderLayer(nn.Module):
    def __init__(self, c: MarianConfig):
        super().__init__()
        heads, before = c.encoder_attention_heads, c.normalize_before
        self.attention = Sublayer(Attention(c.d_model, heads, c.attention_dropout, False), c.d_model, c.dropout, before)
        self.feed_forward = Sublayer(FeedForward(c.d_model, c.encoder_ffn_dim, c.activation_function,
                                                 c.activation_dropout), c.d_model, c.dropout, before)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, weights: list | None = None) -> torch.Tensor:
        return self.feed_forward(self.attention(x, mask, weights=weights))


class DecoderLayer(nn.Module):
    def __init__(self, c: MarianConfig):
        super().__init__()
        heads, before, width = c.decoder_attention_heads, c.normalize_before, c.d_model
        self.attention = Sublayer(Attention(width, heads, c.attention_dropout, False), width, c.dropout, before)
        self.cross_attention = Sublayer(Attention(width, heads, c.attention_dropout, True), width, c.dropout, before)
        self.feed_forward = Sublayer(FeedForward(width, c.decoder_ffn_dim, c.activation_function,
                                                 c.activation_dropout), width, c.dropout, before)

    def forward(self, x, memory, memory_mask, cache: dict | None = None, weights: dict | None = None):
        x = self.attention(x, None, causal=True, cache=cache, weights=weights and weights["self"])
        x = self.cross_attention(x, memory_mask, memory=memory, cache=cache, weights=weights and weights["cross"])
        return self.feed_forward(x)


class Stack(nn.Module):
    """The embedding of a sequence (scaled by sqrt(d), plus the position signal, then dropout), the
    layers, and with pre-LN a last LayerNorm."""

    def __init__(self, c: MarianConfig, layer: type, count: int):
        super().__init__()
        self.scale = math.sqrt(c.d_model) if c.scale_embedding else 1.0
        self.dropout = Dropout(c.dropout)
        self.register_buffer("positions", sinusoids(c.max_position_embeddings, c.d_model), persistent=False)
        self.layers = nn.ModuleList(layer(c) for _ in range(count))
        self.norm = nn.LayerNorm(c.d_model) if c.normalize_before else None

    def embed(self, embedding: nn.Embedding, ids: torch.Tensor, start: int = 0) -> torch.Tensor:
        end = start + ids.shape[1]
        if end > self.positions.shape[0]:
            raise ValueError(f"a sequence of {end} tokens is longer than max_position_embeddings={self.positions.shape[0]}")
        return self.dropout(embedding(ids) * self.scale + self.positions[start:end])

    def finish(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x) if self.norm is not None else x


class Transformer(nn.Module):
    """The encoder-decoder. `encode` the source once, `decode` the target (all positions at once
    in training; one at a time with a cache in decoding), `logits` of the decoder's states."""

    # beam search may give `decode` one row of the encoder's side per sentence for its hypotheses
    shares_source = True

    def __init__(self, config: MarianConfig):
        super().__init__()
        self.config = config
        self.embeddings = nn.Embedding(config.vocab_size, config.d_model, padding_idx=config.pad_token_id)
        self.encoder = Stack(config, EncoderLayer, config.encoder_layers)
        self.decoder = Stack(config, DecoderLayer, config.decoder_layers)
        # HF's MarianMTModel adds this (zeros unless a converted Marian model set it) to every logit.
        # the output projection is the embedding matrix (the paper's), or its own with tie_word_embeddings off
        self.output = None if config.tie_word_embeddings else nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.register_buffer("final_logits_bias", torch.zeros(config.vocab_size))
        # The pad row stays zero (Marian's): CTranslate2 starts the decoder from a zero embedding
        # in its place. `padding_idx` stops the lookup's gradient; this mask stops the output's.
        keep = torch.ones(config.vocab_size, 1)
        keep[config.pad_token_id] = 0.0
        self.register_buffer("keep_rows", keep, persistent=False)
        self.apply(self._init)

    def _init(self, module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=self.config.init_std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            # fairseq's: std d^-0.5, so that the scaled embedding (x sqrt(d)) is as large as the
            # position signal; at HF's 0.02 the signal drowns the words early in training
            nn.init.normal_(module.weight, std=self.config.d_model ** -0.5)
            module.weight.data[self.config.pad_token_id].zero_()  # a zero pad row, as Marian's

    def source_mask(self, source_mask: torch.Tensor) -> torch.Tensor:
        return source_mask[:, None, None, :]  # (B, 1, 1, S): every query sees the real source tokens

    def encode(self, source: torch.Tensor, source_mask: torch.Tensor, weights: list | None = None) -> torch.Tensor:
        mask = self.source_mask(source_mask)
        x = self.encoder.embed(self.embeddings, source)  # (B, S, d)
        for i, layer in enumerate(self.encoder.layers):
            x = layer(x, mask, weights=None if weights is None else weights[i])
        return self.encoder.finish(x)

    def decode(self, target: torch.Tensor, memory: torch.Tensor, source_mask: torch.Tensor,
               caches: list[dict] | None = None, start: int = 0, weights: list | None = None) -> torch.Tensor:
        """The decoder's states (B, T, d) for `target` (positions `start`...); `caches`, one dict per
        layer, hold the keys and values of earlier positions and of the encoder's states. With a
        cache, the encoder's side may have one row per sentence for B / n hypotheses each (a beam)."""
        mask = self.source_mask(source_mask)
        x = self.decoder.embed(self.embeddings, target, start)
        for i, layer in enumerate(self.decoder.layers):
            x = layer(x, memory, mask, None if caches is None else caches[i], None if weights is None else weights[i])
        return self.decoder.finish(x)

    def logits(self, states: torch.Tensor) -> torch.Tensor:
        if self.output is not None:
            return linear(states, self.output.weight, self.final_logits_bias)
        # The pad row is masked out of the output's gradient; a decoding step (no gradient, not traced)
        # skips the mask's copy of the whole matrix where that row is zero already, as it is in every
        # model trained or read here: a tenth of a greedy step's time on this small model.
        weight = self.embeddings.weight
        if torch.is_grad_enabled() or tracing() or weight[self.config.pad_token_id].any():
            weight = weight * self.keep_rows
        return linear(states, weight, self.final_logits_bias)

    def cross_caches(self, memory: torch.Tensor) -> list[dict]:
        """A fresh cache per decoder layer, holding the encoder states' keys and values, each made
        contiguous once: as views of the fused projection's output every step's attention would copy
        them (a greedy step of 128 rows: 0.8 of its 12 ms)."""
        return [{"cross": tuple(x.contiguous() for x in layer.cross_attention.inner.keys_values(memory))}
                for layer in self.decoder.layers]

    def forward(self, source, source_mask, target_in) -> torch.Tensor:
        return self.logits(self.decode(target_in, self.encode(source, source_mask), source_mask))
