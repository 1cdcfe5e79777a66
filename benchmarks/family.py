"""The BERT family side by side: pretrain every objective (BERT, RoBERTa, SpanBERT, ALBERT, ELECTRA)
on the shared Gutenberg corpus with the same model size and wall-clock budget, fine-tune each (and
a randomly initialised baseline) on the same subsets of SST-2 and CoNLL-2003 with the same recipe,
and write one table.

    python benchmarks/family.py [--minutes 8] [--out runs/bench-family] [--runs bert electra random-init ...]

Needs ../shared/data (developers and CI machines only). Not part of the tests. Every command run is
printed, and the table is saved as results.json and table.md in --out; a later call with some
--runs replaces those rows and keeps the others.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.normpath(os.path.join(HERE, "..", "..", "shared", "data"))
OBJECTIVES = ["bert", "roberta", "span", "albert", "electra"]
# One peak learning rate for all (small models take more than BERT's 1e-4); each objective keeps its
# other defaults (RoBERTa: batch 64, beta2 0.98). RoBERTa at twice this rate (1e-3) collapsed to
# predicting the commonest tokens (MLM accuracy 6%) and fine-tuned to chance.
LR = "5e-4"
FINETUNE = {  # task: (--task, train subset, dev file, settings), one recipe for every model
    "sst2": ("sst2", "sst2-train-10k.tsv", "glue/SST-2/dev.tsv",
             ["--epochs", "2", "--lr", "1e-4", "--batch-size", "32", "--max-seq-length", "64"]),
    "conll": ("ner", "conll-train-5k.txt", "conll2003/valid.txt",
              ["--epochs", "3", "--lr", "1e-4", "--batch-size", "32", "--max-seq-length", "128"]),
}


def run(command: list[str]) -> float:
    print(" ".join(command), flush=True)
    start = time.perf_counter()
    subprocess.run(command, check=True)
    return (time.perf_counter() - start) / 60


def records(out: str) -> list[dict]:
    with open(os.path.join(out, "metrics.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


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
    parser.add_argument("--minutes", type=float, default=8.0, help="pretraining budget of each objective")
    parser.add_argument("--out", default="runs/bench-family")
    parser.add_argument("--preset", default="bert-mini")
    parser.add_argument("--runs", nargs="+", default=[*OBJECTIVES, "random-init"], choices=[*OBJECTIVES, "random-init"],
                        help="objectives to pretrain, and random-init for the baseline")
    args = parser.parse_args()
    corpus = os.path.join(DATA, "corpus", "gutenberg")
    if not os.path.isdir(corpus):
        sys.exit(f"needs the shared corpus at {corpus}")
    os.makedirs(args.out, exist_ok=True)
    work = os.path.abspath(args.out)
    subsets(work)
    tokenizer, cache = os.path.join(work, "tokenizer"), os.path.join(work, "cache")
    python = [sys.executable, "-c"]
    subprocess.run(python + [f"from bertforge import Tokenizer; Tokenizer.from_vocab("
                             f"{os.path.join(DATA, 'bert', 'vocab.txt')!r}).save_pretrained({tokenizer!r})"], check=True)

    for name in args.runs:  # a run repeated starts afresh
        for stale in (os.path.join(work, name), os.path.join(work, "finetune", name)):
            shutil.rmtree(stale, ignore_errors=True)
    saved = os.path.join(work, "results.json")
    results = json.load(open(saved, encoding="utf-8")) if os.path.exists(saved) else {}
    for objective in [r for r in args.runs if r != "random-init"]:
        out = os.path.join(work, objective)
        minutes = run([sys.executable, "-m", "bertforge.cli", "pretrain", "--objective", objective,
                       "--corpus", corpus, "--out", out, "--preset", args.preset, "--tokenizer", tokenizer,
                       "--cache-dir", cache, "--max-minutes", str(args.minutes), "--lr", LR,
                       "--warmup", "0.05", "--eval-every", "0", "--eval-batches", "40", "--save-every", "100000",
                       "--quiet"])
        logged = records(out)
        train = [r for r in logged if "loss" in r]
        results[objective] = {
            "steps": train[-1]["step"], "pretrain_minutes": round(train[-1]["elapsed_s"] / 60, 1),
            "wall_minutes": round(minutes, 1),
            "tokens_per_s": round(float(np.mean([r["tokens_per_s"] for r in train[1:]]))),
            "held_out": [r for r in logged if r.get("eval")][-1]["eval"],
        }
    # The baseline: the same encoder, randomly initialised, never pretrained.
    baseline = os.path.join(work, "random-init", "model")
    if "random-init" in args.runs:
        subprocess.run(python + [
            "import torch; from bertforge import Tokenizer, save_pretrained; from bertforge.config import preset;"
            "from bertforge.models.bert import Bert; torch.manual_seed(0);"
            f"t = Tokenizer.from_pretrained({tokenizer!r});"
            f"save_pretrained(Bert(preset({args.preset!r}, vocab_size=t.vocab_size)), {baseline!r}, t)"], check=True)
        results["random-init"] = {}

    for name in args.runs:
        model = baseline if name == "random-init" else os.path.join(work, name, "model")
        for task, (kind, train, dev, settings) in FINETUNE.items():
            out = os.path.join(work, "finetune", name, task)
            minutes = run([sys.executable, "-m", "bertforge.cli", "finetune", "--task", kind,
                           "--train", os.path.join(work, train), "--dev", os.path.join(DATA, dev),
                           "--model", model, "--out", out, "--quiet", *settings])
            evals = [r["eval"] for r in records(out) if r.get("eval")]
            metric = "accuracy" if task == "sst2" else "f1"
            results[name][task] = max(e[metric] for e in evals)
            results[name][f"{task}_minutes"] = round(minutes, 1)
        with open(saved, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)

    lines = ["| objective | tokens/s | pretraining min (steps) | held-out loss | SST-2 acc | CoNLL F1 |",
             "|---|---|---|---|---|---|"]
    order = [*OBJECTIVES, "random-init"]
    for name, r in sorted(results.items(), key=lambda item: order.index(item[0])):
        held = r.get("held_out", {})
        losses = ", ".join(f"{k.removesuffix('_loss')} {v:.3f}" for k, v in held.items()
                           if k.endswith("_loss") and k != "loss")
        accuracy = ", ".join(f"{k.removesuffix('_accuracy')} {100 * v:.1f}%" for k, v in held.items()
                             if k.endswith("_accuracy"))
        pre = f"{r['pretrain_minutes']} ({r['steps']})" if "steps" in r else "-"
        lines.append(f"| {name} | {r.get('tokens_per_s', '-')} | {pre} | {losses or '-'}"
                     f"{'; acc ' + accuracy if accuracy else ''} | {r['sst2']:.2f} | {r['conll']:.2f} |")
    table = "\n".join(lines)
    with open(os.path.join(work, "table.md"), "w", encoding="utf-8") as f:
        f.write(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
