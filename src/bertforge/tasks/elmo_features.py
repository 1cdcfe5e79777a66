"""ELMo inside a task model, as the paper adds it (Peters et al., 2018, section 3.3): the biLM frozen,
its layers mixed by weights the task learns (softmax-normalised, scaled by gamma), dropout on the
mix, the mix concatenated with the task model's own word input (word embeddings learned from scratch
over the biLM's vocabulary, where the paper's baselines use GloVe), then the task's own biLSTM.
Classification pools the biLSTM's states (max and mean over the words); tagging reads each word's.
Saved in bertforge's own format, the biLM's weights included, so a fine-tuned model stands alone.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ..models.elmo import ELMo

WORD_DIM = 100  # the task's own word vectors (GloVe's 100 in the paper's NER baseline)
HIDDEN = 128  # each direction of the task's biLSTM
MIX_DROPOUT = 0.5  # on the ELMo mix (the paper regularises it with dropout, 0.5 for NER)


class ELMoTaskModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        from ..embed import ScalarMix

        self.bert = ELMo(config)  # the frozen biLM (`.bert`: where every family's encoder is)
        self.bert.requires_grad_(False)
        self.mix = ScalarMix(config.n_layers + 1)
        self.words = nn.Embedding(config.vocab_size, WORD_DIM, padding_idx=config.pad_token_id)
        self.lstm = nn.LSTM(config.hidden_size + WORD_DIM, HIDDEN, batch_first=True, bidirectional=True)
        self.dropout = nn.Dropout(MIX_DROPOUT)

    def states(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """The task biLSTM's states (B, T, 2 HIDDEN) and the mask of real positions (B, T)."""
        mask = batch["attention_mask"].bool()
        with torch.no_grad():
            self.bert.eval()  # frozen: no dropout inside the biLM either
            layers = self.bert(batch["input_chars"], mask)
        x = torch.cat([self.dropout(self.mix(layers)), self.words(batch["input_ids"])], dim=-1)  # (B, T, 2P + W)
        lengths = mask.sum(1).cpu()
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, _ = self.lstm(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])  # (B, T, 2 HIDDEN)
        return out, mask

    def train(self, mode: bool = True):
        super().train(mode)
        self.bert.eval()
        return self


class ELMoClassifier(ELMoTaskModel):
    architecture = "ELMoForSequenceClassification"

    def __init__(self, config):
        super().__init__(config)
        self.regression = config.problem_type == "regression"
        self.classifier = nn.Linear(4 * HIDDEN, 1 if self.regression else config.num_labels)

    def logits(self, batch: dict) -> torch.Tensor:
        states, mask = self.states(batch)
        biggest = states.masked_fill(~mask[..., None], float("-inf")).amax(1)  # (B, 2 HIDDEN)
        mean = (states * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)  # (B, 2 HIDDEN)
        logits = self.classifier(self.dropout(torch.cat([biggest, mean], dim=-1)))
        return logits.squeeze(-1) if self.regression else logits

    def forward(self, batch: dict) -> tuple[dict, dict]:
        logits, labels = self.logits(batch).float(), batch["labels"]
        if self.regression:
            return {"mse": F.mse_loss(logits, labels, reduction="sum")}, {}
        return {"cls": F.cross_entropy(logits, labels, reduction="sum")}, {"cls": (logits.argmax(-1) == labels).sum()}


class ELMoTagger(ELMoTaskModel):
    architecture = "ELMoForTokenClassification"

    def __init__(self, config):
        super().__init__(config)
        self.classifier = nn.Linear(2 * HIDDEN, config.num_labels)

    def logits(self, batch: dict) -> torch.Tensor:
        return self.classifier(self.dropout(self.states(batch)[0]))  # (B, T, labels)

    def forward(self, batch: dict) -> tuple[dict, dict]:
        from .tagging import IGNORE

        logits, labels = self.logits(batch).float(), batch["labels"]
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1), ignore_index=IGNORE, reduction="sum")
        return {"tag": loss}, {"tag": ((logits.argmax(-1) == labels) & (labels != IGNORE)).sum()}
