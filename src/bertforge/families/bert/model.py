"""The BERT encoder (Devlin et al., 2019), top to bottom in one file.

embeddings (token + position + segment, LayerNorm, dropout) -> N post-LayerNorm Transformer layers
-> tanh pooler over [CLS] (left out when nothing reads it). Imports only torch, the shared blocks (`nn/`) and its config:
training, data, heads and checkpoint formats live elsewhere. Shapes: B batch, T tokens, H hidden, N heads, D head size (H = N * D),
E embedding width (= H except in ALBERT and ELECTRA).

The descendants differ from BERT in a few places, each a flag of the config (`config.VARIANTS`,
read from `model_type`: the model never tests a name) and marked where it happens: ALBERT and
ELECTRA embed in E < H dimensions and project up; ALBERT applies one set of layer weights to every
layer; RoBERTa numbers positions from pad_token_id + 1, skipping padding; ELECTRA's pooler uses GELU.
RoFormer (BERT with rotary position embeddings, Su et al., 2021) has no position table: each layer
rotates its queries and keys by an angle proportional to the position, so that attention scores
depend on the distance between tokens from the first step on, with nothing to learn.
"""

from __future__ import annotations

import torch
from torch import nn

from ...nn.attention import Packed, attend, attention_probs, varlen_attention
from ...nn.layers import Dropout, EncoderOutput, activation, init_weights
from ...nn.linear import add_linear, linear_act, tracing
from ...nn.rotary import rotary_tables, rotate
from .config import BertConfig


