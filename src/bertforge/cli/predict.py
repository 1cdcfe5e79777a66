"""`bertforge predict`: predictions of a fine-tuned model."""

from __future__ import annotations

import sys

from .common import INFERENCE_PRECISION, add_device, resolve_device


def add_command(commands) -> None:
    pr = commands.add_parser("predict", help="predict with a fine-tuned model (the task is read from its config)")
    pr.add_argument("--model", required=True, nargs="+",
                    help="a model written by `bertforge finetune`; several classifiers of one task predict as "
                    "their ensemble (the mean of their probabilities)")
    pr.add_argument("--input", help="a file in the task's layout; for a model of single texts (classification, "
                    "regression, tagging) also plain text, one text per line: any file but .tsv/.csv/.jsonl/.json "
                    "whose first line is not a header naming the text column (tagging: that is not CoNLL "
                    "columns) (default: standard input, one text per line)")
    pr.add_argument("--output", help="output file: .jsonl, .conll (tagging) or .json (QA) (default: standard output)")
    pr.add_argument("--batch-size", type=int, default=64, help="examples per forward pass")
    pr.add_argument("--format", choices=["jsonl", "conll"],
                    help="jsonl, or conll: word, gold tag (if known), predicted tag per line (tagging models) "
                         "(default: from the --output suffix, .jsonl or .conll; jsonl on standard output)")
    pr.add_argument("--precision", **INFERENCE_PRECISION)
    add_device(pr)
    pr.set_defaults(func=run)


def run(args) -> None:
    from ..finetune import predict

    device = resolve_device(args.device, args.precision)
    n = predict(args.model, args.input, args.output, args.batch_size, args.format, device, args.precision,
                progress=True)  # a header and progress on standard error; predictions may go to standard output
    if args.output:
        print(f"wrote {n} predictions to {args.output}", file=sys.stderr)
