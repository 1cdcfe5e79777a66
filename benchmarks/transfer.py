"""Does pretraining transfer? bert-mini pretrained on the Gutenberg corpus with `bertforge
pretrain`'s defaults, then fine-tuned on the full SST-2 and CoNLL-2003 training sets, against the
same encoder randomly initialised; each side at its best over a small learning-rate sweep, each
setting with two seeds (the mean of the seeds is what is compared).

    python benchmarks/transfer.py [--minutes 30] [--lrs 1e-4 3e-4] [--seeds 0 1] [--out runs/bench-transfer]

Needs ../shared/data (developers and CI machines only). Not part of the tests. Every command is
printed; each fine-tuning result is saved in results.json as it comes, and a later call skips what
is already there (delete the file, or --out elsewhere, to start afresh). The table goes to table.md.
"""

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np
from family import workspace
from harness import save_table

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.normpath(os.path.join(HERE, "..", "..", "shared", "data"))
TASKS = {  # name: (--task, train, dev, metric, settings)
    "sst2": ("sst2", "glue/SST-2/train.tsv", "glue/SST-2/dev.tsv", "accuracy",
             ["--epochs", "2", "--batch-size", "32", "--max-seq-length", "64"]),
    "conll": ("ner", "conll2003/train.txt", "conll2003/valid.txt", "f1",
              ["--epochs", "3", "--batch-size", "32", "--max-seq-length", "128"]),
}


def run(command: list[str]) -> float:
    print("$ " + " ".join(command), flush=True)
    start = time.perf_counter()
    subprocess.run(command, check=True)
    return (time.perf_counter() - start) / 60


def write_table(work: str, lines: list[str]) -> None:
    """The table's lines printed and saved as `work`/table.md."""
    save_table(os.path.join(work, "table.md"), "\n".join(lines))


def records(out: str) -> list[dict]:
    with open(os.path.join(out, "metrics.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30.0, help="pretraining budget")
    parser.add_argument("--preset", default="bert-mini")
    parser.add_argument("--lrs", nargs="+", default=["1e-4", "3e-4"], help="fine-tuning peak learning rates")
    parser.add_argument("--seeds", nargs="+", default=["0", "1"])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--out", default="runs/bench-transfer")
    args = parser.parse_args()
    corpus, work = workspace(args.out)
    saved = os.path.join(work, "results.json")
    results = json.load(open(saved, encoding="utf-8")) if os.path.exists(saved) else {}

    pretrained = os.path.join(work, "pretrain")
    if not os.path.exists(os.path.join(pretrained, "model", "config.json")):
        minutes = run([sys.executable, "-m", "bertforge", "pretrain", "--corpus", corpus, "--out", pretrained,
                       "--preset", args.preset, "--max-minutes", str(args.minutes), "--cache-dir",
                       os.path.join(work, "cache"), "--eval-batches", "40", "--eval-every", "500", "--quiet"])
        logged = records(pretrained)
        train = [r for r in logged if "loss" in r]
        results["pretraining"] = {
            "steps": train[-1]["step"], "minutes": round(train[-1]["elapsed_s"] / 60, 1),
            "wall_minutes": round(minutes, 1), "tokens_per_s": round(float(np.mean([r["tokens_per_s"] for r in train[1:]]))),
            "held_out": [r for r in logged if r.get("eval")][-1]["eval"],
        }
        with open(saved, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)
    # The baseline: the same encoder (config, vocabulary) with fresh weights.
    baseline = os.path.join(work, "random-init")
    if not os.path.exists(os.path.join(baseline, "config.json")):
        subprocess.run([sys.executable, "-c",
            "import torch; from bertforge import Tokenizer, save_pretrained; from bertforge.formats.hf import read_config;"
            "from bertforge.families.bert.model import Bert; torch.manual_seed(0);"
            f"m = {os.path.join(pretrained, 'model')!r};"
            f"save_pretrained(Bert(read_config(m)), {baseline!r}, Tokenizer.from_pretrained(m))"], check=True)

    models = {"pretrained": os.path.join(pretrained, "model"), "random-init": baseline}
    for task in args.tasks:
        kind, train_file, dev_file, metric, settings = TASKS[task]
        for name, model in models.items():
            for lr in args.lrs:
                for seed in args.seeds:
                    key = f"{name} {task} lr={lr} seed={seed}"
                    if key in results:
                        continue
                    out = os.path.join(work, "finetune", name, task, f"lr{lr}-seed{seed}")
                    minutes = run([sys.executable, "-m", "bertforge", "finetune", "--task", kind,
                                   "--train", os.path.join(DATA, train_file), "--dev", os.path.join(DATA, dev_file),
                                   "--model", model, "--out", out, "--lr", lr, "--seed", seed, "--quiet", *settings])
                    evals = [r["eval"] for r in records(out) if r.get("eval")]
                    # the run files hold fractions; this table (and its results file) percent
                    results[key] = {"score": 100 * max(e[metric] for e in evals), "minutes": round(minutes, 1)}
                    with open(saved, "w", encoding="utf-8") as f:
                        json.dump(results, f, indent=2)

    lines = ["| encoder | " + " | ".join(f"{task} lr {lr}" for task in args.tasks for lr in args.lrs) + " |",
             "|---|" + "---|" * (len(args.tasks) * len(args.lrs))]
    for name in models:
        cells = []
        for task in args.tasks:
            for lr in args.lrs:
                scores = [results[k]["score"] for k in (f"{name} {task} lr={lr} seed={s}" for s in args.seeds)
                          if k in results]
                cells.append(f"{np.mean(scores):.2f} ({', '.join(f'{s:.2f}' for s in scores)})" if scores else "-")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    if "pretraining" in results:
        p = results["pretraining"]
        lines.append(f"\npretraining: {p['steps']} steps in {p['minutes']} min, {p['tokens_per_s']} tokens/s, "
                     f"held-out {json.dumps(p['held_out'])}")
    write_table(work, lines)


if __name__ == "__main__":
    main()
