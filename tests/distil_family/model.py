"""The network, top to bottom, from the library's shared blocks: BERT's post-LayerNorm layer, the
masked-LM head. Only the embeddings (no segment table) and the pooler (ReLU) are its own."""

import torch
from torch import nn

from bertforge.losses import vocab_loss
from bertforge.families.bert.model import Layer
from bertforge.nn.layers import Dropout, EncoderOutput, init_weights
from bertforge.nn.heads import MLMHead


class Embeddings(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.word = nn.Embedding(config.vocab_size, config.dim, padding_idx=config.pad_token_id)
        self.position = nn.Embedding(config.max_position_embeddings, config.dim)
        self.norm = nn.LayerNorm(config.dim, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.dropout)

    def forward(self, input_ids):
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        return self.dropout(self.norm(self.word(input_ids) + self.position(positions)))  # (B, T, H)


class Pooler(nn.Module):
    """DistilBERT's `pre_classifier`: ReLU(W h_[CLS] + b)."""

    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.dim, config.dim)

    def forward(self, hidden):
        return torch.relu(self.dense(hidden[:, 0]))  # (B, H)


class DistilEncoder(nn.Module):
    def __init__(self, config, pooler: bool = True):
        super().__init__()
        self.config = config
        self.embeddings = Embeddings(config)
        self.layers = nn.ModuleList(Layer(config) for _ in range(config.n_layers))
        self.pooler = Pooler(config) if pooler else None
        self.apply(lambda m: init_weights(m, config.initializer_range))

    def forward(self, input_ids, token_type_ids=None, attention_mask=None, output_hidden_states=False, **_):
        mask = None if attention_mask is None else attention_mask.bool()[:, None, None, :]  # (B, 1, 1, T)
        x = self.embeddings(input_ids)
        states = [x]
        for layer in self.layers:
            x = layer(x, mask)
            states.append(x)
        pooled = self.pooler(x) if self.pooler is not None else None
        return EncoderOutput(x, pooled, tuple(states) if output_hidden_states else None)


class DistilMaskedLM(nn.Module):
    """Masked LM at the masked positions, the decoder tied to the word embeddings."""

    architecture = "BertForMaskedLM"  # DistilBertForMaskedLM in this family (its layout's classes)

    def __init__(self, config):
        super().__init__()
        self.backbone = DistilEncoder(config, pooler=False)
        self.mlm = MLMHead(config.dim, config.vocab_size, config.activation, config.layer_norm_eps)
        self.mlm.apply(lambda m: init_weights(m, config.initializer_range))

    def logits(self, input_ids, attention_mask):
        """Every position's vocabulary logits (B, T, V), as transformers' class gives them."""
        return self.mlm(self.backbone(input_ids, None, attention_mask).last_hidden_state,
                        self.backbone.embeddings.word.weight)

    def forward(self, batch):
        hidden = self.backbone(batch["input_ids"], None, batch["attention_mask"]).last_hidden_state
        selected = hidden.reshape(-1, hidden.shape[-1]).index_select(0, batch["mlm_positions"])  # (M, H)
        logits = self.mlm(selected, self.backbone.embeddings.word.weight)  # (M, V)
        targets = batch["mlm_targets"]
        loss, correct = vocab_loss(logits, targets)
        return {"mlm": loss}, {"mlm": correct}


def masked_lm(config, terms, generator_fraction=0.25):
    return DistilMaskedLM(config)
