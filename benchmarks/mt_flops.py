"""Model FLOPs of an encoder-decoder Transformer (a MarianMT config.json's sizes): the work a training
step or a decoding needs, whoever does it, so that each implementation's speed can be said as a share
of the machine's matrix-product peak (benchmarks/translation.py speed).

The matrix products only, 2 FLOPs per multiply-add, at real tokens (padding is an implementation's
waste, not the model's work): per layer the four attention projections (the decoder's cross-attention
projects the encoder's states to keys and values once per source token), the feed-forward pair, and
attention's two products over the positions attended to; the tied output layer at every target token.
A training step is its forward x 3 (forward, then backward's two products per forward one), with
attention counted over the whole sentence, causal or not (as benchmarks/speed.py counts BERT and
GPT-1). A decoding step attends to the positions decoded so far, and beam search runs `beam` rows a
step for as many steps as the chosen translation has pieces, its `</s>` included: a floor of the work,
as other hypotheses may run longer.
"""

from __future__ import annotations

from harness import encoder_flops


def _sizes(config: dict) -> tuple[int, int, int, int, int, int]:
    return (config["d_model"], config["encoder_ffn_dim"], config["decoder_ffn_dim"], config["encoder_layers"],
            config["decoder_layers"], config["vocab_size"])


def source_flops(config: dict, source: int) -> float:
    """Forward FLOPs of the encoder over one sentence of `source` tokens (a BERT encoder's layers:
    harness.encoder_flops), and of the decoder's cross-attention keys and values of its states."""
    d, f_enc, _, n_enc, n_dec, _ = _sizes(config)
    layers = {"hidden_size": d, "intermediate_size": f_enc, "num_hidden_layers": n_enc}
    return encoder_flops(layers, [source]) + n_dec * source * 2 * 2 * d * d


def decoder_token_flops(config: dict, source: int, attended: int) -> float:
    """Forward FLOPs of one target token through the decoder and the output layer, attending to
    `attended` target positions and `source` source positions."""
    d, _, f_dec, _, n_dec, vocab = _sizes(config)
    per_layer = 2 * (6 * d * d + 2 * d * f_dec) + 2 * 2 * (attended + source) * d
    return n_dec * per_layer + 2 * d * vocab


def training_flops(config: dict, lengths: list[tuple[int, int]]) -> float:
    """FLOPs of a training step on sentence pairs of (source, target) lengths in tokens."""
    forward = sum(source_flops(config, s) + t * decoder_token_flops(config, s, t) for s, t in lengths)
    return 3 * forward


def decoding_flops(config: dict, lengths: list[tuple[int, int]], beam: int) -> float:
    """FLOPs of translating sentences of (source tokens, translation pieces with `</s>`) lengths,
    `beam` rows a step but the first, which reads one row a sentence (its hypotheses are alike until
    then: ours and CTranslate2 decode it so; `generate` gives it `beam` rows all the same)."""
    return sum(source_flops(config, s) + decoder_token_flops(config, s, 1)
               + beam * sum(decoder_token_flops(config, s, step) for step in range(2, t + 1))
               for s, t in lengths)
