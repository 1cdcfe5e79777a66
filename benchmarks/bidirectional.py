"""BERT's central claim, measured: a bidirectional encoder (BERT, masked LM) against a left-to-right
decoder (GPT, next-token LM) of the same size, pretrained on the same Gutenberg corpus with the
same vocabulary for the same wall-clock budget, then fine-tuned with one recipe on SST-2, MRPC,
RTE, CoNLL-2003, a SWAG-style multiple-choice set and SQuAD v1.1 (extractive QA); each against its
own architecture randomly initialised.

    python benchmarks/bidirectional.py [--minutes 12] [--seeds 0 1] [--out runs/bench-bidirectional]
                                       [--tasks sst2 mrpc rte conll choice squad] [--starts pretrained random]
                                       [--models bert bert-absolute gpt gpt-1]

Each model pretrains once, with seed 0, with `bertforge pretrain`'s defaults for its objective (the
small-budget recipe: BERT with rotary positions, MLM + NSP; GPT with rotary positions and GPT-2's
layer order; its tables before 2026-11-25 had GPT's learned positions at half the learning rate). BERT learns the recipe's vocabulary for the corpus (16,384
WordPiece pieces) and every other model reads through it, so the vocabulary is not what differs.
Two controls: `bert-absolute` (BERT with GPT's learned position table) and `gpt-1` (GPT-1's own
layer order with its learned position table, which stays longer at the unigram loss). Fine-tuning uses `bertforge
finetune`'s defaults (GPT through its input transforms with the auxiliary LM loss at 0.5) with the
same epochs, batch and length for both, once per --seeds; the table gives the mean and each seed,
each score the best dev epoch.

The multiple-choice set is built from SQuAD v1.1 dev (Wikipedia, which neither model pretrained
on): the context is a sentence, the four endings are the sentence that follows it and three other
sentences of the same article; articles 0-37 train (2,000 examples), 38-47 are the dev set. The
QA task splits the same file the same way (8,582 questions to train on, 1,988 to answer).

Needs ../shared/data (developers and CI machines only). Not part of the tests. Commands are printed;
results.json keeps every run as it comes and a later call skips what it holds; table.md gets the table.
"""

import argparse
import json
import os
import random
import subprocess
import sys

import numpy as np
from family import DATA, records, run, subsets, workspace
from harness import save_table

# name: pretraining options. "bert-absolute" is the control for positions: BERT's recipe defaults
# give it rotary positions, GPT-1 has a learned table, and learned tables organise slowly. "gpt" is
# the recipe's GPT (GPT-2's layer order), "gpt-1" the control for the order: GPT-1's own.
MODELS = {"bert": ["--objective", "bert"], "bert-absolute": ["--objective", "bert", "--positions", "absolute"],
          "gpt": ["--objective", "gpt"], "gpt-1": ["--objective", "gpt", "--layer-norm", "post", "--positions", "absolute"]}
LABELS = {"bert": "BERT", "bert-absolute": "BERT, absolute positions", "gpt": "GPT, GPT-2's layer order",
          "gpt-1": "GPT-1, its own layer order"}
TASKS = {  # name: (--task, train, dev, metric, settings)
    "sst2": ("sst2", "WORK/sst2-train-10k.tsv", "glue/SST-2/dev.tsv", "accuracy",
             ["--epochs", "2", "--batch-size", "32", "--max-seq-length", "64"]),
    "mrpc": ("mrpc", "glue/MRPC/train.tsv", "glue/MRPC/dev.tsv", "f1",
             ["--epochs", "3", "--batch-size", "32", "--max-seq-length", "128"]),
    "rte": ("rte", "glue/RTE/train.tsv", "glue/RTE/dev.tsv", "accuracy",
            ["--epochs", "3", "--batch-size", "32", "--max-seq-length", "128"]),
    "conll": ("ner", "WORK/conll-train-5k.txt", "conll2003/valid.txt", "f1",
              ["--epochs", "3", "--batch-size", "32", "--max-seq-length", "128"]),
    "choice": ("multiple-choice", "WORK/choice-train.jsonl", "WORK/choice-dev.jsonl", "accuracy",
               ["--epochs", "2", "--batch-size", "16", "--max-seq-length", "96"]),
    # SQuAD v1.1 dev split by article, as the multiple-choice set: the question comes first, so a
    # left-to-right model reads every context token knowing the question, but not the words after it.
    "squad": ("qa", "squad/dev-v1.1.json@0-37", "squad/dev-v1.1.json@38-47", "f1",
              ["--epochs", "2", "--batch-size", "32", "--max-seq-length", "256"]),
}


def choice_sets(work: str) -> None:
    """Next-sentence multiple choice from SQuAD dev's paragraphs (see the module's docstring)."""
    from bertforge.data.corpus import split_sentences

    with open(os.path.join(DATA, "squad", "dev-v1.1.json"), encoding="utf-8") as f:
        articles = json.load(f)["data"]
    rng = random.Random(0)
    for name, chosen, limit in (("train", articles[:38], 2000), ("dev", articles[38:], None)):
        examples = []
        for article in chosen:
            sentences = [split_sentences(p["context"]) for p in article["paragraphs"]]
            flat = [s for paragraph in sentences for s in paragraph]
            for paragraph in sentences:
                for first, second in zip(paragraph, paragraph[1:]):
                    others = [s for s in flat if s not in (first, second)]
                    if len(others) < 3:
                        continue
                    endings = [second, *rng.sample(others, 3)]
                    rng.shuffle(endings)
                    examples.append({"context": first, "choices": endings, "label": endings.index(second)})
        rng.shuffle(examples)
        with open(os.path.join(work, f"choice-{name}.jsonl"), "w", encoding="utf-8") as f:
            f.writelines(json.dumps(e) + "\n" for e in examples[:limit])


