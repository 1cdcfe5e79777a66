"""BERT's pretraining objectives (BERT, RoBERTa, SpanBERT, ALBERT, ELECTRA): the encoder plus
heads, each returning summed losses per term.

Every family's objective keeps the same contract. An objective's `forward(batch)` returns `(losses, correct)`: `losses` maps a term's name to the SUM
of its loss over the batch, `correct` to its number of correct predictions, and the batch's
`counts` give each term's denominator. The trainer divides by the counts summed over a whole step
(all micro-batches, all processes), so the loss is exactly that of one large batch however it is
split, and weighs the terms by the objective's `loss_weights` (1 when absent); otherwise it never
looks at the names. Vocabulary-sized losses are computed in fp32 (see `losses`).

Terms: `mlm` (masked LM), `nsp` (next-sentence prediction), `sop` (ALBERT's sentence order),
`sbo` (SpanBERT's span boundary), `rtd` (ELECTRA's replaced-token detection), `lm` (a left-to-right
language model: GPT-1's, AWD-LSTM's, ELMo's; in their families' `objectives.py`), `ar` and `tar`
(AWD-LSTM's activation regularisers).
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from ...losses import vocab_loss
from ...nn.heads import DiscriminatorHead, MLMHead, NSPHead, SpanBoundaryHead
from ...nn.layers import init_weights
from .config import BertConfig
from .model import Bert


def mlm_head(config: BertConfig) -> MLMHead:
    """BERT's masked-LM head. RoBERTa's and ELECTRA's generator's always use GELU; BERT's and
    ALBERT's follow `hidden_act`. With factorised embeddings it maps down to their width."""
    return MLMHead(config.hidden_size, config.vocab_size, config.mlm_act, config.layer_norm_eps, config.embedding_size)


