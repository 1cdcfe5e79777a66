"""`bertforge fill-mask`: the tokens a model puts where [MASK] stands."""

from __future__ import annotations

import json

from .common import add_device, add_path, resolve_device


def add_command(commands) -> None:
    fill = commands.add_parser("fill-mask", help="predict the tokens hidden by [MASK]")
    add_path(fill, "--model", "a checkpoint with a masked-LM head")
    fill.add_argument("text", help='text with one or more [MASK], e.g. "the [MASK] sat on the mat"')
    fill.add_argument("--top-k", type=int, default=5, help="candidates shown per [MASK]")
    fill.add_argument("--json", action="store_true", help="print one JSON list per text: for each [MASK], records "
                      "{score, token, token_str, sequence} as transformers' pipeline('fill-mask')")
    add_device(fill)
    fill.set_defaults(func=run)


def run(args) -> None:
    from ..fill_mask import FillMask

    fill = FillMask(args.model, resolve_device(args.device))
    masks = fill.fill([args.text], args.top_k)[0]
    if args.json:  # pipeline("fill-mask")'s records: score, token, token_str, sequence
        print(json.dumps(masks, ensure_ascii=False))
        return
    for number, candidates in enumerate(masks, start=1):
        print(f"[MASK] {number}: " + "  ".join(f"{c['token_str']} ({c['score']:.3g})" for c in candidates))
