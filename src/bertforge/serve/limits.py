"""What one request may cost the service, and the check of a request's cost against it.

Counting requests is not enough: one small body can ask for a great deal (a text of [MASK]s with
`top_k` 50 answers every candidate with the whole sentence; attention grows with the square of the
length; a translation with a beam of k decodes k hypotheses). So each request's cost is estimated
before any work, from its tokens: the tokens the model will read (every text, every choice with its
context, every window of a long QA context, every token a translation's hypotheses may decode) and
the size of the answer it will get. A request over either limit gets a 413 that says which limit, by
how much, and the `bertforge serve` flag that changes it.

Clients that stall are bounded in time: the head of a request must arrive within `read_seconds` of
connecting (or of the previous answer), its body within `read_seconds` of its head, and an idle
kept-alive connection is closed after `keep_alive_seconds`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    body_bytes: int = 1_000_000  # bytes of one request body
    texts: int = 64  # texts (or examples) in one request (--max-texts)
    chars: int = 20_000  # characters of one text; tokens beyond the model's positions are cut and said so
    top_k: int = 50  # fill-mask candidates per [MASK]
    choices: int = 16  # choices of one multiple-choice example (--max-choices)
    beam: int = 8  # beam width of one translate request (--max-beam); its cost grows with it
    tokens: int = 32_768  # tokens the model reads for one request: 64 texts of 512 (--max-tokens)
    answer_bytes: int = 16_000_000  # estimated size of one answer (--max-answer-mb)
    read_seconds: float = 10.0  # to send a request's head, and then its body (--read-timeout)
    keep_alive_seconds: float = 5.0  # an idle connection between requests (--keep-alive)

    def as_dict(self) -> dict:
        """What `/info` shows, in the units of the flags."""
        return {"max_body_bytes": self.body_bytes, "max_texts": self.texts, "max_chars": self.chars,
                "max_top_k": self.top_k, "max_choices": self.choices, "max_beam": self.beam, "max_tokens": self.tokens,
                "max_answer_mb": self.answer_bytes / 1e6, "read_timeout_s": self.read_seconds,
                "keep_alive_s": self.keep_alive_seconds}


@dataclass(frozen=True)
class Cost:
    """What a request asks of the model: tokens read, and the estimated bytes of its answer."""
    tokens: int
    answer_bytes: int


class OverLimit(Exception):
    """A request that costs more than a limit allows; `str` is the one line its client reads."""

    def __init__(self, message: str, limit: str, requested: float, allowed: float):
        super().__init__(message)
        self.limit, self.requested, self.allowed = limit, requested, allowed


def check_cost(cost: Cost, limits: Limits, smaller: str = "fewer or shorter texts") -> None:
    """Nothing when `cost` is within `limits`; else `OverLimit` naming the first limit passed.
    `smaller`: what the client can send instead, in the message."""
    if cost.tokens > limits.tokens:
        raise OverLimit(f"the request has the model read {cost.tokens:,} tokens, {cost.tokens - limits.tokens:,} "
                        f"over the limit of {limits.tokens:,} (bertforge serve --max-tokens); send {smaller}",
                        "max_tokens", cost.tokens, limits.tokens)
    if cost.answer_bytes > limits.answer_bytes:
        size, allowed = cost.answer_bytes / 1e6, limits.answer_bytes / 1e6
        raise OverLimit(f"the answer would be about {_figure(size)} MB, {_figure(size / allowed)} times the limit "
                        f"of {allowed:g} MB (bertforge serve --max-answer-mb); send {smaller}",
                        "max_answer_mb", float(_figure(size).replace(",", "")), allowed)


def _figure(x: float) -> str:
    """Three significant figures, never in exponent form: 0.0324, 8.63, 138, 20,480."""
    return f"{x:,.0f}" if x >= 100 else f"{float(f'{x:.3g}'):g}"
