"""DistilBERT's config.json keys, and the names the shared blocks read (BERT's) as properties."""

from dataclasses import dataclass, field

from bertforge.config.base import HFConfig


@dataclass
class DistilConfig(HFConfig):
    vocab_size: int = 100
    max_position_embeddings: int = 64
    sinusoidal_pos_embds: bool = False
    n_layers: int = 2
    n_heads: int = 4
    dim: int = 32
    hidden_dim: int = 64
    dropout: float = 0.1
    attention_dropout: float = 0.1
    activation: str = "gelu"
    initializer_range: float = 0.02
    qa_dropout: float = 0.1
    seq_classif_dropout: float = 0.2
    pad_token_id: int = 0
    model_type: str = "distilbert"
    architectures: list = field(default_factory=lambda: ["DistilBertModel"])

    # what the shared blocks (families.bert.model.Layer, nn.heads) and the generic code read
    hidden_size = property(lambda self: self.dim)
    num_hidden_layers = property(lambda self: self.n_layers)
    num_attention_heads = property(lambda self: self.n_heads)
    intermediate_size = property(lambda self: self.hidden_dim)
    hidden_act = property(lambda self: self.activation)
    hidden_dropout_prob = property(lambda self: self.dropout)
    attention_probs_dropout_prob = property(lambda self: self.attention_dropout)
    classifier_dropout = property(lambda self: self.seq_classif_dropout)
    max_length = property(lambda self: self.max_position_embeddings)
    layer_norm_eps = 1e-12
    token_types = False  # no segment embeddings: pairs are told apart by [SEP] alone
    score_bias = True

    def __post_init__(self):
        self._check_ranges(counts=("vocab_size", "dim", "n_layers", "n_heads", "hidden_dim"),
                           probabilities=("dropout", "attention_dropout"))
        self._check_heads()


PRESETS = {"distil-tiny": {"dim": 32, "n_layers": 2, "n_heads": 4, "hidden_dim": 64}}


def new_config(preset, tokenizer, objective, positions, layer_norm, overrides=None) -> DistilConfig:
    return DistilConfig(vocab_size=tokenizer.vocab_size, pad_token_id=tokenizer.pad_id, **PRESETS[preset],
                        **(overrides or {}))