class Embeddings(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        E = config.word_size
        self.word = nn.Embedding(config.vocab_size, E, padding_idx=config.pad_token_id)
        # RoFormer: no position table; positions enter each layer's attention as rotations.
        self.position = nn.Embedding(config.max_position_embeddings, E) if config.positions == "absolute" else None
        self.segment = nn.Embedding(config.type_vocab_size, E)
        self.norm = nn.LayerNorm(E, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids, token_type_ids, position_ids):
        x = self.word(input_ids) + self.segment(token_type_ids)  # (B, T, E)
        if self.position is not None:
            x = x + self.position(position_ids)
        return self.dropout(self.norm(x))


class SelfAttention(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.num_heads = config.num_attention_heads
        # One fused projection for query, key and value: a single matmul instead of three.
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size)
        self.out = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout_p = config.attention_probs_dropout_prob

    def forward(self, x, mask, rotary=None, attentions: list | None = None, packed: Packed | None = None,
                residual: torch.Tensor | None = None):
        """`attentions`, when given, receives this layer's attention probabilities (B, N, T, T).
        With `packed`, x is (N, H): the real tokens only (see `Bert.forward`). With `residual`,
        returns residual + the attention's output (inference: no dropout between them)."""
        if packed is not None:
            return self.forward_packed(x, rotary, packed, residual)
        B, T, H = x.shape
        qkv = self.qkv(x).view(B, T, 3, self.num_heads, H // self.num_heads)  # (B, T, 3, N, D)
        if rotary is None:
            q, k, v = qkv.permute(2, 0, 3, 1, 4)  # each (B, N, T, D)
        else:  # RoFormer: queries and keys turned in one pass
            q, k = rotate(qkv[:, :, :2], *rotary).permute(2, 0, 3, 1, 4)  # each (B, N, T, D)
            v = qkv[:, :, 2].transpose(1, 2)  # (B, N, T, D)
        if attentions is not None:  # looking inside: the probabilities themselves, without dropout
            attentions.append(attention_probs(q, k, mask))
            y = attentions[-1] @ v  # (B, N, T, D)
        else:
            y = attend(q, k, v, mask, self.dropout_p if self.training else 0.0)  # (B, N, T, D)
        return add_linear(residual, self.out, y.transpose(1, 2).reshape(B, T, H))  # (B, T, H)

    def forward_packed(self, x, rotary, packed: Packed, residual=None):
        """The same on packed tokens (N', H): the projections see no padding; attention runs on the
        packed tokens where FlashAttention's variable-length kernel can, else padded for SDPA."""
        H = x.shape[-1]
        dropout_p = self.dropout_p if self.training else 0.0
        qkv = self.qkv(x).view(-1, 3, self.num_heads, H // self.num_heads)  # (N', 3, N, D)
        if rotary is not None:  # tables gathered per token: (N', 1, 1, D)
            qkv = torch.cat((rotate(qkv[:, :2], *rotary), qkv[:, 2:]), dim=1)
        y = varlen_attention(qkv[:, 0], qkv[:, 1], qkv[:, 2], packed, dropout_p)  # (N', N, D)
        if y is None:
            q, k, v = packed.unpack(qkv).permute(2, 0, 3, 1, 4)  # each (B, N, T, D)
            y = packed.pack(attend(q, k, v, packed.mask, dropout_p).transpose(1, 2))  # (N', N, D)
        return add_linear(residual, self.out, y.reshape(-1, H))  # (N', H)


class Layer(nn.Module):
    """One post-LayerNorm Transformer layer: x = LN(x + Attn(x)); x = LN(x + FFN(x))."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.attention = SelfAttention(config)
        self.attention_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.ffn_in = nn.Linear(config.hidden_size, config.intermediate_size)
        self.act = activation(config.hidden_act)
        self.ffn_out = nn.Linear(config.intermediate_size, config.hidden_size)
        self.ffn_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout_prob)

    def forward(self, x, mask, rotary=None, attentions=None, packed=None):
        """x (B, T, H), or (N', H) with `packed`."""
        if self.training and self.dropout.p > 0:
            x = self.attention_norm(x + self.dropout(self.attention(x, mask, rotary, attentions, packed)))
            return self.ffn_norm(x + self.dropout(self.ffn_out(self.act(self.ffn_in(x)))))  # (B, T, H)
        # no dropout: each residual addition (and the activation) can happen inside its product
        x = self.attention_norm(self.attention(x, mask, rotary, attentions, packed, residual=x))
        return self.ffn_norm(add_linear(x, self.ffn_out, linear_act(self.ffn_in, self.act, x)))  # (B, T, H)


class Pooler(nn.Module):
    """tanh(W h_[CLS] + b): the sentence vector that NSP and sentence classification read.

    ELECTRA pretrains without a pooler; its sentence classifier applies GELU where BERT has tanh,
    so an ELECTRA pooler does the same (and is that classifier's first layer in HF's format).
    RoFormer's classifier applies `hidden_act` there, and so does its pooler.
    """

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.act = nn.Tanh() if config.pooler_act == "tanh" else activation(config.pooler_act)

    def forward(self, hidden):
        return self.act(self.dense(hidden[:, 0]))  # (B, H)


class Bert(nn.Module):
    """The BERT encoder, with its pooler unless `pooler=False`. Knows nothing of objectives or
    tasks: heads are separate."""

    def __init__(self, config: BertConfig, pooler: bool = True):
        super().__init__()
        self.config = config
        self.embeddings = Embeddings(config)
        # ALBERT always projects E -> H (even when equal, as HF does); ELECTRA only when they differ.
        needs_projection = config.always_project or config.word_size != config.hidden_size
        self.project = nn.Linear(config.word_size, config.hidden_size) if needs_projection else None
        # ALBERT: `num_hidden_groups` sets of weights shared by consecutive layers (1: one for all).
        distinct = config.num_hidden_groups or config.num_hidden_layers
        self.layers = nn.ModuleList(Layer(config) for _ in range(distinct))
        # Masked-LM and ELECTRA pretraining never read the pooler (HF's classes for them have none).
        self.pooler = Pooler(config) if pooler else None
        self.skip_padding = False  # off a GPU, whether inference runs unpadded: see `forward`
        self.apply(lambda m: init_weights(m, config.initializer_range))

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
        unpad: bool | None = None,
    ) -> EncoderOutput:
        """Encode token ids (B, T). `attention_mask` is 1 for real tokens and 0 for padding.
        `output_attentions` returns each layer's attention probabilities (dropout never applied to
        them), computed written out rather than by SDPA, which does not expose them.

        `unpad` runs the layers on the real tokens only, packed (MosaicBERT's and ModernBERT's
        unpadding): no projection or feed-forward work on padding, and attention by FlashAttention's
        variable-length kernel where it runs (CUDA, bf16/fp16, no attention dropout), else padded
        for SDPA. Outputs at real positions are the padded path's; at padding they are zeros. By
        default it is on where that kernel runs the whole layer, on a GPU without attention dropout
        (inference: embed, predict, evaluate, serve), and on other devices once `skip_padding` is
        set, as `quantize.for_inference` does for those commands: on a CPU the products then skip
        the padding, a gain where batches carry much of it (length-sorted SST-2 batches carry 2%,
        and there the two paths measured level: docs/speed.md). It is not the plain forward's
        default there: `transformers` computes the padding positions' outputs, and a comparison of
        whole outputs expects them. Training keeps the padded path, whose batches are
        length-grouped or packed rows with little padding."""
        B, T = input_ids.shape
        config = self.config
        if token_type_ids is None or config.type_vocab_size == 1:
            # One segment type (RoBERTa): pair inputs still read as a single segment.
            token_type_ids = torch.zeros_like(input_ids)
        if position_ids is None and config.positions_from_pad:
            # fairseq's numbering: real tokens count up from pad_token_id + 1, padding stays at pad.
            real = (input_ids != config.pad_token_id).long()
            position_ids = real.cumsum(1) * real + config.pad_token_id
        rotary = None
        if config.positions == "rotary":
            # (T, 1, 1, D) when every row counts 0..T-1, else (B, T, 1, 1, D): broadcast over the
            # query/key and head dimensions of (B, T, 2, N, D).
            given = position_ids if position_ids is not None else torch.arange(T, device=input_ids.device)
            rotary = rotary_tables(given[..., None, None], config.head_size)
        elif position_ids is None:
            position_ids = torch.arange(T, device=input_ids.device).expand(B, T)
        if attention_mask is not None and input_ids.device.type == "cpu" and not tracing() \
                and bool(attention_mask.all()):
            attention_mask = None  # no padding: skip a pass over every score matrix (on a GPU, skip the sync)
        # A boolean mask where True means "may attend"; (B, 1, 1, T) broadcasts over heads and
        # query positions, so padding is hidden from every query.
        mask = None if attention_mask is None else attention_mask.bool()[:, None, None, :]
        x = self.embeddings(input_ids, token_type_ids, position_ids)  # (B, T, E)
        if self.project is not None:
            x = self.project(x)  # (B, T, H)
        states = [x] if output_hidden_states else None
        attentions = [] if output_attentions else None
        if unpad is None:  # see the docstring
            if input_ids.device.type == "cuda":
                unpad = not (self.training and config.attention_probs_dropout_prob)
            else:
                unpad = self.skip_padding and not self.training
        packed = None
        if unpad and mask is not None and not output_attentions and not tracing():
            packed = Packed.of(mask)
            x = packed.pack(x)  # (N', H)
            if rotary is not None:
                rotary = tuple(packed.pack(t.expand(B, T, 1, 1, -1)) if t.dim() == 4 else packed.pack(t)
                               for t in rotary)  # (N', 1, 1, D)
        per_weights = config.num_hidden_layers / len(self.layers)  # layers sharing one set (ALBERT)
        for i in range(config.num_hidden_layers):
            x = self.layers[int(i / per_weights)](x, mask, rotary, attentions, packed)
            if states is not None:
                states.append(x if packed is None else packed.unpack(x))
        if packed is not None:
            x = packed.unpack(x)  # (B, T, H)
        pooled = self.pooler(x) if self.pooler is not None else None
        return EncoderOutput(x, pooled, tuple(states) if states is not None else None,
                             tuple(attentions) if attentions is not None else None)
