"""ModernBERT (Warner et al., 2024), top to bottom in one file.

token embeddings -> LayerNorm -> N pre-LayerNorm layers -> final LayerNorm. Each layer:
x = x + Attn(LN(x)); x = x + GeGLU(LN(x)), with no biases anywhere by default. Attention has rotary
positions (theta 160,000 in global layers, 10,000 in local ones); every third layer, from the first,
attends globally, the others to the `local_attention // 2` tokens on either side. The first layer
has no attention LayerNorm (the embeddings' LayerNorm precedes it). There are no token types and no
pooler: HF's task classes put a dense -> activation -> LayerNorm "head" on [CLS] (or the mean of
the tokens) for sentence tasks and on every token for token tasks; `Head` is that module, and
`ModernBert(pooler=True)` applies it to [CLS] as `pooler_output`, where BERT has its tanh pooler.

Shapes: B batch, T tokens, H hidden, N heads, D head size, I the GeGLU's width.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .config import ModernBertConfig
from ...nn.attention import attend
from ...nn.layers import Dropout, EncoderOutput, activation
from ...nn.rotary import rotary_halves, rotate_halves


class Embeddings(nn.Module):
    def __init__(self, config: ModernBertConfig):
        super().__init__()
        self.word = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)
        self.dropout = Dropout(config.embedding_dropout)

    def forward(self, input_ids):
        return self.dropout(self.norm(self.word(input_ids)))  # (B, T, H)


class SelfAttention(nn.Module):
    def __init__(self, config: ModernBertConfig):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size, bias=config.attention_bias)
        self.out = nn.Linear(config.hidden_size, config.hidden_size, bias=config.attention_bias)
        self.dropout_p = config.attention_dropout
        self.out_dropout = Dropout(config.attention_dropout)

    def forward(self, x, mask, rotary):
        B, T, H = x.shape
        qkv = self.qkv(x).view(B, T, 3, self.num_heads, H // self.num_heads)  # (B, T, 3, N, D)
        q, k = rotate_halves(qkv[:, :, :2], *rotary).permute(2, 0, 3, 1, 4)  # each (B, N, T, D)
        v = qkv[:, :, 2].transpose(1, 2)  # (B, N, T, D)
        y = attend(q, k, v, mask, self.dropout_p if self.training else 0.0)  # (B, N, T, D)
        return self.out_dropout(self.out(y.transpose(1, 2).reshape(B, T, H)))  # (B, T, H)


class Layer(nn.Module):
    """One pre-LayerNorm layer: x = x + Attn(LN(x)); x = x + GeGLU(LN(x))."""

    def __init__(self, config: ModernBertConfig, first: bool):
        super().__init__()
        # The first layer reads the embeddings' LayerNorm output directly.
        self.attention_norm = nn.Identity() if first else \
            nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)
        self.attention = SelfAttention(config)
        self.ffn_norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)
        # GeGLU: one projection to 2I gives the input and the gate; act(input) * gate -> I -> H.
        self.ffn_in = nn.Linear(config.hidden_size, 2 * config.intermediate_size, bias=config.mlp_bias)
        self.act = activation(config.hidden_activation)
        self.ffn_dropout = Dropout(config.mlp_dropout)
        self.ffn_out = nn.Linear(config.intermediate_size, config.hidden_size, bias=config.mlp_bias)

    def forward(self, x, mask, rotary):
        x = x + self.attention(self.attention_norm(x), mask, rotary)  # (B, T, H)
        value, gate = self.ffn_in(self.ffn_norm(x)).chunk(2, dim=-1)  # each (B, T, I)
        return x + self.ffn_out(self.ffn_dropout(self.act(value) * gate))  # (B, T, H)


class Head(nn.Module):
    """dense -> activation -> LayerNorm: HF's `ModernBertPredictionHead`, which its masked-LM class
    puts before the decoder and its task classes before the classifier."""

    def __init__(self, config: ModernBertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size, bias=config.classifier_bias)
        self.act = activation(config.classifier_activation)
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)

    def forward(self, hidden):
        return self.norm(self.act(self.dense(hidden)))


class ModernBert(nn.Module):
    """The ModernBERT encoder, with `Head` over [CLS] (or the token mean, per `classifier_pooling`)
    as its pooler unless `pooler=False`. Knows nothing of objectives or tasks."""

    def __init__(self, config: ModernBertConfig, pooler: bool = True):
        super().__init__()
        self.config = config
        self.embeddings = Embeddings(config)
        self.layers = nn.ModuleList(Layer(config, first=i == 0) for i in range(config.num_hidden_layers))
        self.final_norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)
        self.pooler = Head(config) if pooler else None
        init_weights(self, config)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,  # accepted for a common signature; ModernBERT has none
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        output_hidden_states: bool = False,
    ) -> EncoderOutput:
        """Encode token ids (B, T). `attention_mask` is 1 for real tokens and 0 for padding."""
        B, T = input_ids.shape
        config = self.config
        given = position_ids if position_ids is not None else torch.arange(T, device=input_ids.device)
        # (T, 1, 1, D) or (B, T, 1, 1, D): broadcast over the query/key and head dims of (B, T, 2, N, D).
        rotary = {kind: rotary_halves(given[..., None, None], config.head_size, rope["rope_theta"])
                  for kind, rope in config.rope_parameters.items()}
        padding = None
        # Without padding the mask can be left out (a shortcut on the CPU, where the test is free); an
        # exported graph cannot branch on its input's values, so it always applies the mask.
        shortcut = input_ids.device.type == "cpu" and not torch.compiler.is_exporting()
        if attention_mask is not None and not (shortcut and bool(attention_mask.all())):
            padding = attention_mask.bool()[:, None, None, :]  # (B, 1, 1, T): True may attend
        masks = {"full_attention": padding}
        if "sliding_attention" in config.layer_types:
            distance = torch.arange(T, device=input_ids.device)
            band = (distance[None, :] - distance[:, None]).abs() <= config.local_attention // 2  # (T, T)
            # Each token may always attend to itself: a padding token whose window holds only
            # padding would otherwise have no key at all, and its NaN would reach the real tokens.
            itself = torch.eye(T, dtype=torch.bool, device=input_ids.device)
            masks["sliding_attention"] = band if padding is None else band & padding | itself  # (B, 1, T, T)
            if T <= config.local_attention // 2 + 1:  # the window covers every pair: no band to apply
                masks["sliding_attention"] = padding
        x = self.embeddings(input_ids)  # (B, T, H)
        states = [] if output_hidden_states else None
        for kind, layer in zip(config.layer_types, self.layers):
            if states is not None:
                states.append(x)  # each layer's input, as HF's hidden_states
            x = layer(x, masks[kind], rotary[kind])
        x = self.final_norm(x)
        if states is not None:
            states.append(x)
        pooled = self.pooler(self.pool(x, attention_mask)) if self.pooler is not None else None
        return EncoderOutput(x, pooled, tuple(states) if states is not None else None)

    def pool(self, hidden: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """The sentence vector the head reads: [CLS] (the first token), or the mean of the real tokens."""
        if self.config.classifier_pooling == "cls":
            return hidden[:, 0]  # (B, H)
        if attention_mask is None:
            return hidden.mean(1)
        weights = attention_mask.to(hidden.dtype).unsqueeze(-1)  # (B, T, 1)
        return (hidden * weights).sum(1) / weights.sum(1)  # (B, H)


def init_weights(model: nn.Module, config: ModernBertConfig) -> None:
    """ModernBERT's initialisation (after OLMo's megatron scheme): truncated normals with std
    `initializer_range`, cut at `initializer_cutoff_factor` stds; output projections (attention and
    feed-forward) scaled by 1/sqrt(2L) so the residual stream does not grow with depth; zero biases,
    LayerNorms as identity."""
    std = config.initializer_range
    out_std = std / math.sqrt(2.0 * config.num_hidden_layers)
    for name, module in model.named_modules():
        if isinstance(module, (nn.Linear, nn.Embedding)):
            s = out_std if name.endswith(("attention.out", "ffn_out", "dense")) else std
            cut = config.initializer_cutoff_factor * s
            nn.init.trunc_normal_(module.weight, mean=0.0, std=s, a=-cut, b=cut)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
