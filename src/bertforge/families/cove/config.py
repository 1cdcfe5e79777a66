"""The config of CoVe's translation model (McCann et al., 2017): an attentional LSTM
encoder-decoder over fixed word vectors, and its sizes. `transformers` has no such model: it is
saved in bertforge's own layout (formats/cove.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...config.base import HFConfig, _check

# "cove" is the paper's MT-LSTM (a 2-layer biLSTM of 300 per direction over 300-d GloVe) with an
# OpenNMT-style decoder; "cove-tiny" is for tests.
FEATURES = ("glove", "cove", "glove+cove")
PRESETS = {
    "cove-tiny": dict(encoder_hidden=16, decoder_hidden=32, target_embed_dim=16, encoder_layers=2, decoder_layers=1),
    "cove": dict(encoder_hidden=300, decoder_hidden=600, target_embed_dim=300, encoder_layers=2, decoder_layers=2),
}


@dataclass
class CoveConfig(HFConfig):
    """The encoder (CoVe's MT-LSTM): `source_vocab_size` words with fixed `word_dim`-d vectors, then
    `encoder_layers` bidirectional LSTM layers of `encoder_hidden` per direction. The decoder:
    `decoder_layers` LSTM layers of `decoder_hidden` fed each step the previous target word
    (`target_embed_dim`) and the previous attentional state (input feeding), Luong's global
    "general" attention over the encoder states, and an output softmax over `vocab_size` sub-words.
    Special ids as the Transformer's (Marian's): `</s>` 0, pad the last target id and the start of
    every decoding. `max_position_embeddings` is only the ceiling of a decoded length (an LSTM
    has no positions)."""

    source_vocab_size: int = 4
    vocab_size: int = 8000
    word_dim: int = 300
    encoder_hidden: int = 300
    encoder_layers: int = 2
    decoder_hidden: int = 600
    decoder_layers: int = 2
    target_embed_dim: int = 300
    dropout: float = 0.2
    source_lowercase: bool = True
    task_features: str = "glove+cove"  # what a fine-tuned task model reads (finetune --features)
    max_position_embeddings: int = 1024
    pad_token_id: int | None = None  # None: the last target id
    eos_token_id: int = 0
    decoder_start_token_id: int | None = None  # None: the pad id
    model_type: str = "cove"
    architectures: list[str] = field(default_factory=lambda: ["CoveTranslator"])

    def __post_init__(self) -> None:
        self._check_ranges(counts=("source_vocab_size", "vocab_size", "word_dim", "encoder_hidden", "encoder_layers",
                                   "decoder_hidden", "decoder_layers", "target_embed_dim", "max_position_embeddings"),
                           probabilities=("dropout",))
        _check(self.model_type == "cove", "model_type", "'cove'", self.model_type)
        _check(self.task_features in FEATURES, "task_features", f"one of {', '.join(FEATURES)}", self.task_features)
        self._check_translation_ids()
        self._check_heads()

    # The names code shared by every family reads.
    @property
    def hidden_size(self) -> int:
        """The width of a CoVe vector: both directions of the encoder's top layer."""
        return 2 * self.encoder_hidden

    @property
    def num_hidden_layers(self) -> int:
        return self.encoder_layers

    @property
    def num_attention_heads(self) -> int:
        return 1
