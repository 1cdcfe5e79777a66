"""One rule per numeric option, shared by the command line and the Python API.

`check(name, value)` raises a one-line `BertforgeError` when `value` breaks the rule of the option
called `name` (its CLI spelling in the message): not a number, not finite, not an integer where one
is needed, or outside its range. The CLI checks every option it parsed before any work starts; the
functions of the API check their own arguments with the same rules.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .errors import BertforgeError


@dataclass(frozen=True)
class Rule:
    low: float | None = None
    high: float | None = None
    above: bool = False  # the low bound is excluded
    below: bool = False  # the high bound is excluded
    integer: bool = False

    def describe(self) -> str:
        kind = "an integer" if self.integer else "a finite number"
        if self.low is not None and self.high is not None:
            return f"{kind} in {'(' if self.above else '['}{self.low:g}, {self.high:g}{')' if self.below else ']'}"
        if self.low is not None:
            return f"{kind} {'>' if self.above else '>='} {self.low:g}"
        if self.high is not None:
            return f"{kind} {'<' if self.below else '<='} {self.high:g}"
        return kind

    def holds(self, value) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if self.integer and not isinstance(value, int) or not math.isfinite(value):
            return False
        if self.low is not None and (value <= self.low if self.above else value < self.low):
            return False
        return self.high is None or (value < self.high if self.below else value <= self.high)


def count(low: int) -> Rule:
    return Rule(low=low, integer=True)


POSITIVE = Rule(low=0, above=True)
NON_NEGATIVE = Rule(low=0)
PROBABILITY = Rule(low=0, high=1)
RATE = Rule(low=0, high=1, below=True)  # dropout, beta2, a held-out share: 1 would leave nothing

RULES: dict[str, Rule] = {
    # budgets and sizes
    "steps": count(1), "max_minutes": POSITIVE, "minutes": POSITIVE, "epochs": POSITIVE,
    "batch_size": count(1), "accum": count(1), "max_seq_length": count(8), "max_length": count(3),
    "vocab_size": count(8), "min_frequency": count(0), "limit_alphabet": count(1), "max_batches": count(1),
    # optimisation
    "lr": POSITIVE, "warmup": NON_NEGATIVE, "weight_decay": NON_NEGATIVE, "clip": NON_NEGATIVE,
    "beta1": RATE, "beta2": RATE, "eps": POSITIVE, "dropout": RATE, "classifier_dropout": RATE,
    "layer_lr_decay": Rule(low=0, high=1, above=True), "unfreeze_every": count(1), "patience": count(1),
    "lm_weight": NON_NEGATIVE, "generator_fraction": Rule(low=0, high=1, above=True),
    # data and masking
    "short_seq_prob": PROBABILITY, "eval_fraction": RATE, "mask_prob": Rule(low=0, high=1, above=True, below=True),
    "replace_prob": PROBABILITY, "random_prob": PROBABILITY,
    # logging and checkpoints
    "log_every": count(1), "eval_every": count(0), "eval_batches": count(1), "save_every": count(0),
    "keep": count(1), "seed": Rule(low=0, high=2**32 - 1, integer=True),
    # question answering
    "doc_stride": count(1), "max_query_length": count(1), "max_answer_length": count(1), "n_best": count(1),
    "null_threshold": Rule(),
    # tagging columns count from either end
    "word_column": Rule(integer=True), "tag_column": Rule(integer=True),
    # generation and fill-mask (the temperature matters only when sampling: generate checks it)
    "max_new_tokens": count(1), "top_k": count(0), "top_p": Rule(low=0, high=1, above=True),
    "max_train_samples": count(1), "max_eval_samples": count(1),
    # serve and export
    "port": Rule(low=1, high=65535, integer=True), "max_batch": count(1), "max_wait_ms": NON_NEGATIVE,
    "max_texts": count(1), "max_tokens": count(1), "batch_tokens": count(1), "max_choices": count(2), "max_beam": count(1),
    "max_answer_mb": POSITIVE,
    "read_timeout": POSITIVE, "keep_alive": POSITIVE,
    "opset": Rule(low=14, high=30, integer=True),
    # word vectors
    "dim": count(1), "window": count(1), "min_count": count(1), "max_vocab": count(1), "x_max": POSITIVE,
    "alpha": POSITIVE, "memory_mb": count(16),
}
# Where one name means different things in two commands.
COMMAND_RULES = {"fill-mask": {"top_k": count(1)}, "word-vectors": {"epochs": count(1)}}


def check(name: str, value, rule: Rule | None = None) -> None:
    """Raise a one-line error unless `value` follows the rule of option `name` (None is "not given")."""
    if value is None:
        return
    rule = rule or RULES[name]
    if not rule.holds(value):
        raise BertforgeError(f"--{name.replace('_', '-')} must be {rule.describe()}, got {value!r}")


def check_options(options: dict, command: str | None = None) -> None:
    """Check every option in `options` (the CLI's parsed arguments) that has a rule."""
    special = COMMAND_RULES.get(command, {})
    for name, value in options.items():
        if name in special or name in RULES:
            check(name, value, special.get(name))
