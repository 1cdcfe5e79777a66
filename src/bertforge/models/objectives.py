"""Pretraining objectives: an encoder plus heads, each returning summed losses per term.

An objective's `forward(batch)` returns `(losses, correct)`: `losses` maps a term's name to the SUM
of its loss over the batch, `correct` to its number of correct predictions, and the batch's
`counts` give each term's denominator. The trainer divides by the counts summed over a whole step
(all micro-batches, all processes), so the loss is exactly that of one large batch however it is
split, and weighs the terms by the objective's `loss_weights` (1 when absent); otherwise it never
looks at the names. Vocabulary-sized losses are computed in fp32 (see `losses`).

Terms: `mlm` (masked LM), `nsp` (next-sentence prediction), `sop` (ALBERT's sentence order),
`sbo` (SpanBERT's span boundary), `rtd` (ELECTRA's replaced-token detection), `lm` (a left-to-right
language model: GPT-1's, AWD-LSTM's), `ar` and `tar` (AWD-LSTM's activation regularisers).
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from ..config import AWDLSTMConfig, BertConfig, ELMoConfig, GPTConfig, ModernBertConfig
from .heads import DiscriminatorHead, MLMHead, NSPHead, SpanBoundaryHead
from ..losses import sampled_softmax_loss, vocab_loss
from .awd_lstm import AWDLSTMLanguageModel
from .bert import Bert, init_weights
from .elmo import ELMoLanguageModel
from .gpt import GPT
from .modernbert import ModernBert
from .linear import linear


def mlm_head(config: BertConfig | ModernBertConfig) -> MLMHead:
    """The family's masked-LM head. RoBERTa's and ELECTRA's generator's always use GELU; BERT's and
    ALBERT's follow `hidden_act`, ModernBERT's `classifier_activation` (its head is the one its task
    classes use, biases as configured). With factorised embeddings it maps down to their width."""
    if isinstance(config, ModernBertConfig):
        return MLMHead(config.hidden_size, config.vocab_size, config.classifier_activation, config.norm_eps,
                       dense_bias=config.classifier_bias, norm_bias=config.norm_bias)
    return MLMHead(config.hidden_size, config.vocab_size, config.mlm_act, config.layer_norm_eps, config.embedding_size)


class BertPretraining(nn.Module):
    """Masked LM (at the masked positions only), with a sentence-pair task and optionally SpanBERT's
    span-boundary objective: BERT (MLM + NSP), RoBERTa (MLM), ALBERT (MLM + SOP), SpanBERT (MLM + SBO).

    `sentence` is "nsp", "sop" or None; the head is the same (two logits from the pooled [CLS]),
    the data decides what its label means. Saved as HF `...ForPreTraining` with a sentence head,
    `...ForMaskedLM` without (the family from the config: `BertForPreTraining`,
    `AlbertForPreTraining`, `RobertaForMaskedLM`, ...). The SBO head is saved beside the HF
    weights under `bertforge_sbo.` (HF ignores it; SpanBERT released its encoders without it).
    `backbone`: the encoder, when not BERT's (`ModernBertPretraining`).
    """

    def __init__(self, config: BertConfig, sentence: str | None = "nsp", span_boundary: bool = False,
                 backbone: nn.Module | None = None):
        super().__init__()
        if sentence not in ("nsp", "sop", None):
            raise ValueError(f"sentence must be 'nsp', 'sop' or None, got {sentence!r}")
        self.backbone = Bert(config, pooler=sentence is not None) if backbone is None else backbone
        self.mlm = mlm_head(config)
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


class ModernBertPretraining(BertPretraining):
    """ModernBERT's pretraining: masked LM alone over its encoder, saved as HF `ModernBertForMaskedLM`."""

    def __init__(self, config: ModernBertConfig, sentence: str | None = None, span_boundary: bool = False):
        if sentence is not None:
            raise ValueError("ModernBERT pretrains with masked LM alone (no NSP or SOP head)")
        super().__init__(config, None, span_boundary, backbone=ModernBert(config, pooler=False))


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


