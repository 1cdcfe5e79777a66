from dataclasses import dataclass, field

from bertforge.config.base import HFConfig


@dataclass
class GRUConfig(HFConfig):
    vocab_size: int = 100
    d_model: int = 32
    dropout: float = 0.0
    max_position_embeddings: int = 256  # the longest sentence it reads or writes
    pad_token_id: int | None = None
    eos_token_id: int = 0
    decoder_start_token_id: int | None = None
    model_type: str = "tiny-gru"
    architectures: list = field(default_factory=lambda: ["GRUTranslator"])

    # what every config says of itself (the trainer's header, the recipe)
    max_length = property(lambda self: self.max_position_embeddings)
    hidden_size = property(lambda self: self.d_model)
    num_hidden_layers = 1

    def __post_init__(self):
        self._check_ranges(counts=("vocab_size", "d_model"), probabilities=("dropout",))
        self._check_translation_ids()
        self._check_heads()


PRESETS = {"gru-tiny": {"d_model": 48}}
