"""GPT's positions at a small budget: `bertforge pretrain --objective gpt` with each kind of
positions for the same minutes on five public-domain novels, then the perplexity of an unseen novel
beside a unigram model fitted to that very novel (`bertforge evaluate-lm`).

    python benchmarks/gpt_positions.py --minutes 3 --out runs/gpt-positions

Everything else is the command's default (bert-tiny for this budget, GPT-2's layer order, the
small-budget recipe's rate for the positions). Run it alone: it times nothing, but a contended
machine takes fewer steps in the same minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from harness import DATA

NOVELS = ["1184-0.txt", "135-0.txt", "158-0.txt", "2554-0.txt", "2701-0.txt"]  # Monte Cristo ... Moby Dick
UNSEEN = "98-0.txt"  # A Tale of Two Cities


def run(positions: str, minutes: float, out: str, lr: float | None = None) -> dict:
    from bertforge.evaluate_lm import evaluate_lm
    from bertforge import pretrain

    corpus = [os.path.join(DATA, "corpus", "gutenberg", name) for name in NOVELS]
    run_dir = os.path.join(out, positions)
    result = pretrain(corpus, run_dir, objective="gpt", positions=positions, max_minutes=minutes,
                      cache_dir=os.path.join(out, "cache"), quiet=True, lr=lr)
    scores = evaluate_lm(os.path.join(run_dir, "model"), [os.path.join(DATA, "corpus", "gutenberg", UNSEEN)],
                         cache_dir=os.path.join(out, "cache"))
    return {"positions": positions, "lr": lr, "steps": result["step"], "perplexity": scores["perplexity"],
            "unigram_perplexity": scores["unigram_perplexity"],
            "gain": scores["unigram_perplexity"] / scores["perplexity"]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--out", default="runs/gpt-positions")
    parser.add_argument("--positions", nargs="+", default=["absolute", "rotary"])
    parser.add_argument("--rotary-lr", type=float, help="peak rate of the rotary runs (default: the recipe's)")
    args = parser.parse_args(argv)
    rows = [run(p, args.minutes, args.out, args.rotary_lr if p == "rotary" else None) for p in args.positions]
    print(f"| positions | peak lr | steps in {args.minutes:g} min | unseen-novel perplexity | unigram (fitted to it) | "
          "gain |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['positions']} | {r['lr'] or 'recipe'} | {r['steps']} | {r['perplexity']:.1f} | "
              f"{r['unigram_perplexity']:.1f} | {r['gain']:.2f}x |")
    with open(os.path.join(args.out, "results.json"), "w", encoding="utf-8") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
