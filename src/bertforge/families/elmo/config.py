"""ELMo's biLM config and its sizes."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...config.base import HFConfig, _check, _is_number
from ...errors import BertforgeError


@dataclass
class ELMoConfig(HFConfig):
    """ELMo's bidirectional language model (Peters et al., 2018), in the names of AllenNLP's
    `options.json` where it has one: a character encoder (each word as up to
    `max_characters_per_token` UTF-8 bytes, `char_embedding_dim`-wide character embeddings,
    convolutions of the widths and counts in `filters`, `n_highway` highway layers, a projection to
    `projection_dim`), then `n_layers` LSTMs per direction of `cell_size` cells projected back to
    `projection_dim`, cells and projections clipped to +-`cell_clip`, +-`proj_clip`, with a residual
    connection from the second layer up. `vocab_size` words in the softmax the two directions share.

    Defaults are the paper's Original model (93.6M parameters without the softmax); see
    `ELMO_PRESETS` for its Small one and sizes a CPU trains in minutes.
    """

    vocab_size: int = 60000
    max_characters_per_token: int = 50
    char_embedding_dim: int = 16
    filters: list = field(default_factory=lambda: [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]])
    n_highway: int = 2
    activation: str = "relu"
    projection_dim: int = 512
    cell_size: int = 4096
    n_layers: int = 2
    cell_clip: float = 3.0
    proj_clip: float = 3.0
    dropout: float = 0.1
    pad_token_id: int = 1
    model_type: str = "elmo"
    architectures: list[str] = field(default_factory=lambda: ["ELMoLanguageModel"])

    def __post_init__(self) -> None:
        self._check_ranges(counts=("vocab_size", "max_characters_per_token", "char_embedding_dim", "projection_dim",
                                   "cell_size", "n_layers"), probabilities=("dropout",))
        _check(isinstance(self.n_highway, int) and self.n_highway >= 0, "n_highway", "a count", self.n_highway)
        _check(self.max_characters_per_token >= 3, "max_characters_per_token", "at least 3 (begin, a byte, end)",
               self.max_characters_per_token)
        _check(isinstance(self.filters, list) and self.filters and all(
            isinstance(f, list) and len(f) == 2 and all(isinstance(v, int) and v > 0 for v in f) for f in self.filters)
            and max(w for w, _ in self.filters) <= self.max_characters_per_token, "filters",
            "a list of [width, count] pairs, widths at most max_characters_per_token", self.filters)
        _check(self.activation in ("relu", "tanh"), "activation", "relu or tanh", self.activation)
        for name in ("cell_clip", "proj_clip"):
            value = getattr(self, name)
            _check(value is None or _is_number(value) and value > 0, name, "a positive number or null", value)
        _check(self.model_type == "elmo", "model_type", "'elmo'", self.model_type)
        self._check_heads()

    # The names code shared by every family reads: ELMo's representations are [forward; backward].
    hidden_size = property(lambda self: 2 * self.projection_dim)
    num_hidden_layers = property(lambda self: self.n_layers)


# ELMo's sizes: the paper's Original (2 x 4096 cells, 512 projections, 2048 filters, 2 highways) and
# Small (2 x 1024, 128, 2048 filters, 1 highway: AllenNLP's 13.6M one), and sizes a CPU trains in minutes.
_ELMO_FILTERS = [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]]


ELMO_PRESETS = {
    "elmo-tiny": {"filters": [[1, 8], [2, 8], [3, 16], [4, 16]], "n_highway": 1, "projection_dim": 32,
                  "cell_size": 64, "char_embedding_dim": 8},
    "elmo-cpu": {"filters": [[1, 32], [2, 32], [3, 64], [4, 128], [5, 128], [6, 128], [7, 128]], "n_highway": 1,
                 "projection_dim": 128, "cell_size": 512},
    "elmo-small": {"filters": _ELMO_FILTERS, "n_highway": 1, "projection_dim": 128, "cell_size": 1024},
    "elmo-original": {"filters": _ELMO_FILTERS, "n_highway": 2, "projection_dim": 512, "cell_size": 4096},
}


def elmo_preset(name: str, **overrides) -> ELMoConfig:
    if name not in ELMO_PRESETS:
        raise BertforgeError(f"unknown preset {name!r} for ELMo; choose one of {', '.join(ELMO_PRESETS)}")
    return ELMoConfig(**{**ELMO_PRESETS[name], **overrides})
