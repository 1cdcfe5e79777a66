"""ELMo inside a task model, as the paper adds it (Peters et al., 2018, section 3.3): the biLM frozen,
its layers (each layer-normalised) mixed by weights the task learns (softmax-normalised, scaled by
gamma), dropout on the mix, the mix concatenated with the task model's own word input (word
embeddings learned from scratch over the biLM's vocabulary, where the paper's baselines use GloVe),
then the task's own biLSTM.
Classification pools the biLSTM's states (max and mean over the words); tagging reads each word's.
Saved in bertforge's own format, the biLM's weights included, so a fine-tuned model stands alone.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ...errors import BertforgeError
from ...losses import classification_losses, tagging_losses
from .model import ELMo
from ...nn.lstm import packed_bilstm as bilstm
from ...nn.scalar_mix import ScalarMix
from ...nn.frozen_outputs import FrozenOutputs

WORD_DIM = 100  # the task's own word vectors (GloVe's 100 in the paper's NER baseline)
HIDDEN = 128  # each direction of the task's biLSTM
MIX_DROPOUT = 0.5  # on the ELMo mix (the paper regularises it with dropout, 0.5 for NER)


class OverFrozenLM(nn.Module):
    """A task model over a frozen biLM (at `.backbone`, where every family's encoder is) with word
    embeddings of its own and dropout."""

    def __init__(self, config):
        super().__init__()
        self.backbone = ELMo(config)
        self.backbone.requires_grad_(False)
        self.words = nn.Embedding(config.vocab_size, WORD_DIM, padding_idx=config.pad_token_id)
        self.dropout = nn.Dropout(MIX_DROPOUT)

    def train(self, mode: bool = True):
        super().train(mode)
        self.backbone.eval()  # frozen: no dropout inside the biLM either
        return self

    def keep_frozen_outputs(self) -> None:
        """From now on keep the frozen biLM's layers per sentence (fine-tuning turns this on, never
        inference, which serves any number of texts)."""
        self.kept = FrozenOutputs()

    def lm_layers(self, batch: dict) -> list[torch.Tensor]:
        """The frozen biLM's layers for the batch, each (B, T, 2P), zeros at padding; with
        `keep_frozen_outputs`, the biLM reads only the sentences it has not read before."""
        chars, mask = batch["input_chars"], batch["attention_mask"].bool()
        kept = self.__dict__.get("kept")  # a plain attribute: never in the state dict
        if kept is None:
            with torch.no_grad():
                return self.backbone(chars, mask)
        return kept(chars, mask, self.backbone)


class ELMoTaskModel(OverFrozenLM):
    def __init__(self, config):
        super().__init__(config)
        self.mix = ScalarMix(config.n_layers + 1)
        self.lstm = nn.LSTM(config.hidden_size + WORD_DIM, HIDDEN, batch_first=True, bidirectional=True)

    def states(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """The task biLSTM's states (B, T, 2 HIDDEN) and the mask of real positions (B, T)."""
        mask = batch["attention_mask"].bool()
        # Each layer normalised before the mix (the paper's option for when layer scales differ):
        # a pretrained biLM's character layer is ~10x larger than its LSTM layers, enough to
        # saturate the task LSTM's gates (measured: SST-2 59.5 with the raw mix, below a random biLM).
        layers = [F.layer_norm(h, h.shape[-1:]) for h in self.lm_layers(batch)]
        mixed = self.dropout(self.mix(layers))  # (B, T, 2P)
        x = torch.cat([mixed, self.words(batch["input_ids"])], dim=-1)  # (B, T, 2P + W)
        return bilstm(self.lstm, x, mask), mask


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
        return classification_losses(self.logits(batch), batch["labels"], self.regression)


class ELMoTagger(ELMoTaskModel):
    architecture = "ELMoForTokenClassification"

    def __init__(self, config):
        super().__init__(config)
        self.classifier = nn.Linear(2 * HIDDEN, config.num_labels)

    def logits(self, batch: dict) -> torch.Tensor:
        return self.classifier(self.dropout(self.states(batch)[0]))  # (B, T, labels)

    def forward(self, batch: dict) -> tuple[dict, dict]:
        return tagging_losses(self.logits(batch), batch["labels"])


