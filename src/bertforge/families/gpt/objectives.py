"""GPT-1's pretraining objective: the next token from those before it."""

from __future__ import annotations

import torch
from torch import nn

from ...losses import vocab_loss
from ...nn.linear import linear
from .config import GPTConfig
from .model import GPT


class CausalLMPretraining(nn.Module):
    """GPT-1's objective: predict every next token from those before it, through the LM head tied
    to the token embeddings (no bias, as OpenAI's). Saved as HF `OpenAIGPTLMHeadModel` (GPT-2's
    layer order: `GPT2LMHeadModel`; rotary positions: `GPTNeoXForCausalLM`)."""

    ARCHITECTURES = {"openai-gpt": "OpenAIGPTLMHeadModel", "gpt2": "GPT2LMHeadModel", "gpt_neox": "GPTNeoXForCausalLM"}

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.architecture = self.ARCHITECTURES[config.model_type]
        self.backbone = GPT(config)  # the decoder, where the encoder is in the other objectives

    def lm_logits(self, hidden: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Vocabulary logits (M, V) at flat `positions` of `hidden` (B, T, H)."""
        selected = hidden.reshape(-1, hidden.shape[-1]).index_select(0, positions)  # (M, H)
        return linear(selected, self.backbone.embeddings.word.weight)  # (M, V)

    def forward(self, batch: dict) -> tuple[dict, dict]:
        out = self.backbone(batch["input_ids"], None, batch["attention_mask"])
        logits = self.lm_logits(out.last_hidden_state, batch["lm_positions"])  # (M, V)
        targets = batch["lm_targets"]
        loss, hits = vocab_loss(logits, targets)
        return {"lm": loss}, {"lm": hits}


def causal_lm(config, terms: tuple[str, ...], generator_fraction: float = 0.25) -> CausalLMPretraining:
    return CausalLMPretraining(config)
