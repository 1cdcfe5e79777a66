"""The BERT family side by side: pretrain every objective (BERT, RoBERTa, SpanBERT, ALBERT, ELECTRA)
on the shared Gutenberg corpus with the same model size and wall-clock budget, fine-tune each (and
a randomly initialised baseline) on the same subsets of SST-2 and CoNLL-2003 with the same recipe,
and write one table.

    python benchmarks/family.py [--minutes 20] [--seeds 0 1] [--out runs/bench-family]
                                [--runs bert electra random-init ...]

Each objective pretrains with `bertforge pretrain`'s own defaults for its family (the small-budget
recipe: rotary positions for bert and span, absolute at half the learning rate for the others), so
the table shows what a user gets. Needs ../shared/data (developers and CI machines only). Not part
of the tests. Every command run is printed, and the table is saved as results.json and table.md in
--out; a later call with some --runs and --seeds replaces those rows and keeps the others.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np

from harness import save_table

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.normpath(os.path.join(HERE, "..", "..", "shared", "data"))
OBJECTIVES = ["bert", "roberta", "span", "albert", "electra"]
# One fine-tuning recipe for every model; the learning rate is `bertforge finetune`'s default for
# the encoder's width (2e-4 for bert-mini).
FINETUNE = {  # task: (--task, train subset, dev file, settings)
    "sst2": ("sst2", "sst2-train-10k.tsv", "glue/SST-2/dev.tsv",
             ["--epochs", "2", "--batch-size", "32", "--max-seq-length", "64"]),
    "conll": ("ner", "conll-train-5k.txt", "conll2003/valid.txt",
              ["--epochs", "3", "--batch-size", "32", "--max-seq-length", "128"]),
}


def run(command: list[str]) -> float:
    print(" ".join(command), flush=True)
    start = time.perf_counter()
    subprocess.run(command, check=True)
    return (time.perf_counter() - start) / 60


def records(out: str) -> list[dict]:
    with open(os.path.join(out, "metrics.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def workspace(out: str) -> tuple[str, str]:
    """The shared Gutenberg corpus and `out` as an absolute folder, made; exits without the shared data."""
    corpus = os.path.join(DATA, "corpus", "gutenberg")
    if not os.path.isdir(corpus):
        sys.exit(f"needs the shared corpus at {corpus}")
    work = os.path.abspath(out)
    os.makedirs(work, exist_ok=True)
    return corpus, work


def bert_vocabulary(work: str) -> str:
    """bert-base-uncased's WordPiece saved as a tokenizer folder in `work`, shared by every run."""
    tokenizer = os.path.join(work, "tokenizer")
    subprocess.run([sys.executable, "-c", f"from bertforge import Tokenizer; Tokenizer.from_vocab("
                    f"{os.path.join(DATA, 'bert', 'vocab.txt')!r}).save_pretrained({tokenizer!r})"], check=True)
    return tokenizer