class TagLMTagger(OverFrozenLM):
    """TagLM (Peters et al., 2017), ELMo's predecessor: a sequence tagger whose own token input is a
    word embedding and a character CNN; its first biLSTM layer's output is concatenated with the
    pretrained language model's states (the top layer of the forward and of the backward LM, frozen)
    before the second biLSTM layer; a dense layer gives each word's tag scores and a linear-chain CRF
    decodes the sentence. With `lm_states=False` the same tagger without the LM: the baseline the
    paper improves on (TagLM's "no LM" row)."""

    architecture = "TagLMForTokenClassification"
    CHAR_DIM, CHAR_FILTERS, CHAR_WIDTH = 16, 30, 3  # the paper's character CNN: 30 filters of width 3

    def __init__(self, config, lm_states: bool = True):
        super().__init__(config)
        from ...nn.crf import CRF

        self.lm_states = lm_states
        self.chars = nn.Embedding(262, self.CHAR_DIM, padding_idx=0)
        self.char_cnn = nn.Conv1d(self.CHAR_DIM, self.CHAR_FILTERS, self.CHAR_WIDTH, padding=1)
        self.lstm = nn.LSTM(WORD_DIM + self.CHAR_FILTERS, HIDDEN, batch_first=True, bidirectional=True)
        lm_width = config.hidden_size if lm_states else 0
        self.lstm2 = nn.LSTM(2 * HIDDEN + lm_width, HIDDEN, batch_first=True, bidirectional=True)
        self.dense = nn.Linear(2 * HIDDEN, config.num_labels)
        self.crf = CRF(config.num_labels)

    def logits(self, batch: dict) -> torch.Tensor:
        """Each position's tag scores (B, T, labels)."""
        mask = batch["attention_mask"].bool()
        chars = batch["input_chars"]  # (B, T, C)
        b, t, c = chars.shape
        by_char = self.chars(chars.view(b * t, c)).transpose(1, 2)  # (B*T, E, C)
        char_vectors = self.char_cnn(by_char).amax(-1).view(b, t, -1)  # (B, T, filters)
        x = self.dropout(torch.cat([self.words(batch["input_ids"]), char_vectors], dim=-1))
        h = bilstm(self.lstm, x, mask)  # (B, T, 2 HIDDEN)
        if self.lm_states:
            h = torch.cat([h, self.lm_layers(batch)[-1]], dim=-1)  # + [forward top; backward top] (B, T, 2P)
        h = bilstm(self.lstm2, self.dropout(h), mask)
        return self.dense(self.dropout(h))

    def emissions(self, batch: dict) -> torch.Tensor:
        logits = self.logits(batch).float()
        positions = batch["word_positions"].unsqueeze(-1).expand(-1, -1, logits.shape[-1])  # (B, W, labels)
        return logits.gather(1, positions)

    def decode(self, batch: dict) -> list[list[int]]:
        return self.crf.decode(self.emissions(batch), batch["word_mask"])

    def forward(self, batch: dict) -> tuple[dict, dict]:
        tags = batch["labels"].gather(1, batch["word_positions"])  # (B, W); padding masked out below
        return {"crf": self.crf.nll(self.emissions(batch), tags, batch["word_mask"]).sum()}, {}


def task_model(task, config) -> nn.Module:
    """An ELMo biLM's task model: a classifier or a tagger over its frozen layers, or TagLM's tagger."""
    if task.kind == "classification":
        return ELMoClassifier(config)
    if task.tagger is not None:
        return TagLMTagger(config, lm_states=task.tagger == "taglm")
    if task.crf:
        raise BertforgeError("--crf is for BERT-family taggers and TagLM (--tagger taglm); ELMo's recipe "
                             "tags each word on its own")
    return ELMoTagger(config)
