"""`bertforge evaluate-lm`: masked-token and next-sentence accuracy, or perplexity, on held-out text."""

from __future__ import annotations

import json

from .common import HelpFormatter, add_path


def add_command(commands) -> None:
    lm = commands.add_parser("evaluate-lm", help="masked-token and next-sentence accuracy (masked LMs) or "
                             "perplexity (GPT-1, AWD-LSTM, ELMo) on held-out text, beside what word counts alone "
                             "score", formatter_class=HelpFormatter)
    add_path(lm, "--model", "a pretraining checkpoint (with its language-model head)")
    lm.add_argument("files", nargs="+", help="text files, folders or globs the model has not seen")
    lm.add_argument("--max-seq-length", type=int, default=128, help="tokens per instance (at most the model's); a recurrent model's words per chunk")
    lm.add_argument("--batch-size", type=int, default=32, help="instances per batch; a recurrent model's parallel streams")
    lm.add_argument("--max-batches", type=int, default=100, help="batches read at most")
    lm.add_argument("--seed", type=int, default=0, help="seed of the instances and masks")
    lm.add_argument("--layout", choices=["auto", "lines", "prose"], default="auto",
                    help="lines: one sentence per line, blank line between documents; prose: paragraphs")
    lm.add_argument("--text-field", default="text", help="field holding the text in .jsonl files")
    lm.add_argument("--cache-dir", help="where shards are cached (default: $BERTFORGE_CACHE or ~/.cache/bertforge)")
    lm.add_argument("--json", action="store_true", help="print the scores as one JSON object")
    lm.set_defaults(func=run)


def run(args) -> None:
    from ..evaluate_lm import evaluate_lm, report

    result = evaluate_lm(args.model, args.files, max_seq_length=args.max_seq_length, batch_size=args.batch_size,
                         max_batches=args.max_batches, seed=args.seed, layout=args.layout,
                         text_field=args.text_field, cache_dir=args.cache_dir)
    print(json.dumps(result) if args.json else report(result))
