"""AWD-LSTM's config (ULMFiT's language model) and its sizes."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...config.base import HFConfig, _check
from ...errors import BertforgeError


@dataclass
class AWDLSTMConfig(HFConfig):
    """Merity et al.'s AWD-LSTM language model (2018), the one ULMFiT (Howard & Ruder, 2018)
    fine-tunes: word embeddings of `emb_sz`, `n_layers` LSTMs of `n_hid` (the last one of `emb_sz`,
    so that the decoder can share the embedding matrix), and its five dropouts. No `transformers`
    class exists for it: bertforge writes its own `config.json` (model_type "awd-lstm") and weights
    under its own names.

    Defaults are ULMFiT's (fastai's `awd_lstm_lm_config`): 400 / 1152 / 3 layers; the dropouts are
    fastai's, which its `drop_mult` scales (`dropout_scale` here). `bidirectional=False` always: a
    backward model is a forward model trained on reversed text (`backwards`).
    """

    vocab_size: int = 60000
    emb_sz: int = 400
    n_hid: int = 1152
    n_layers: int = 3
    output_p: float = 0.1  # on the last LSTM's output, before the decoder
    hidden_p: float = 0.15  # between LSTM layers (locked: one mask per sequence)
    input_p: float = 0.25  # on the embedded input (locked)
    embed_p: float = 0.02  # whole words dropped from the embedding matrix
    weight_p: float = 0.2  # DropConnect on the hidden-to-hidden weights
    tie_weights: bool = True
    out_bias: bool = True
    backwards: bool = False  # trained on reversed documents (ULMFiT's backward model)
    pad_token_id: int = 1
    classifier_dropout: float | None = None  # a classifier's first dropout (None: output_p)
    model_type: str = "awd-lstm"
    architectures: list[str] = field(default_factory=lambda: ["AWDLSTMLanguageModel"])

    def __post_init__(self) -> None:
        self._check_ranges(counts=("vocab_size", "emb_sz", "n_hid", "n_layers"),
                           probabilities=("output_p", "hidden_p", "input_p", "embed_p", "weight_p"))
        _check(self.model_type == "awd-lstm", "model_type", "'awd-lstm'", self.model_type)
        _check(isinstance(self.pad_token_id, int) and 0 <= self.pad_token_id < self.vocab_size, "pad_token_id",
               f"an id below vocab_size={self.vocab_size}", self.pad_token_id)
        self._check_heads()

    # The names code shared by every family reads.
    hidden_size = property(lambda self: self.emb_sz)  # what the last layer gives a task head
    num_hidden_layers = property(lambda self: self.n_layers)


# Sizes of AWD-LSTM: ULMFiT's, and smaller ones a CPU trains in minutes (the same 3 layers, the
# last of the embedding width so that the decoder is tied).
AWD_LSTM_PRESETS = {
    "awd-lstm-tiny": {"emb_sz": 64, "n_hid": 128},
    "awd-lstm-small": {"emb_sz": 200, "n_hid": 576},
    "awd-lstm-ulmfit": {"emb_sz": 400, "n_hid": 1152},
}


def awd_lstm_preset(name: str, **overrides) -> AWDLSTMConfig:
    if name not in AWD_LSTM_PRESETS:
        raise BertforgeError(f"unknown preset {name!r} for AWD-LSTM; choose one of {', '.join(AWD_LSTM_PRESETS)}")
    return AWDLSTMConfig(**{**AWD_LSTM_PRESETS[name], **overrides})
