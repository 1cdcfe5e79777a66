"""Pretraining on the shared Gutenberg corpus: shard-building time and memory, then bert-mini for a
wall-clock budget, reporting tokens/s and the held-out MLM loss/accuracy and NSP accuracy.

    python benchmarks/pretrain_gutenberg.py [--minutes 20] [--out runs/bench-pretrain]

Needs ../shared/data (developers and CI machines only). Not part of the tests.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.normpath(os.path.join(HERE, "..", "..", "shared", "data"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=20.0, help="pretraining budget")
    parser.add_argument("--out", default="runs/bench-pretrain", help="run directory")
    parser.add_argument("--preset", default="bert-mini")
    parser.add_argument("--lr", type=float, default=5e-4, help="peak learning rate (small models take more than BERT's 1e-4)")
    args = parser.parse_args()
    corpus = os.path.join(SHARED, "corpus", "gutenberg")
    if not os.path.isdir(corpus):
        sys.exit(f"needs the shared corpus at {corpus}")
    work = tempfile.mkdtemp(prefix="bench-pretrain-")
    tokenizer = os.path.join(work, "tokenizer")
    cache = os.path.join(work, "cache")

    # 1. Shards, in a child process so that its peak memory is measured alone.
    code = ("import sys; from bertforge import Tokenizer; from bertforge.data.shards import build_shards;"
            f"t = Tokenizer.from_vocab({os.path.join(SHARED, 'bert', 'vocab.txt')!r}); t.save_pretrained({tokenizer!r});"
            f"build_shards({corpus!r}, t, cache_dir={cache!r}, progress=False)")
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    shard_seconds = time.perf_counter() - start
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # the largest child process
    size_mb = sum(os.path.getsize(os.path.join(corpus, f)) for f in os.listdir(corpus)) / 1e6

    # 2. Pretraining through the command line, exactly as a user runs it.
    command = [sys.executable, "-m", "bertforge", "pretrain", "--corpus", corpus, "--out", args.out,
               "--preset", args.preset, "--tokenizer", tokenizer, "--cache-dir", cache,
               "--max-minutes", str(args.minutes), "--lr", str(args.lr), "--warmup", "0.05",
               "--eval-every", "250", "--eval-batches", "40", "--save-every", "1000", "--quiet"]
    print(" ".join(command), flush=True)
    subprocess.run(command, check=True)

    with open(os.path.join(args.out, "metrics.jsonl"), encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    train = [r for r in records if "loss" in r]
    evals = [r for r in records if r.get("eval")]
    summary = {
        "corpus_mb": round(size_mb, 1), "shard_seconds": round(shard_seconds, 1),
        "shard_mb_per_s": round(size_mb / shard_seconds, 2), "shard_peak_rss_mb": round(peak_mb),
        "preset": args.preset, "steps": train[-1]["step"], "minutes": round(train[-1]["elapsed_s"] / 60, 1),
        "tokens_per_s": round(sum(r["tokens_per_s"] for r in train[1:]) / max(1, len(train) - 1)),
        "final_eval": evals[-1]["eval"],
        "eval_curve": [(r["step"], r["eval"]["mlm_loss"], r["eval"]["mlm_accuracy"], r["eval"]["nsp_accuracy"])
                       for r in evals],
    }
    with open(os.path.join(args.out, "benchmark.json"), "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=2)
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
