"""The small-budget pretraining recipe, found by measurement: short runs of the same model on the
same corpus and budget, one setting changed at a time, two seeds each, scored on held-out text at
15% masking (the trainer's own evaluation: the same instances and masks for every run).

    python benchmarks/recipe.py [--minutes 3] [--preset bert-tiny] [--corpus demo] [--seeds 0 1]
                                [--runs NAME ...] [--out runs/bench-recipe]

`--corpus demo` is the demo's Shakespeare (the `demo` extra); any files or folders work. Each run's
schedule is that of a full run of the same budget (warm-up and decay fit the minutes), so a short
sweep ranks settings as the real run would. Writes results.json and table.md in --out; a later call
with some --runs replaces those rows and keeps the others. Not part of the tests.
"""

import argparse
import json
import os
import shutil

from bertforge.data.batches import MaskingOptions
from bertforge.demo import prepare_corpus
from bertforge.pretrain import pretrain
from bertforge.training.run_log import read_metrics
from bertforge.training.trainer import TrainOptions
from harness import save_table

# name: settings changed from the base (2018 BERT's recipe on a small model: what users got before)
BASE = {"positions": "absolute", "lr": 1e-4, "warmup": 0.01, "dropout": None, "betas": (0.9, 0.999),
        "mask_prob": 0.15}
NEW = {"positions": "rotary", "lr": 2e-3, "warmup": 0.1, "dropout": 0.0, "betas": (0.9, 0.98)}
RUNS = {
    "bert-2018": {},
    "lr 1e-3, warm-up 10%": {"lr": 1e-3, "warmup": 0.1},
    "+ no dropout, beta2 0.98": {"lr": 1e-3, "warmup": 0.1, "dropout": 0.0, "betas": (0.9, 0.98)},
    "+ rotary": {**NEW, "lr": 1e-3},
    "+ rotary, lr 5e-4": {**NEW, "lr": 5e-4},
    "+ rotary, warm-up 3%": {**NEW, "lr": 1e-3, "warmup": 0.03},
    "+ rotary, lr 2e-3": NEW,
    "+ rotary, lr 4e-3": {**NEW, "lr": 4e-3},
    "+ rotary, lr 2e-3, warm-up 3%": {**NEW, "warmup": 0.03},
    "+ rotary, lr 2e-3, masking 20%": {**NEW, "mask_prob": 0.2},
    "+ rotary, lr 2e-3, masking 30%": {**NEW, "mask_prob": 0.3},
    "+ rotary, lr 2e-3, 128 tokens x 32": {**NEW, "max_seq_length": 128, "batch_size": 32},
    "+ rotary, bert-mini, lr 1e-3": {**NEW, "lr": 1e-3, "preset": "bert-mini"},
    # ModernBERT's encoder (pre-LN, GeGLU, no biases, local/global attention) with masked LM alone
    "modernbert, lr 2e-3, masking 30%": {**NEW, "objective": "modernbert", "mask_prob": 0.3},
    "modernbert, lr 2e-3, masking 15%": {**NEW, "objective": "modernbert"},
    "modernbert, lr 4e-3, masking 30%": {**NEW, "objective": "modernbert", "lr": 4e-3, "mask_prob": 0.3},
}


def one_run(name: str, seed: int, args, corpus) -> dict:
    settings = {**BASE, **RUNS[name]}
    out = os.path.join(args.out, name.replace(" ", "_").replace(",", "").replace("%", "").replace("+", "p"), str(seed))
    shutil.rmtree(out, ignore_errors=True)
    options = TrainOptions(out=out, max_minutes=args.minutes, lr=settings["lr"], warmup=settings["warmup"],
                           betas=settings["betas"], seed=seed, eval_every=0, eval_batches=20, save_every=0,
                           progress=False)
    seq, batch = settings.get("max_seq_length", args.max_seq_length), settings.get("batch_size", args.batch_size)
    pretrain(corpus, out, objective=settings.get("objective", "bert"), preset=settings.get("preset", args.preset),
             vocab_size=args.vocab_size, layout="prose",
             max_seq_length=seq, batch_size=batch, cache_dir=os.path.join(args.out, "cache"),
             eval_fraction=0.05, options=options, positions=settings["positions"], dropout=settings["dropout"],
             tokenizer=args.tokenizer, masking=MaskingOptions(mask_prob=settings["mask_prob"]))
    records = read_metrics(out)
    final = [r for r in records if r.get("eval")][-1]
    train = [r for r in records if "loss" in r]
    tokens_per_s = sum(r["tokens_per_s"] for r in train[1:]) / max(1, len(train) - 1)
    return {"mlm_accuracy": final["eval"]["mlm_accuracy"], "nsp_accuracy": final["eval"].get("nsp_accuracy"),
            "mlm_loss": final["eval"]["mlm_loss"], "steps": final["step"],
            "tokens": round(tokens_per_s * train[-1]["elapsed_s"]), "tokens_per_s": round(tokens_per_s)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--preset", default="bert-tiny")
    parser.add_argument("--corpus", nargs="+", default=["demo"])
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--max-seq-length", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--runs", nargs="+", choices=list(RUNS), default=list(RUNS))
    parser.add_argument("--out", default="runs/bench-recipe")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    corpus = prepare_corpus(os.path.join(args.out, "corpus")) if args.corpus == ["demo"] else args.corpus
    # One vocabulary for every run, so that only the named setting changes.
    args.tokenizer = os.path.join(args.out, "tokenizer")
    if not os.path.isdir(args.tokenizer):
        from bertforge.data.corpus import corpus_sentences, find_files
        from bertforge.data.tokenizer import Tokenizer

        Tokenizer.train(texts=corpus_sentences(find_files(corpus), "prose"), vocab_size=args.vocab_size,
                        show_progress=False).save_pretrained(args.tokenizer)
    path = os.path.join(args.out, "results.json")
    results = json.load(open(path)) if os.path.exists(path) else {}
    for name in args.runs:
        results[name] = [one_run(name, seed, args, corpus) for seed in args.seeds]
        print(name, json.dumps(results[name]), flush=True)
        with open(path, "w") as f:
            json.dump(results, f, indent=2)
    lines = [f"{args.preset}, {args.minutes:g} min per run, seeds {args.seeds}: mean (each seed)", "",
             "| setting | held-out MLM accuracy | NSP accuracy | MLM loss | tokens seen |", "|---|---|---|---|---|"]
    for name in RUNS:
        if name in results:
            rs = results[name]
            def cell(key, fmt):  # accuracies are fractions in the runs' files; percent in the table (fmt .1%)
                values = [r[key] for r in rs if r[key] is not None]
                return f"{sum(values) / len(values):{fmt}} ({', '.join(f'{v:{fmt}}' for v in values)})" if values else "-"
            lines.append(f"| {name} | {cell('mlm_accuracy', '.1%')} | {cell('nsp_accuracy', '.1%')} | "
                         f"{cell('mlm_loss', '.2f')} | {sum(r['tokens'] for r in rs) / len(rs) / 1e6:.1f}M |")
    save_table(os.path.join(args.out, "table.md"), "\n".join(lines))


if __name__ == "__main__":
    main()