class BertPretraining(nn.Module):
    """Masked LM (at the masked positions only), with a sentence-pair task and optionally SpanBERT's
    span-boundary objective: BERT (MLM + NSP), RoBERTa (MLM), ALBERT (MLM + SOP), SpanBERT (MLM + SBO).

    `sentence` is "nsp", "sop" or None; the head is the same (two logits from the pooled [CLS]),
    the data decides what its label means. Saved as HF `...ForPreTraining` with a sentence head,
    `...ForMaskedLM` without (the family from the config: `BertForPreTraining`,
    `AlbertForPreTraining`, `RobertaForMaskedLM`, ...). The SBO head is saved beside the HF
    weights under `bertforge_sbo.` (HF ignores it; SpanBERT released its encoders without it).
    `backbone` and `mlm`: the encoder and its masked-LM head, when not BERT's (`ModernBertPretraining`).
    """

    def __init__(self, config: BertConfig, sentence: str | None = "nsp", span_boundary: bool = False,
                 backbone: nn.Module | None = None, mlm: nn.Module | None = None):
        super().__init__()
        if sentence not in ("nsp", "sop", None):
            raise ValueError(f"sentence must be 'nsp', 'sop' or None, got {sentence!r}")
        self.backbone = Bert(config, pooler=sentence is not None) if backbone is None else backbone
        self.mlm = mlm_head(config) if mlm is None else mlm
        self.sentence = sentence
        self.nsp = NSPHead(config.hidden_size) if sentence else None
        self.sbo = SpanBoundaryHead(config.hidden_size, config.vocab_size, layer_norm_eps=config.layer_norm_eps) \
            if span_boundary else None
        self.architecture = "BertForPreTraining" if sentence else "BertForMaskedLM"
        for head in (self.mlm, self.nsp, self.sbo):
            if head is not None:
                head.apply(lambda m: init_weights(m, config.initializer_range))

    def mlm_logits(self, hidden: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Vocabulary logits (M, V) at flat `positions` of `hidden` (B, T, H)."""
        selected = hidden.reshape(-1, hidden.shape[-1]).index_select(0, positions)  # (M, H)
        return self.mlm(selected, self.backbone.embeddings.word.weight)

    def forward(self, batch: dict) -> tuple[dict, dict]:
        """Summed losses per term, and the number of correct predictions per term."""
        out = self.backbone(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
        logits = self.mlm_logits(out.last_hidden_state, batch["mlm_positions"])  # (M, V)
        targets = batch["mlm_targets"]
        loss, hits = vocab_loss(logits, targets)
        losses, correct = {"mlm": loss}, {"mlm": hits}
        if self.nsp is not None:
            labels = batch["sentence_labels"]
            sentence_logits = self.nsp(out.pooler_output).float()  # (B, 2)
            losses[self.sentence] = F.cross_entropy(sentence_logits, labels, reduction="sum")
            correct[self.sentence] = (sentence_logits.argmax(-1) == labels).sum()
        if self.sbo is not None:
            flat = out.last_hidden_state.reshape(-1, out.last_hidden_state.shape[-1])  # (B*T, H)
            sbo_logits = self.sbo(flat.index_select(0, batch["sbo_left"]), flat.index_select(0, batch["sbo_right"]),
                                  batch["sbo_offsets"], self.backbone.embeddings.word.weight)  # (M, V)
            losses["sbo"], correct["sbo"] = vocab_loss(sbo_logits, targets)
        return losses, correct


def replaced_tokens(input_ids: torch.Tensor, positions: torch.Tensor, targets: torch.Tensor,
                    sampled: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """ELECTRA's discriminator input and labels: `input_ids` (B, T) with the flat `positions` set to
    the generator's `sampled` ids, and labels (B, T) that are 1 where the result differs from the
    original `targets` (a sample equal to the original counts as original)."""
    fake = input_ids.reshape(-1).index_copy(0, positions, sampled).view_as(input_ids)
    replaced = (sampled != targets).float()
    labels = torch.zeros(input_ids.numel(), device=input_ids.device).index_copy(0, positions, replaced)
    return fake, labels.view_as(input_ids)


def generator_config(config: BertConfig, fraction: float) -> BertConfig:
    """ELECTRA's generator: the discriminator's depth with `fraction` of its width, heads and
    feed-forward size, reading the same (shared) embeddings."""
    if not 0 < fraction <= 1:
        raise ValueError(f"the generator fraction must be in (0, 1], got {fraction}")
    heads = max(1, round(config.num_attention_heads * fraction))
    hidden = max(heads, round(config.hidden_size * fraction / heads) * heads)  # a multiple of the heads
    return dataclasses.replace(config, hidden_size=hidden, num_attention_heads=heads,
                               intermediate_size=max(1, round(config.intermediate_size * fraction)),
                               embedding_size=config.word_size, architectures=["ElectraForMaskedLM"])


class ElectraPretraining(nn.Module):
    """ELECTRA (Clark et al., 2020): a small masked-LM generator fills the masked positions with
    samples, and the discriminator labels every token as original or replaced.

    The two share their embeddings (token, position and segment, as in the paper). A sample equal
    to the original counts as original. Loss = generator MLM + `rtd_weight` x discriminator
    (50 in the paper). Saved as HF `ElectraForPreTraining` (the discriminator, which is the model
    to fine-tune) with the generator as `ElectraForMaskedLM` in `generator/`.
    """

    architecture = "ElectraForPreTraining"

    def __init__(self, config: BertConfig, generator_fraction: float = 0.25, rtd_weight: float = 50.0):
        super().__init__()
        if config.model_type != "electra":
            raise ValueError("ElectraPretraining needs a config with model_type 'electra'")
        self.backbone = Bert(config, pooler=False)
        self.discriminator = DiscriminatorHead(config.hidden_size, config.hidden_act)
        self.discriminator.apply(lambda m: init_weights(m, config.initializer_range))
        self.generator = BertPretraining(generator_config(config, generator_fraction), sentence=None)
        self.generator.backbone.embeddings = self.backbone.embeddings  # one module, trained by both
        self.loss_weights = {"rtd": rtd_weight}

    def parts(self) -> dict[str, nn.Module]:
        return {"": self, "generator": self.generator}

    def forward(self, batch: dict) -> tuple[dict, dict]:
        ids, types, mask = batch["input_ids"], batch["token_type_ids"], batch["attention_mask"]
        positions, targets = batch["mlm_positions"], batch["mlm_targets"]
        hidden = self.generator.backbone(ids, types, mask).last_hidden_state
        logits = self.generator.mlm_logits(hidden, positions)  # (M, V)
        loss, hits = vocab_loss(logits, targets)
        losses, correct = {"mlm": loss}, {"mlm": hits}

        with torch.no_grad():  # no gradient flows through the sampling (as in the paper)
            sampled = torch.multinomial(logits.float().softmax(-1), 1).squeeze(1)  # (M,)
        fake, labels = replaced_tokens(ids, positions, targets, sampled)
        scores = self.discriminator(self.backbone(fake, types, mask).last_hidden_state).float()  # (B, T)
        real = mask.bool()
        scores, labels = scores[real], labels[real]  # every real token, [CLS] and [SEP] included
        losses["rtd"] = F.binary_cross_entropy_with_logits(scores, labels, reduction="sum")
        correct["rtd"] = ((scores > 0) == labels.bool()).sum()
        return losses, correct


def masked_lm(config, terms: tuple[str, ...], generator_fraction: float = 0.25) -> BertPretraining:
    """Masked LM with the sentence-pair (nsp, sop) and span-boundary (sbo) terms asked for."""
    sentence = next((t for t in terms if t in ("nsp", "sop")), None)
    return BertPretraining(config, sentence=sentence, span_boundary="sbo" in terms)


def electra(config, terms: tuple[str, ...], generator_fraction: float = 0.25) -> "ElectraPretraining":
    return ElectraPretraining(config, generator_fraction)
