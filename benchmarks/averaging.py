"""How many checkpoints to average: for each N, the mean of a translation run's newest N checkpoints,
scored with beam 5 on all of Multi30k's validation set (where a window should be chosen) and on
test_2016_flickr (sacreBLEU cased, lowercased BLEU, chrF), in fp32, as `benchmarks/translation.py
quality` scores its model.

    python benchmarks/averaging.py --run runs/mt-avg/ours --counts 1 5 10 20 30 --out runs/mt-avg-windows

The run must have kept its checkpoints: `benchmarks/translation.py quality --average N --save-every S`
keeps N of them, S steps apart (`train-translation` itself averages only those of its last quarter).
Writes OUT/averaging.json and .md, headed by where they came from. Needs the shared data
(../shared/data/multi30k) and `sacrebleu`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from harness import DATA, provenance, save_table
from translation import TEST, multi30k, pair_arg


def step_of(directory: str) -> int:
    from bertforge.training.checkpoints import CHECKPOINT

    return int(CHECKPOINT.match(os.path.basename(directory)).group(1))


def running_means(states, counts):
    """(n, the mean of the first n state dicts) for each n of `counts`, in one pass, summed in float64."""
    total = None
    for n, state in enumerate(states, 1):
        total = {k: v.double() + (0 if total is None else total[k]) for k, v in state.items()}
        if n in counts:
            yield n, {k: (v / n).to(state[k].dtype) for k, v in total.items()}


def windows(run: str, counts: list[int], pair: tuple[str, str]) -> list[dict]:
    """One row per count (those the run has checkpoints for): the steps it spans and its scores."""
    import torch
    from bertforge.load import load
    from bertforge.scoring import corpus_scores
    from bertforge.training.checkpoints import all_checkpoints
    from bertforge.translate import DecodeOptions, translate

    newest_first = all_checkpoints(run)[::-1]
    if not newest_first:
        sys.exit(f"{run}: no checkpoints (step-N folders) to average")
    loaded = load(newest_first[0])
    model, tokenizer = loaded.model, loaded.tokenizer
    sets = {"valid": multi30k("val", pair), "test": multi30k(TEST, pair)}
    rows = []
    for n, mean in running_means((load(d).model.state_dict() for d in newest_first), counts):
        with torch.no_grad():
            model.load_state_dict(mean)
        row = {"count": n, "steps": [step_of(newest_first[n - 1]), step_of(newest_first[0])]}
        for name, pairs in sets.items():
            hyps = translate(model, tokenizer, [s for s, _ in pairs], DecodeOptions(beam=5))
            scores = corpus_scores(hyps, [t for _, t in pairs])
            row[name] = {"sentences": len(pairs), **{k: v for k, v in scores.items() if k != "signatures"}}
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def markdown(rows: list[dict], run: str) -> str:
    lines = [f"Run: {run}; beam 5, fp32; validation: all {rows[0]['valid']['sentences']:,} sentences; test: "
             f"{TEST}, {rows[0]['test']['sentences']:,}.", "",
             "| checkpoints averaged | steps | valid BLEU | valid lowercased | test BLEU | test lowercased | test chrF |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        v, t = r["valid"], r["test"]
        lines.append(f"| {r['count']} | {r['steps'][0]:,}-{r['steps'][1]:,} | {v['bleu']:.2f} | {v['bleu_lc']:.2f} | "
                     f"{t['bleu']:.2f} | {t['bleu_lc']:.2f} | {t['chrf']:.2f} |")
    best = max(rows, key=lambda r: r["valid"]["bleu"])
    lines += ["", f"Chosen on validation BLEU: {best['count']} (test lowercased {best['test']['bleu_lc']:.2f})."]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", required=True, help="the run's folder (its step-N checkpoints)")
    parser.add_argument("--counts", type=int, nargs="+", default=[1, 5, 10, 20], help="checkpoints averaged")
    parser.add_argument("--pair", type=pair_arg, default=("en", "de"), help="SRC-TGT (default en-de)")
    parser.add_argument("--out", default="runs/mt-windows")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if not os.path.isdir(os.path.join(DATA, "multi30k")):
        sys.exit(f"Multi30k not found at {os.path.join(DATA, 'multi30k')}")
    started = time.perf_counter()
    rows = windows(args.run, sorted(set(args.counts)), args.pair)
    if not rows:
        sys.exit(f"{args.run}: fewer checkpoints than the smallest of --counts")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "averaging.json"), "w", encoding="utf-8") as f:
        json.dump({"run": args.run, "rows": rows, "provenance": provenance(sys.argv)}, f, indent=2)
    save_table(os.path.join(args.out, "averaging.md"), markdown(rows, args.run))
    print(f"{(time.perf_counter() - started) / 60:.1f} min; saved {args.out}/averaging.json and .md")


if __name__ == "__main__":
    sys.exit(main())
