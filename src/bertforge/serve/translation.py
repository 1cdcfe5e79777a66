"""What the service does with a translation model (a family whose record lists the "translate"
use): translate texts as `bertforge translate` does, say what a request costs before any work, and
look inside one translation: its encoder self-attention, decoder self-attention and
cross-attention, every layer and head.

The attention is of the greedy translation, read in one teacher-forced pass over (source,
translation): the decoder's input is the start token then the translation, so that query t is the
position that wrote the t-th token of the translation (and the last one wrote `</s>`); with the key
/value cache off, every probability is computed in full, and the pass's own choices are returned
beside it (`written`), the same tokens greedy search chose.
"""

from __future__ import annotations

import copy
import time

import torch

from ..load import Loaded
from ..translate import DecodeOptions, decode, decode_tokens, longest, pad, translate
from .limits import Cost, OverLimit

# Answer sizes in bytes of JSON: a probability (4 decimals) at most 7, a token string ~12 with its
# quotes, a translated token ~8 characters of text.
PROBABILITY, TOKEN, WORD = 7, 12, 8


class Translator:
    """One loaded translation model and its tokenizer, and what the service answers with them."""

    def __init__(self, loaded: Loaded):
        self.model, self.tokenizer, self.config = loaded.model.eval(), loaded.tokenizer, loaded.config
        self.parameters = sum(p.numel() for p in self.model.parameters())  # before int8 packs the weights away
        self.checker = copy.deepcopy(self.tokenizer)  # the cost estimates', used in their own thread
        self.positions = self.config.max_position_embeddings

    # ---- what a request costs ----------------------------------------------------------------

    def longest(self, source_length: int, options: DecodeOptions) -> int:
        """The most tokens a translation of `source_length` tokens may have: as `translate.decode`
        limits it (`max_len_a` x length + `max_len_b`, within the positions)."""
        return longest(source_length, options, self.positions)

    def source_lengths(self, texts: list[str]) -> list[int]:
        """Each text's tokens (with its `</s>`); a text longer than the model's positions cannot be
        translated (a cut sentence would be translated as if it ended there): a 413."""
        lengths = [len(ids) for ids in self.checker.encode_source_batch(texts)]
        for i, length in enumerate(lengths):
            if length > self.positions:
                name = "text" if len(texts) == 1 else f"texts[{i}]"
                raise OverLimit(f'"{name}" has {length:,} tokens, over the model\'s {self.positions:,} positions; '
                                "send shorter texts", "max_positions", length, self.positions)
        return lengths

    def translate_cost(self, texts: list[str], beam: int) -> Cost:
        """Tokens read: each source, and the most tokens each of its `beam` hypotheses may decode."""
        options = DecodeOptions(beam=beam)
        tokens = answer = 0
        for length in self.source_lengths(texts):  # bertforge translate's estimate, which bounds its batches
            tokens += decode_tokens(length, options, self.positions)
            answer += 4 + WORD * self.longest(length, options)
        return Cost(tokens, answer)

    def attention_cost(self, text: str) -> Cost:
        """Encoder layers x heads x S^2, decoder layers x heads x (T^2 + T x S), T at its longest."""
        (source,) = self.source_lengths([text])
        target = self.longest(source, DecodeOptions(beam=1)) + 1  # with the start token
        c = self.config
        probabilities = (c.encoder_layers * c.encoder_attention_heads * source ** 2
                         + c.decoder_layers * c.decoder_attention_heads * (target ** 2 + target * source))
        return Cost(source + 2 * target, PROBABILITY * probabilities + 3 * TOKEN * (source + target))

    # ---- translating -------------------------------------------------------------------------

    def translate(self, texts: list[str], beam: int, length_penalty: float, stop=None) -> list[str]:
        """`texts` translated, as `bertforge translate --beam B --length-penalty P` does; given up
        (`translate.Stopped`) at the decoding step after `stop` (a `threading.Event`) is set."""
        # no bound of translate's own: the request's cost was checked against the service's --max-tokens
        options = DecodeOptions(beam=beam, length_penalty=length_penalty, max_tokens=None)
        return translate(self.model, self.tokenizer, texts, options, stop=stop)

    def measure(self, beam: int, words: int = 32, clock=time.monotonic) -> tuple[int, float]:
        """The tokens (`translate_cost`'s) and seconds of translating one sentence of `words` words
        with `beam`: the model's pace before any request (the second of two runs: the first pays
        for torch's first calls)."""
        text = " ".join(["a"] * words)
        tokens = self.translate_cost([text], beam).tokens
        for _ in range(2):
            started = clock()
            self.translate([text], beam, 1.0)
            seconds = clock() - started
        return tokens, seconds

    def tokens(self, text: str) -> dict:
        """The pieces the encoder reads (ending in `</s>`), their ids and character offsets."""
        encoding = self.tokenizer.backend.encode(text)
        return {"tokens": encoding.tokens, "ids": encoding.ids, "segments": [0] * len(encoding.ids),
                "offsets": [list(o) for o in encoding.offsets], "truncated": False}

    @torch.no_grad()
    def attention(self, text: str) -> dict:
        """The greedy translation of `text` and the attention probabilities that made it, rounded
        to 4 decimals: `encoder` [layer][head][source][source], `decoder` [layer][head][target]
        [target] (causal: zero above the diagonal), `cross` [layer][head][target][source]; the
        token strings of the source, of the decoder's input (`target`: the start token, then the
        translation) and of what each target position wrote (`written`: the translation, then
        `</s>` when it ended)."""
        self.source_lengths([text])
        device = next(self.model.parameters()).device
        source, mask = pad([self.tokenizer.encode(text)], self.tokenizer.pad_id, device)
        (written,) = decode(self.model, source, mask, DecodeOptions(beam=1))
        target = torch.tensor([[self.config.decoder_start_token_id] + written], device=device)
        encoder = [[] for _ in self.model.encoder.layers]
        decoder = [{"self": [], "cross": []} for _ in self.model.decoder.layers]
        memory = self.model.encode(source, mask, weights=encoder)
        states = self.model.decode(target, memory, mask, weights=decoder)
        chosen = self.model.logits(states[0]).float()
        chosen[:, self.config.pad_token_id] = float("-inf")  # as decoding: the start token is never written
        token = self.tokenizer.backend.id_to_token
        return {"translation": self.tokenizer.decode(written),
                "source_tokens": [token(i) for i in source[0].tolist()],
                "target_tokens": [token(i) for i in target[0].tolist()],
                "written_tokens": [token(i) for i in chosen.argmax(-1).tolist()],
                "encoder": _rounded([layer[0] for layer in encoder]),
                "decoder": _rounded([layer["self"][0] for layer in decoder]),
                "cross": _rounded([layer["cross"][0] for layer in decoder])}

    def info(self) -> dict:
        """What `/info` says of the model beside its name."""
        c = self.config
        # (a translation family without the Transformer's layers and heads says what it has)
        sizes = {"layers": getattr(c, "encoder_layers", None), "decoder_layers": getattr(c, "decoder_layers", None),
                 "heads": getattr(c, "encoder_attention_heads", None),
                 "decoder_heads": getattr(c, "decoder_attention_heads", None)}
        return {"kind": "translation", **{k: v for k, v in sizes.items() if v is not None},
                "hidden_size": c.d_model, "vocab_size": c.vocab_size, "max_length": self.positions,
                "parameters": self.parameters}


def _rounded(layers: list[torch.Tensor]) -> list:
    """(B=1, H, Q, K) per layer -> [layer][head][query][key], 4 decimals (rounded in float64: a
    float32 rounded is no shorter in JSON)."""
    return torch.stack(layers)[:, 0].double().cpu().round(decimals=4).tolist()
