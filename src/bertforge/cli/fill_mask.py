"""`bertforge fill-mask`: the tokens a model puts where [MASK] stands."""

from __future__ import annotations

import json

from .common import add_device, add_path, resolve_device


def add_command(commands) -> None:
    fill = commands.add_parser("fill-mask", help="predict the tokens hidden by [MASK]")
    add_path(fill, "--model", "a checkpoint with a masked-LM head")
    fill.add_argument("text", nargs="?",
                      help='text with one or more [MASK], e.g. "the [MASK] sat on the mat" (default: the texts of '
                           '--input)')
    fill.add_argument("--input", help="a text file, one text with [MASK] per line (default, without a text: "
                      "standard input)")
    fill.add_argument("--top-k", type=int, default=5, help="candidates shown per [MASK]")
    fill.add_argument("--json", action="store_true", help="print one JSON list per text: for each [MASK], records "
                      "{score, token, token_str, sequence} as transformers' pipeline('fill-mask')")
    add_device(fill)
    fill.set_defaults(func=run)


def run(args) -> None:
    from ..fill_mask import FillMask, read_masked

    texts = [(None, args.text)] if args.text is not None else []
    if args.input is not None or args.text is None:
        texts += read_masked(args.input)  # checked for [MASK] before the model is read
    fill = FillMask(args.model, resolve_device(args.device))
    answers = fill.fill([text for _, text in texts], args.top_k, where=[where for where, _ in texts])
    for number, ((_, text), masks) in enumerate(zip(texts, answers)):
        if args.json:  # pipeline("fill-mask")'s records: score, token, token_str, sequence
            print(json.dumps(masks, ensure_ascii=False))
            continue
        if len(texts) > 1:  # which text each block answers
            print(("\n" if number else "") + text)
        for mask, candidates in enumerate(masks, start=1):
            print(f"[MASK] {mask}: " + "  ".join(f"{c['token_str']} ({c['score']:.3g})" for c in candidates))