def subsets(work: str) -> None:
    """A fixed random 10,000 SST-2 training sentences and the first 5,000 CoNLL training sentences."""
    with open(os.path.join(DATA, "glue/SST-2/train.tsv"), encoding="utf-8") as f:
        header, *rows = f.readlines()
    keep = np.random.default_rng(0).choice(len(rows), 10_000, replace=False)
    with open(os.path.join(work, "sst2-train-10k.tsv"), "w", encoding="utf-8") as f:
        f.write(header + "".join(rows[i] for i in sorted(keep)))
    out, sentences, in_sentence = [], 0, False
    with open(os.path.join(DATA, "conll2003/train.txt"), encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                sentences += in_sentence
                in_sentence = False
                if sentences == 5000:
                    break
            elif not line.startswith("-DOCSTART-"):
                in_sentence = True
            out.append(line)
    with open(os.path.join(work, "conll-train-5k.txt"), "w", encoding="utf-8") as f:
        f.writelines(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=20.0, help="pretraining budget of each objective")
    parser.add_argument("--out", default="runs/bench-family")
    parser.add_argument("--preset", default="bert-mini")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0], help="one run of everything per seed")
    parser.add_argument("--runs", nargs="+", default=[*OBJECTIVES, "random-init"], choices=[*OBJECTIVES, "random-init"],
                        help="objectives to pretrain, and random-init for the baseline")
    args = parser.parse_args()
    corpus, work = workspace(args.out)
    subsets(work)
    tokenizer, cache = bert_vocabulary(work), os.path.join(work, "cache")
    python = [sys.executable, "-c"]

    saved = os.path.join(work, "results.json")
    results = json.load(open(saved, encoding="utf-8")) if os.path.exists(saved) else {}
    for seed in args.seeds:
        for name in args.runs:  # a run repeated starts afresh
            key = f"{name} seed={seed}"
            run_dir = os.path.join(work, f"{name}-s{seed}")
            for stale in (run_dir, os.path.join(work, "finetune", f"{name}-s{seed}")):
                shutil.rmtree(stale, ignore_errors=True)
            results[key] = {}
            if name == "random-init":  # the baseline: the same encoder, randomly initialised, never pretrained
                model = os.path.join(run_dir, "model")
                subprocess.run(python + [
                    "import torch; from bertforge import Tokenizer, save_pretrained; from bertforge.families.bert.config import preset;"
                    f"from bertforge.families.bert.model import Bert; torch.manual_seed({seed});"
                    f"t = Tokenizer.from_pretrained({tokenizer!r});"
                    f"save_pretrained(Bert(preset({args.preset!r}, vocab_size=t.vocab_size)), {model!r}, t)"], check=True)
            else:
                minutes = run([sys.executable, "-m", "bertforge", "pretrain", "--objective", name,
                               "--corpus", corpus, "--out", run_dir, "--preset", args.preset, "--tokenizer", tokenizer,
                               "--cache-dir", cache, "--max-minutes", str(args.minutes), "--seed", str(seed),
                               "--eval-every", "0", "--eval-batches", "40", "--save-every", "100000", "--quiet"])
                logged = records(run_dir)
                train = [r for r in logged if "loss" in r]
                results[key] = {
                    "steps": train[-1]["step"], "pretrain_minutes": round(train[-1]["elapsed_s"] / 60, 1),
                    "wall_minutes": round(minutes, 1),
                    "tokens_per_s": round(float(np.mean([r["tokens_per_s"] for r in train[1:]]))),
                    "held_out": [r for r in logged if r.get("eval")][-1]["eval"],
                }
                model = os.path.join(run_dir, "model")
            for task, (kind, train_file, dev, settings) in FINETUNE.items():
                out = os.path.join(work, "finetune", f"{name}-s{seed}", task)
                minutes = run([sys.executable, "-m", "bertforge", "finetune", "--task", kind,
                               "--train", os.path.join(work, train_file), "--dev", os.path.join(DATA, dev),
                               "--model", model, "--out", out, "--seed", str(seed), "--quiet", *settings])
                evals = [r["eval"] for r in records(out) if r.get("eval")]
                metric = "accuracy" if task == "sst2" else "f1"
                # percent, as the table (the runs' files hold fractions)
                results[key][task] = 100 * max(e[metric] for e in evals)
                results[key][f"{task}_minutes"] = round(minutes, 1)
            with open(saved, "w", encoding="utf-8") as f:
                json.dump(results, f, indent=2)
    table = summary(results)
    save_table(os.path.join(work, "table.md"), table)


def summary(results: dict) -> str:
    """One row per objective: means over its seeds, each seed's value in brackets."""
    lines = ["| objective | seeds | tokens/s | pretraining min (steps) | held-out accuracy | SST-2 acc | CoNLL F1 |",
             "|---|---|---|---|---|---|---|"]
    order = [*OBJECTIVES, "random-init"]
    names = sorted({key.split(" ")[0] for key in results}, key=order.index)
    for name in names:
        rows = [r for key, r in sorted(results.items()) if key.split(" ")[0] == name and "sst2" in r and "conll" in r]
        if not rows:
            continue

        def mean(values, digits=2):
            each = "/".join(f"{v:.{digits}f}" for v in values)
            return f"{np.mean(values):.{digits}f} ({each})" if len(values) > 1 else f"{values[0]:.{digits}f}"

        pre = accuracy = speed = "-"
        if "steps" in rows[0]:
            speed = f"{round(np.mean([r['tokens_per_s'] for r in rows])):,}"
            pre = f"{np.mean([r['pretrain_minutes'] for r in rows]):.1f} ({'/'.join(str(r['steps']) for r in rows)})"
            terms = [k for k in rows[0]["held_out"] if k.endswith("_accuracy")]
            accuracy = "; ".join(f"{k.removesuffix('_accuracy').upper()} "
                                 f"{mean([100 * r['held_out'][k] for r in rows], 1)}%" for k in terms)
        lines.append(f"| {name} | {len(rows)} | {speed} | {pre} | {accuracy} | {mean([r['sst2'] for r in rows])} "
                     f"| {mean([r['conll'] for r in rows])} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
