"""`bertforge evaluate`: score a fine-tuned model on a labelled file."""

from __future__ import annotations

import json
import sys

from .common import INFERENCE_PRECISION, add_device, resolve_device


def add_command(commands) -> None:
    ev = commands.add_parser("evaluate", help="score a fine-tuned model on a labelled file")
    ev.add_argument("--model", required=True, nargs="+",
                    help="a model written by `bertforge finetune`; several classifiers of one task (ULMFiT's "
                    "forward and backward models) are scored as their ensemble: the mean of their probabilities")
    ev.add_argument("--data", required=True, help="a labelled file in the task's layout")
    ev.add_argument("--batch-size", type=int, default=64, help="examples per forward pass")
    ev.add_argument("--precision", **INFERENCE_PRECISION)
    add_device(ev)
    ev.set_defaults(func=run)


def run(args) -> None:
    from ..finetune import evaluate
    from ..metrics import format_scores

    device = resolve_device(args.device, args.precision)
    result = evaluate(args.model, args.data, args.batch_size, device, args.precision, progress=True)
    print(json.dumps(result))  # fractions, for programs; for people, in percent on standard error:
    print(format_scores(result), file=sys.stderr)
