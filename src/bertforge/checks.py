"""One rule per numeric option, shared by the command line and the Python API.

`check(name, value)` raises a one-line `BertforgeError` when `value` breaks the rule of the option
called `name` (its CLI spelling in the message): not a number, not finite, not an integer where one
is needed, or outside its range. The CLI checks every option it parsed before any work starts; the
functions of the API check their own arguments with the same rules, and the service checks a request's
fields by them too (`problem`, in its own spelling of the name).
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
    why: str = ""  # the reason for a bound that is a choice rather than a definition, said in the error

    def describe(self) -> str:
        kind = "an integer" if self.integer else "a finite number"
        if self.low is not None and self.high is not None:
            text = f"{kind} in {'(' if self.above else '['}{self.low:,g}, {self.high:,g}{')' if self.below else ']'}"
        elif self.low is not None:
            text = f"{kind} {'>' if self.above else '>='} {self.low:g}"
        elif self.high is not None:
            text = f"{kind} {'<' if self.below else '<='} {self.high:,g}"
        else:
            text = kind
        return f"{text} ({self.why})" if self.why else text

    def holds(self, value) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if isinstance(value, float) and (self.integer or not math.isfinite(value)):
            return False  # (an int of any size compares exactly with the bounds: never made a float)
        if self.low is not None and (value <= self.low if self.above else value < self.low):
            return False
        return self.high is None or (value < self.high if self.below else value <= self.high)


def count(low: int, high: int | None = None, why: str = "") -> Rule:
    return Rule(low=low, high=high, integer=True, why=why)


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
    "read_timeout": POSITIVE, "keep_alive": POSITIVE, "max_request_seconds": POSITIVE,
    "opset": Rule(low=14, high=30, integer=True),
    # word vectors (each word holds four vectors of --dim numbers in memory: word, context, and their
    # AdaGrad sums; 200,000 dimensions would be 3 MB a word)
    "dim": count(1, 4096, why="published GloVe vectors have 50 to 300; each word holds four of them in memory"),
    "window": count(1), "min_count": count(1), "max_vocab": count(1), "x_max": POSITIVE, "alpha": POSITIVE,
    "subsample": RATE, "draws": count(1), "memory_mb": count(16),
    "remove_directions": count(0),
    # recurrent language models and generation (pretrain_recurrent and generate say the rest)
    "bptt": count(1), "dropout_scale": Rule(low=0, high=10, below=True), "sampled_softmax": count(0),
    "temperature": Rule(),
    # translation: training, and decoding (the command line's and the service's alike)
    "label_smoothing": RATE, "bleu_sentences": count(0), "average": count(1), "min_vector_coverage": PROBABILITY,
    "beam": count(1), "length_penalty": Rule(low=-10, high=10, why="the penalty is length ** alpha; beyond 10 one "
                                                                     "length wins whatever the scores"),
    "max_len_a": Rule(low=0, high=100, why="a translation 100 times its source is past any model's positions"),
    "max_len_b": count(1, 100_000, why="past any model's positions"),
}
# Where one name means different things in two commands.
COMMAND_RULES = {"fill-mask": {"top_k": count(1)}, "word-vectors": {"epochs": count(1)}}


def problem(name: str, value, rule: Rule | None = None) -> str | None:
    """What is wrong with `value` for option `name` ("must be ..., got ..."), or None if nothing is."""
    rule = rule or RULES[name]
    if value is None or rule.holds(value):
        return None
    shown = repr(value) if len(repr(value)) <= 40 else f"{repr(value)[:20]}... ({len(repr(value))} characters)"
    return f"must be {rule.describe()}, got {shown}"


def check(name: str, value, rule: Rule | None = None) -> None:
    """Raise a one-line error unless `value` follows the rule of option `name` (None is "not given")."""
    wrong = problem(name, value, rule)
    if wrong:
        raise BertforgeError(f"--{name.replace('_', '-')} {wrong}")


def check_options(options: dict, command: str | None = None) -> None:
    """Check every option in `options` (the CLI's parsed arguments) that has a rule."""
    special = COMMAND_RULES.get(command, {})
    for name, value in options.items():
        if name in special or name in RULES:
            check(name, value, special.get(name))


# Positions of a model's config: the longest published encoders read 8k to 128k tokens; a million is
# past any of them, and past what attention over one sequence can hold in memory.
MAX_POSITIONS = 1 << 20


def check_model_size(build, config, source: str, device="cpu") -> None:
    """Refuse, before a model is built, a `config` (read from `source`) whose model cannot be held:
    positions past `MAX_POSITIONS`, or weights and buffers of more bytes than `device` has free.
    `build(config)` is counted on torch's meta device (no memory); the error names the config's
    field behind the largest tensor."""
    import torch

    positions = getattr(config, "max_position_embeddings", None)
    if isinstance(positions, int) and positions > MAX_POSITIONS:
        raise BertforgeError(f"{source}: max_position_embeddings is {positions:,}, more than the {MAX_POSITIONS:,} "
                             "a model here may have (the longest published ones read 8k to 128k tokens)")
    try:
        with torch.device("meta"):
            model = build(config)
    except Exception:  # a builder the meta device cannot run: its own allocation says what fails
        return
    tensors = dict(model.named_parameters())
    tensors.update(model.named_buffers())
    needed = sum(t.numel() * t.element_size() for t in tensors.values())
    free = free_memory(device)
    if free is None or needed <= free:
        return
    name, largest = max(tensors.items(), key=lambda item: item[1].numel())
    fields = [k for k, v in vars(config).items() if isinstance(v, int) and not isinstance(v, bool) and v > 1
              and v in largest.shape]
    raise BertforgeError(f"{source}: its model needs {needed / 2**30:,.1f} GiB, more than the {free / 2**30:,.1f} GiB "
                         f"free; its largest tensor {name} {tuple(largest.shape)} comes of "
                         f"{', '.join(f'{k} {getattr(config, k):,}' for k in fields) or 'its sizes'}")


def free_memory(device="cpu") -> int | None:
    """Bytes free for a model on `device`: the GPU's free memory, or the machine's available memory
    (Linux's MemAvailable); None where it cannot be read."""
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None