def random_init(pretrained: str, out: str, seed: int) -> None:
    """The pretrained model's architecture and tokenizer, randomly initialised, never pretrained."""
    subprocess.run([sys.executable, "-c",
                    "import torch; from bertforge import Tokenizer, save_pretrained; "
                    "from bertforge.checkpoint import read_config; from bertforge.families import encoder; "
                    f"torch.manual_seed({seed}); config = read_config({pretrained!r}); "
                    f"save_pretrained(encoder(config), {out!r}, Tokenizer.from_pretrained({pretrained!r}))"],
                   check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=12.0, help="pretraining budget of each model")
    parser.add_argument("--out", default="runs/bench-bidirectional")
    parser.add_argument("--preset", default="bert-mini")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1], help="fine-tuning seeds")
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--starts", nargs="+", default=["pretrained", "random"], choices=["pretrained", "random"],
                        help="fine-tune the pretrained models, their random-init baselines, or both")
    args = parser.parse_args()
    corpus, work = workspace(args.out)
    subsets(work)
    choice_sets(work)
    cache = os.path.join(work, "cache")
    saved = os.path.join(work, "results.json")
    results = json.load(open(saved, encoding="utf-8")) if os.path.exists(saved) else {}

    def keep():
        with open(saved, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)

    # BERT learns the recipe's vocabulary for this corpus (16,384 WordPiece pieces); every other
    # model reads through the same one, so that the vocabulary is not what differs.
    models = ["bert"] + [m for m in args.models if m != "bert"]
    for name in models:
        run_dir = os.path.join(work, name)
        vocabulary = [] if name == "bert" else ["--tokenizer", os.path.join(work, "bert", "model")]
        if f"{name} pretraining" not in results:
            minutes = run([sys.executable, "-m", "bertforge", "pretrain", *MODELS[name],
                           "--corpus", corpus, "--out", run_dir, "--preset", args.preset, *vocabulary,
                           "--cache-dir", cache, "--max-minutes", str(args.minutes), "--seed", "0",
                           "--eval-every", "0", "--eval-batches", "40", "--save-every", "100000", "--quiet"])
            logged = records(run_dir)
            train = [r for r in logged if "loss" in r]
            results[f"{name} pretraining"] = {
                "steps": train[-1]["step"], "pretrain_minutes": round(train[-1]["elapsed_s"] / 60, 1),
                "wall_minutes": round(minutes, 1),
                "tokens_per_s": round(float(np.mean([r["tokens_per_s"] for r in train[1:]]))),
                "held_out": [r for r in logged if r.get("eval")][-1]["eval"]}
            keep()
        if name not in args.models:
            continue
        for seed in args.seeds:
            random_model = os.path.join(work, f"{name}-random-s{seed}")
            if not os.path.isdir(random_model):
                random_init(os.path.join(run_dir, "model"), random_model, seed)
            for start, model in (("pretrained", os.path.join(run_dir, "model")), ("random", random_model)):
                if start not in args.starts:
                    continue
                for task in args.tasks:
                    key = f"{name} {start} {task} seed={seed}"
                    if key in results:
                        continue
                    kind, train_file, dev, metric, settings = TASKS[task]
                    out = os.path.join(work, "finetune", f"{name}-{start}-s{seed}", task)
                    minutes = run([sys.executable, "-m", "bertforge", "finetune", "--task", kind,
                                   "--train", path(train_file, work), "--dev", path(dev, work), "--model", model,
                                   "--out", out, "--seed", str(seed), "--quiet", *settings])
                    evals = [r["eval"] for r in records(out) if r.get("eval")]
                    # the run files hold fractions; this table (and its results file) percent
                    results[key] = {"score": 100 * max(e[metric] for e in evals), "minutes": round(minutes, 1)}
                    keep()
    table = summary(results, [t for t in TASKS if any(f" {t} seed=" in key for key in results)])  # all run so far
    save_table(os.path.join(work, "table.md"), table)


def path(name: str, work: str) -> str:
    return os.path.join(work, name.removeprefix("WORK/")) if name.startswith("WORK/") else os.path.join(DATA, name)


def summary(results: dict, tasks: list[str]) -> str:
    """One row per model and start: pretraining figures, then each task's mean over the seeds."""
    header = {"sst2": "SST-2 acc", "mrpc": "MRPC F1", "rte": "RTE acc", "conll": "CoNLL F1",
              "choice": "next-sentence choice acc", "squad": "SQuAD F1"}
    lines = ["| model | start | tokens/s | steps | held-out loss (accuracy) | "
             + " | ".join(header[t] for t in tasks) + " |", "|---" * (5 + len(tasks)) + "|"]
    for name in MODELS:
        pre = results.get(f"{name} pretraining")
        for start in ("pretrained", "random"):
            cells = []
            for task in tasks:
                scores = [r["score"] for key, r in sorted(results.items()) if key.startswith(f"{name} {start} {task} ")]
                each = "/".join(f"{s:.1f}" for s in scores)
                mean = f"{np.mean(scores):.1f}" if scores else "-"
                cells.append(f"{mean} ({each})" if len(scores) > 1 else mean)
            speed = steps = loss = "-"
            if pre and start == "pretrained":
                term = "lm" if name.startswith("gpt") else "mlm"
                speed, steps = f"{pre['tokens_per_s']:,}", f"{pre['steps']:,}"
                held = pre["held_out"]
                loss = f"{term.upper()} {held[f'{term}_loss']:.2f} ({100 * held[f'{term}_accuracy']:.1f}%)"
            if speed == "-" and not any(c != "-" for c in cells):
                continue  # not run
            lines.append(f"| {LABELS[name]} | {start} | {speed} | {steps} | {loss} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
