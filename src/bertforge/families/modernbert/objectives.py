"""ModernBERT's pretraining: BERT's masked-LM objective over its own encoder and head."""

from __future__ import annotations

from ...nn.heads import MLMHead
from ..bert.objectives import BertPretraining
from .config import ModernBertConfig
from .model import ModernBert


class ModernBertPretraining(BertPretraining):
    """ModernBERT's pretraining: masked LM alone over its encoder, saved as HF `ModernBertForMaskedLM`."""

    def __init__(self, config: ModernBertConfig, sentence: str | None = None, span_boundary: bool = False):
        if sentence is not None:
            raise ValueError("ModernBERT pretrains with masked LM alone (no NSP or SOP head)")
        # the encoder, then the head: the order their weights were drawn in before
        super().__init__(config, None, span_boundary, backbone=ModernBert(config, pooler=False), mlm=mlm_head(config))


def mlm_head(config: ModernBertConfig) -> MLMHead:
    """ModernBERT's masked-LM head: the head its task classes use (`classifier_activation`, biases
    as configured)."""
    return MLMHead(config.hidden_size, config.vocab_size, config.classifier_activation, config.norm_eps,
                   dense_bias=config.classifier_bias, norm_bias=config.norm_bias)


def modernbert_masked_lm(config, terms: tuple[str, ...], generator_fraction: float = 0.25) -> ModernBertPretraining:
    return ModernBertPretraining(config, span_boundary="sbo" in terms)