class RecurrentLMPretraining(AWDLSTMLanguageModel):
    """AWD-LSTM's objective over truncated-BPTT chunks (`data.streams`): every next word, plus
    activation regularisation (AR: `ar` x the mean square of the last layer's dropped output) and
    temporal activation regularisation (TAR: `tar` x the mean square of the step-to-step change of
    its raw output), both while training only (Merity et al.'s alpha = 2, beta = 1).

    The hidden state is carried from one chunk to the next of the same stream ("train", "eval"),
    detached, and reset where a chunk says `reset`. `carried()` and `carry()` hand the training
    stream's state to a checkpoint and back, so that a resumed run continues exactly. Its weights
    are the language model's (it is one), so what it saves loads as `AWDLSTMLanguageModel`."""

    def __init__(self, config: AWDLSTMConfig, ar: float = 2.0, tar: float = 1.0, sampled: int | None = None):
        super().__init__(config)
        self.loss_weights = {"ar": ar, "tar": tar}
        self.sampled = sampled  # train with a sampled softmax of this many words (held-out loss: the full one)
        self.states = {}

    def forward(self, batch: dict) -> tuple[dict, dict]:
        stream = batch["stream"]
        state = None if batch["reset"] else self.states.get(stream)
        dropped, raw, state = super().forward(batch["input_ids"], state)  # (B, T, E) each
        self.states[stream] = [(h.detach(), c.detach()) for h, c in state]
        targets = batch["labels"].reshape(-1)
        hidden = dropped.reshape(-1, dropped.shape[-1])  # (N, E)
        if self.training and self.sampled:
            loss = sampled_softmax_loss(hidden, targets, self.decoder.weight, self.decoder.bias, self.sampled)
            losses, correct = {"lm": loss}, {}
        else:
            logits = self.decoder(hidden)  # (N, V)
            loss, hits = vocab_loss(logits, targets)
            losses, correct = {"lm": loss}, {"lm": hits}
        if self.training:
            width = raw.shape[-1]
            losses["ar"] = dropped.float().pow(2).sum() / width  # / count of tokens: the mean
            losses["tar"] = (raw[:, 1:] - raw[:, :-1]).float().pow(2).sum() / width
        return losses, correct

    def carried(self) -> list[torch.Tensor]:
        return [t for pair in self.states.get("train", []) for t in pair]

    def carry(self, tensors: list[torch.Tensor]) -> None:
        self.states["train"] = list(zip(tensors[0::2], tensors[1::2]))


class BiLMPretraining(ELMoLanguageModel):
    """ELMo's biLM objective over truncated-BPTT chunks of two streams (`data.streams` with
    `bidirectional`): the forward LSTMs predict each next word of the forward stream, the backward
    LSTMs each next word of the reversed stream (the previous word in reading order), through the
    shared softmax; the loss is the mean of the two, as bilm-tf's. Each direction carries its own
    state from chunk to chunk (as `RecurrentLMPretraining`). `sampled` trains with a sampled
    softmax of that many words (bilm-tf: 8192); held-out losses use the full softmax."""

    def __init__(self, config: ELMoConfig, sampled: int | None = None):
        super().__init__(config)
        self.loss_weights = {"forward": 0.5, "backward": 0.5}
        self.sampled = sampled
        self.states = {}

    def _direction(self, name: str, layers, chars, targets, batch) -> tuple[torch.Tensor, torch.Tensor | None]:
        key = (batch["stream"], name)
        state = None if batch["reset"] else self.states.get(key)
        outputs, state = self.backbone.run(layers, self.backbone.embeddings(chars), state)
        self.states[key] = [(h.detach(), c.detach()) for h, c in state]
        top = F.dropout(outputs[-1], self.backbone.config.dropout, self.training)
        hidden, targets = top.reshape(-1, top.shape[-1]), targets.reshape(-1)  # (N, P), (N,)
        if self.training and self.sampled:
            return sampled_softmax_loss(hidden, targets, self.softmax.weight, self.softmax.bias, self.sampled), None
        logits = self.softmax(hidden)  # (N, V)
        return vocab_loss(logits, targets)

    def forward(self, batch: dict) -> tuple[dict, dict]:
        losses, correct = {}, {}
        for name, layers, prefix in (("forward", self.backbone.forward_layers, ""),
                                     ("backward", self.backbone.backward_layers, "backward_")):
            losses[name], right = self._direction(name, layers, batch[prefix + "chars"], batch[prefix + "labels"],
                                                  batch)
            if right is not None:
                correct[name] = right
        return losses, correct

    def carried(self) -> list[torch.Tensor]:
        return [t for name in ("forward", "backward") for pair in self.states.get(("train", name), []) for t in pair]

    def carry(self, tensors: list[torch.Tensor]) -> None:
        half = len(tensors) // 2
        for name, part in (("forward", tensors[:half]), ("backward", tensors[half:])):
            self.states[("train", name)] = list(zip(part[0::2], part[1::2]))


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


# The builders a family's objectives name (`families.Objective.build`): (config, terms, generator_fraction).


def masked_lm(config, terms: tuple[str, ...], generator_fraction: float = 0.25) -> BertPretraining:
    """Masked LM with the sentence-pair (nsp, sop) and span-boundary (sbo) terms asked for."""
    sentence = next((t for t in terms if t in ("nsp", "sop")), None)
    return BertPretraining(config, sentence=sentence, span_boundary="sbo" in terms)


def modernbert_masked_lm(config, terms: tuple[str, ...], generator_fraction: float = 0.25) -> ModernBertPretraining:
    return ModernBertPretraining(config, span_boundary="sbo" in terms)


def electra(config, terms: tuple[str, ...], generator_fraction: float = 0.25) -> "ElectraPretraining":
    return ElectraPretraining(config, generator_fraction)


def causal_lm(config, terms: tuple[str, ...], generator_fraction: float = 0.25) -> CausalLMPretraining:
    return CausalLMPretraining(config)
