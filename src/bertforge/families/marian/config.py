"""The config of the Transformer for translation (Vaswani et al., 2017), spelled as HF's
`MarianConfig` so that a model directory loads in `transformers` as `MarianMTModel`, and its sizes."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...config.base import HFConfig, _check

# Named sizes. "multi30k" is the one sized for Multi30k on a 2-core CPU (benchmarks/translation.py);
# "base" and "big" are the paper's (Table 3), big with its dropout of 0.3.
PRESETS = {
    "mt-tiny": dict(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                    decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128),
    # 29,000 pairs are seen ~60 times an hour: at the dropout of 0.3 reported for Multi30k the model
    # stopped improving at a third of the hour; 0.4 scored 0.7 BLEU more there on validation and
    # test alike, and 0.5 scored lower than 0.4 on both (docs/translation.md)
    "multi30k": dict(d_model=256, encoder_layers=3, decoder_layers=3, encoder_attention_heads=4,
                     decoder_attention_heads=4, encoder_ffn_dim=1024, decoder_ffn_dim=1024, dropout=0.4),
    # narrower and deeper, a third of the parameters, as Wu et al. (2021) report ahead of wider ones on
    # Multi30k; in our hour its steps ran 1.7x as fast and it scored 0.2 BLEU below "multi30k"
    # (docs/translation.md)
    "multi30k-small": dict(d_model=128, encoder_layers=4, decoder_layers=4, encoder_attention_heads=4,
                           decoder_attention_heads=4, encoder_ffn_dim=256, decoder_ffn_dim=256, dropout=0.3),
    "base": dict(d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8,
                 decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048),
    "big": dict(d_model=1024, encoder_layers=6, decoder_layers=6, encoder_attention_heads=16,
                decoder_attention_heads=16, encoder_ffn_dim=4096, decoder_ffn_dim=4096, dropout=0.3),
}

ACTIVATIONS = ("relu", "gelu", "swish", "silu")


@dataclass
class MarianConfig(HFConfig):
    """An encoder-decoder Transformer as in "Attention Is All You Need": post-LayerNorm blocks,
    sinusoidal positions (Marian's layout: the sines in the first half of the width, the cosines in
    the second), embeddings scaled by sqrt(d_model), one vocabulary shared by source, target and
    output (`share_encoder_decoder_embeddings`, `tie_word_embeddings`), ReLU feed-forward.

    `tie_word_embeddings` false gives the output its own matrix (HF's `lm_head`).
    `normalize_before` (ours, not HF's) builds the pre-LayerNorm order instead, with a LayerNorm
    after the last block of each stack; `transformers` has no Marian in that order, so such a model
    is saved in the same layout but does not load there. Defaults are the paper's base model with
    the Marian conventions for the special ids: the pad id is the last id and starts every
    decoding (`decoder_start_token_id`), the end-of-sentence id is 0.
    """

    vocab_size: int = 8000
    decoder_vocab_size: int | None = None
    max_position_embeddings: int = 512
    d_model: int = 512
    encoder_layers: int = 6
    decoder_layers: int = 6
    encoder_attention_heads: int = 8
    decoder_attention_heads: int = 8
    encoder_ffn_dim: int = 2048
    decoder_ffn_dim: int = 2048
    activation_function: str = "relu"
    dropout: float = 0.1
    attention_dropout: float = 0.1
    activation_dropout: float = 0.0
    init_std: float = 0.02
    scale_embedding: bool = True
    normalize_before: bool = False
    share_encoder_decoder_embeddings: bool = True
    tie_word_embeddings: bool = True
    pad_token_id: int | None = None  # None: the last id
    eos_token_id: int = 0
    decoder_start_token_id: int | None = None  # None: the pad id
    forced_eos_token_id: int | None = None
    model_type: str = "marian"
    architectures: list[str] = field(default_factory=lambda: ["MarianMTModel"])

    # Keys HF's MarianConfig writes that do not change the maths of a model we build.
    IGNORED_KEYS = frozenset({"encoder_layerdrop", "decoder_layerdrop", "num_hidden_layers", "classifier_dropout",
                              "classif_dropout", "max_length", "num_beams", "bad_words_ids", "static_position_embeddings",
                              "add_bias_logits", "add_final_layer_norm", "normalize_embedding", "extra_pos_embeddings",
                              "architectures_", "bos_token_id", "model_name",
                              "_num_labels"})  # published OPUS-MT configs have it (of id2label)

    def __post_init__(self) -> None:
        self._check_ranges(counts=("vocab_size", "max_position_embeddings", "d_model", "encoder_layers",
                                   "decoder_layers", "encoder_attention_heads", "decoder_attention_heads",
                                   "encoder_ffn_dim", "decoder_ffn_dim"),
                           probabilities=("dropout", "attention_dropout", "activation_dropout"),
                           positives=("init_std",))
        _check(self.model_type == "marian", "model_type", "'marian'", self.model_type)
        _check(self.activation_function in ACTIVATIONS, "activation_function", f"one of {', '.join(ACTIVATIONS)}",
               self.activation_function)
        for name in ("encoder_attention_heads", "decoder_attention_heads"):
            _check(self.d_model % getattr(self, name) == 0, name, f"a divisor of d_model={self.d_model}",
                   getattr(self, name))
        if self.decoder_vocab_size is None:
            self.decoder_vocab_size = self.vocab_size
        _check(self.decoder_vocab_size == self.vocab_size and self.share_encoder_decoder_embeddings, "decoder_vocab_size",
               "the vocab_size with shared embeddings (bertforge builds one joint vocabulary)", self.decoder_vocab_size)
        self._check_translation_ids()
        self._check_heads()

    # The names code shared by every family reads.
    @property
    def hidden_size(self) -> int:
        return self.d_model

    @property
    def num_hidden_layers(self) -> int:
        return self.encoder_layers

    @property
    def num_attention_heads(self) -> int:
        return self.encoder_attention_heads

    def hf_dict(self) -> dict:
        data = self.to_dict()
        data.pop("normalize_before") if not self.normalize_before else None
        return {**data, "is_encoder_decoder": True}


def translation_config(preset: str, vocab_size: int, pad_id: int, eos_id: int, **overrides) -> MarianConfig:
    """The config of a new model of size `preset` over a vocabulary of `vocab_size` with its special ids."""
    return MarianConfig(**{**PRESETS[preset], "vocab_size": vocab_size, "pad_token_id": pad_id, "eos_token_id": eos_id,
                           **overrides})
