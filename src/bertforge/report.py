"""What a long command says before its work starts: the header of `evaluate`, `predict`, `embed`
and `tokenizer train` (`fill-mask` prints none), in the training header's style (`training.trainer.
header`): the model and its size, where and in what precision, the input, where the output goes.

Headers go to standard error, always: standard output carries the commands' data (JSON, predictions,
vectors), which stays machine-readable. They are printed once the input has been read and checked,
so that bad input still ends as one error line and nothing before it.
"""

from __future__ import annotations

import sys


def model_line(model, members: int = 1) -> str:
    """`model: bert, 2 layers x 128, 4.4M parameters; vocabulary 1,000` for a model (a task model,
    an encoder or a biLM: whatever has a `config`, itself or in its `backbone`); an ensemble says how many."""
    config = getattr(getattr(model, "backbone", model), "config", None) or model.config
    from .quantize import Int8Linear

    parameters = sum(p.numel() for p in model.parameters()) + sum(  # int8 weights are packed, not parameters
        m.in_features * m.out_features + m.out_features for m in model.modules() if isinstance(m, Int8Linear))
    vocabulary = getattr(config, "vocab_size", None)
    size = f"{parameters / 1e6:.1f}M" if parameters >= 100_000 else f"{parameters:,}"
    line = (f"{config.model_type}, {config.num_hidden_layers} layers x {config.hidden_size}, {size} parameters"
            + (f"; vocabulary {vocabulary:,}" if vocabulary else ""))
    return f"model: {members} models of one task, the first {line}" if members > 1 else f"model: {line}"


def header(model=None, device=None, precision: str | None = None, data: str | None = None,
           output: str | None = None, members: int = 1, extra: tuple[str, ...] = ()) -> str:
    """A few lines: `model: ...`, `on cpu in fp32`, `data: ...`, the `extra` lines, `output: ...`
    (each when given)."""
    lines = [model_line(model, members)] if model is not None else []
    if device is not None:
        lines.append(f"on {device}" + (f" in {precision}" if precision else ""))
    lines += [*([f"data: {data}"] if data else []), *extra, *([f"output: {output}"] if output else [])]
    return "\n".join(lines)


def say(message: str, enabled: bool = True) -> None:
    """Print `message` to standard error (never standard output, which carries data)."""
    if enabled:
        print(message, file=sys.stderr, flush=True)
