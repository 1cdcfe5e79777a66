"""Pretraining objectives: an encoder plus heads, each returning summed losses per term.

An objective's `forward(batch)` returns `(losses, correct)`: `losses` maps a term's name to the SUM
of its loss over the batch, `correct` to its number of correct predictions, and the batch's
`counts` give each term's denominator. The trainer
divides by the counts summed over a whole step (all micro-batches, all processes), so the loss is
exactly that of one large batch however it is split. The trainer never looks at the names.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .config import BertConfig
from .heads import MLMHead, NSPHead
from .model import Bert, init_weights


class BertPretraining(nn.Module):
    """BERT's pretraining: masked LM (at the masked positions only) + next-sentence prediction.
    Saved as HF `BertForPreTraining`; with `nsp=False`, masked LM alone, saved as `BertForMaskedLM`."""

    def __init__(self, config: BertConfig, nsp: bool = True):
        super().__init__()
        self.bert = Bert(config)
        self.mlm = MLMHead(config.hidden_size, config.vocab_size, config.hidden_act, config.layer_norm_eps)
        self.nsp = NSPHead(config.hidden_size) if nsp else None
        self.architecture = "BertForPreTraining" if nsp else "BertForMaskedLM"
        for head in (self.mlm, self.nsp):
            if head is not None:
                head.apply(lambda m: init_weights(m, config.initializer_range))

    def mlm_logits(self, hidden: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Vocabulary logits (M, V) at flat `positions` of `hidden` (B, T, H)."""
        selected = hidden.reshape(-1, hidden.shape[-1]).index_select(0, positions)  # (M, H)
        return self.mlm(selected, self.bert.embeddings.word.weight)

    def forward(self, batch: dict) -> tuple[dict, dict]:
        """Summed losses per term, and the number of correct predictions per term."""
        out = self.bert(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
        logits = self.mlm_logits(out.last_hidden_state, batch["mlm_positions"]).float()  # (M, V)
        targets = batch["mlm_targets"]
        losses = {"mlm": F.cross_entropy(logits, targets, reduction="sum")}
        correct = {"mlm": (logits.argmax(-1) == targets).sum()}
        if self.nsp is not None:
            nsp_logits = self.nsp(out.pooler_output).float()  # (B, 2)
            losses["nsp"] = F.cross_entropy(nsp_logits, batch["nsp_labels"], reduction="sum")
            correct["nsp"] = (nsp_logits.argmax(-1) == batch["nsp_labels"]).sum()
        return losses, correct
