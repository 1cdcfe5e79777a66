"""What one request may cost the service, and the check of a request's cost against it.

Counting requests is not enough: one small body can ask for a great deal (a text of [MASK]s with
`top_k` 50 answers every candidate with the whole sentence; attention grows with the square of the
length; a translation with a beam of k decodes k hypotheses). So each request's cost is estimated
before any work, from its tokens: the tokens the model will read (every text, every choice with its
context, every window of a long QA context, every token a translation's hypotheses may decode) and
the size of the answer it will get. A request over either limit gets a 413 that says which limit, by
how much, and the `bertforge serve` flag that changes it.

Tokens are not time: the same tokens cost a large model a hundred times what they cost a tiny one.
So each request is also bounded in seconds (`seconds`, --max-request-seconds): before any work, its
tokens times the model's pace (`Pace`: seconds per token of its recent calls, and for a translation
model of a call made at start-up) must fit the limit, or it gets a 413 saying the estimate; and a
request not answered within the limit (or whose client leaves) is given up, and the model call
stops once no request waits for it (a translation between two decoding steps).

Clients that stall are bounded in time: the head of a request must arrive within `read_seconds` of
connecting (or of the previous answer), its body within `read_seconds` of its head, a client whose
answer waits for it must read some of it every `read_seconds` (`server.closing_stalled`), and an
idle kept-alive connection is closed after `keep_alive_seconds`.
"""

from __future__ import annotations

import threading
from collections import deque
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
    read_seconds: float = 10.0  # to send a request's head, then its body; to read some of an answer (--read-timeout)
    keep_alive_seconds: float = 5.0  # an idle connection between requests (--keep-alive)
    seconds: float = 30.0  # the model's work for one request, from when it is accepted (--max-request-seconds)

    def as_dict(self) -> dict:
        """What `/info` shows, in the units of the flags."""
        return {"max_body_bytes": self.body_bytes, "max_texts": self.texts, "max_chars": self.chars,
                "max_top_k": self.top_k, "max_choices": self.choices, "max_beam": self.beam, "max_tokens": self.tokens,
                "max_answer_mb": self.answer_bytes / 1e6, "read_timeout_s": self.read_seconds,
                "keep_alive_s": self.keep_alive_seconds, "max_request_seconds": self.seconds}


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


class Pace:
    """How fast the model works: seconds per token of cost (`Cost.tokens`, the same estimate the
    limits use) over its last `window` calls, weighted by their tokens, so that large calls count
    most. Unknown (None) until a call is measured. Written from the model's thread, read from the
    event loop's."""

    def __init__(self, window: int = 16):
        self.calls: deque[tuple[int, float]] = deque(maxlen=window)
        self.lock = threading.Lock()

    def observe(self, tokens: int, seconds: float) -> None:
        if tokens > 0 and seconds >= 0:
            with self.lock:
                self.calls.append((tokens, seconds))

    @property
    def seconds_per_token(self) -> float | None:
        with self.lock:
            tokens = sum(t for t, _ in self.calls)
            return sum(s for _, s in self.calls) / tokens if tokens else None

    def as_dict(self) -> dict:
        """What `/info` shows: the pace, in milliseconds per token, and the calls it comes of."""
        pace = self.seconds_per_token
        return {"ms_per_token": None if pace is None else float(_figure(pace * 1000).replace(",", "")),
                "calls": len(self.calls)}


def check_time(cost: Cost, pace: Pace, limits: Limits, smaller: str = "fewer or shorter texts") -> None:
    """Nothing when `cost` at `pace` fits `limits.seconds` (or the pace is not known yet); else
    `OverLimit` with the estimate."""
    per_token = pace.seconds_per_token
    if per_token is None:
        return
    seconds = cost.tokens * per_token
    if seconds > limits.seconds:
        raise OverLimit(f"the request would take about {_figure(seconds)} s ({cost.tokens:,} tokens at the model's "
                        f"recent pace of {_figure(per_token * 1000)} ms a token), over the limit of "
                        f"{limits.seconds:g} s (bertforge serve --max-request-seconds); send {smaller}",
                        "max_request_seconds", float(_figure(seconds).replace(",", "")), limits.seconds)


def _figure(x: float) -> str:
    """Three significant figures, never in exponent form: 0.0324, 8.63, 138, 20,480."""
    return f"{x:,.0f}" if x >= 100 else f"{float(f'{x:.3g}'):g}"
