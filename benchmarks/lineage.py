"""BERT and its recurrent ancestors side by side at equal compute: ELMo (frozen biLM features mixed into
a task biLSTM), TagLM (the LM's states inside a biLSTM-CRF tagger), ULMFiT (AWD-LSTM, its three
stages, forward and backward and their ensemble) and BERT (the small-budget recipe), each pretrained
for the same wall-clock minutes on the same Gutenberg corpus, then fine-tuned on SST-2 (10k training
sentences, the full dev set) and CoNLL-2003 (5k training sentences, the full valid set; ULMFiT is a
classifier only, TagLM a tagger only), each also from a random initialisation (the same architecture
never pretrained), with every fine-tuning seed given. ULMFiT's paper is about long documents (IMDb):
`authors`, built here from the Gutenberg books, asks which of eight novelists wrote a 300-word
passage (800 training passages, 200 dev; ULMFiT reads all of it, BERT its first 128 pieces; first
seed only, ~5 minutes per ULMFiT run).

    python benchmarks/lineage.py [--minutes 10] [--seeds 0 1] [--out runs/bench-lineage]
                                 [--models bert ulmfit ulmfit-bwd elmo] [--tasks sst2 conll authors]
                                 [--starts pretrained random]

ULMFiT's budget covers stages 1 and 2: general-domain pretraining for 80% of the minutes, then the LM
fine-tuned on the SST-2 training sentences for the rest (the target-task text its paper uses). Its
backward model (`ulmfit-bwd`, the LM reading right to left) gets the same minutes again, so the
forward + backward ensemble (the mean of the two classifiers' probabilities, `bertforge evaluate
--model FWD BWD`) costs twice the compute of any other row. ULMFiT's classifier is fine-tuned with
the paper's recipe (discriminative rates, gradual unfreezing: row `ulmfit`) and with every layer at
one rate of 3e-3 from the first step (rows `.../flat`; the backward model and the ensemble use it).
TagLM is ELMo's biLM inside TagLM's tagger (`--tagger taglm`); `taglm-baseline` is the same tagger
without the LM, so it has one start. Fine-tuning otherwise uses each family's `bertforge finetune`
defaults (ULMFiT's recipe, Adam at 1e-3 for the task models over ELMo, the rate by width for BERT)
with the same epochs, batch and length for all. Held-out figures are each pretraining's own: BERT's
masked-token loss, the recurrent models' next-word loss (ELMo: the mean of its two directions) on
the held-out books; the vocabularies differ, so losses compare within a family only.

Needs ../shared/data (developers and CI machines only). Not part of the tests. Commands are printed;
results.json keeps every run as it comes and a later call skips what it holds; table.md gets the table.
"""

import argparse
import json
import os
import subprocess
import sys

import numpy as np
from family import DATA, records, run, subsets, workspace

TASKS = {  # name: (--task, train, dev, metric, settings)
    "sst2": ("sst2", "WORK/sst2-train-10k.tsv", "glue/SST-2/dev.tsv", "accuracy",
             ["--epochs", "2", "--batch-size", "32", "--max-seq-length", "64"]),
    "conll": ("ner", "WORK/conll-train-5k.txt", "conll2003/valid.txt", "f1",
              ["--epochs", "3", "--batch-size", "32", "--max-seq-length", "128"]),
    "authors": ("classification", "WORK/authors-train.tsv", "WORK/authors-dev.tsv", "accuracy",
                ["--epochs", "3", "--batch-size", "16", "--max-seq-length", "512", "--text-column", "text",
                 "--label-column", "label"]),
}
FIRST_SEED_ONLY = {"authors"}  # ~5 minutes per ULMFiT run: one seed
# The long-document set: who wrote a 300-word passage, among eight novelists with 140k+ words here.
AUTHORS = {"Dumas": ["1184-0.txt"], "Hugo": ["135-0.txt"], "Tolstoy": ["2600-0.txt"], "Dostoevsky": ["2554-0.txt"],
           "Melville": ["2701-0.txt"], "Dickens": ["98-0.txt", "pg46.txt"], "Austen": ["158-0.txt", "pg161.txt"],
           "Twain": ["74-0.txt", "76-0.txt"]}
PASSAGE, TRAIN_PASSAGES, DEV_PASSAGES, FRONT_MATTER = 300, 100, 25, 2000
MODELS = {"bert": ["--objective", "bert"], "ulmfit": ["--objective", "awd-lstm"],
          "ulmfit-bwd": ["--objective", "awd-lstm", "--backwards"], "elmo": ["--objective", "elmo"]}
FLAT = ["--layer-lr-decay", "1", "--lr", "3e-3"]  # ULMFiT's classifier with every layer at one rate throughout
# What each pretrained model is fine-tuned as: (variant, its flags, the tasks it serves, the starts it has)
VARIANTS = {
    "bert": [("", [], ("sst2", "conll", "authors"), ("pretrained", "random"))],
    "ulmfit": [("", [], ("sst2",), ("pretrained", "random")),
               ("flat", FLAT, ("sst2", "authors"), ("pretrained", "random"))],
    "ulmfit-bwd": [("flat", FLAT, ("sst2", "authors"), ("pretrained", "random"))],
    "elmo": [("", [], ("sst2", "conll"), ("pretrained", "random")),
             ("taglm", ["--tagger", "taglm"], ("conll",), ("pretrained", "random")),
             ("taglm-baseline", ["--tagger", "taglm-baseline"], ("conll",), ("pretrained",))],
}
BERTFORGE = [sys.executable, "-m", "bertforge"]


def authors(work: str) -> None:
    """authors-{train,dev}.tsv: 300-word passages (the Gutenberg licence text and each book's first
    2,000 words, its title page and contents, cut away), the training ones spread evenly over the
    first 80% of each author's words, the dev ones over the last 20%, so no passage is in both. The
    books are also in the pretraining corpus, so every pretrained model has read the passages' text
    (never their labels), which favours pretraining on this task; ULMFiT's stage 2 stays on SST-2."""
    from bertforge.data.corpus import FileReport, _is_gutenberg_end, _is_gutenberg_start, read_lines

    splits = {"train": [], "dev": []}
    for author, books in AUTHORS.items():
        words = []
        for book in books:
            path_ = os.path.join(DATA, "corpus", "gutenberg", book)
            lines, inside = [], False
            for line in read_lines(path_, FileReport(path_)):
                if _is_gutenberg_end(line):
                    break
                if inside:
                    lines.append(line)
                inside = inside or _is_gutenberg_start(line)
            book_words = " ".join(lines).split()[FRONT_MATTER:]  # not the title page and contents
            assert len(book_words) > 10_000, f"{path_}: no Gutenberg start line, or too short"
            words += book_words
        cut = int(len(words) * 0.8)
        for split, (lo, hi, n) in (("train", (0, cut, TRAIN_PASSAGES)), ("dev", (cut, len(words), DEV_PASSAGES))):
            for begin in np.linspace(lo, hi - PASSAGE, n).astype(int):
                splits[split].append(f"{' '.join(words[begin:begin + PASSAGE])}\t{author}\n")
    for split, rows in splits.items():
        with open(os.path.join(work, f"authors-{split}.tsv"), "w", encoding="utf-8") as f:
            f.write("text\tlabel\n" + "".join(rows))


def pretrain(name: str, corpus: str, work: str, minutes: float) -> dict:
    """Pretrain `name` (ULMFiT: stages 1 and 2) within `minutes`; its figures."""
    run_dir = os.path.join(work, name)
    common = ["--eval-every", "0", "--eval-batches", "40", "--save-every", "100000", "--seed", "0", "--quiet"]
    ulmfit = name.startswith("ulmfit")
    stage1 = minutes * 0.8 if ulmfit else minutes
    if os.path.isdir(os.path.join(run_dir, "model")):  # kept from an earlier call that stopped later
        wall = max(r.get("elapsed_s", 0) for r in records(run_dir)) / 60
    else:
        wall = run([*BERTFORGE, "pretrain", *MODELS[name], "--corpus", corpus, "--out", run_dir,
                    "--max-minutes", str(stage1), *common])
    figures = figures_of(run_dir, name)
    if ulmfit:
        # the task's training sentences, each its own document (a blank line after it), so that
        # 2% of them are held out
        text = os.path.join(work, "sst2-train-10k.txt")
        with open(os.path.join(work, "sst2-train-10k.tsv"), encoding="utf-8") as f, \
                open(text, "w", encoding="utf-8") as out:
            out.writelines(line.split("\t")[0] + "\n\n" for line in list(f)[1:])
        if os.path.isdir(os.path.join(run_dir + "-sst2", "model")):  # kept from an earlier call
            wall += max(r.get("elapsed_s", 0) for r in records(run_dir + "-sst2")) / 60
        else:
            wall += run([*BERTFORGE, "pretrain", *MODELS[name], "--init", os.path.join(run_dir, "model"),
                         "--corpus", text, "--layout", "lines", "--out", run_dir + "-sst2",
                         "--max-minutes", str(minutes - stage1), *common])
        figures["target_lm"] = figures_of(run_dir + "-sst2", name)["held_out"]
    figures["wall_minutes"] = round(wall, 1)
    return figures


def figures_of(run_dir: str, name: str) -> dict:
    logged = records(run_dir)
    train = [r for r in logged if "loss" in r]
    with open(os.path.join(run_dir, "model", "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    return {"steps": train[-1]["step"], "pretrain_minutes": round(train[-1]["elapsed_s"] / 60, 1),
            "tokens_per_s": round(float(np.mean([r["tokens_per_s"] for r in train[1:]]))),
            "held_out": [r for r in logged if r.get("eval")][-1]["eval"], "parameters": parameters(run_dir),
            "model_type": config["model_type"]}


def parameters(run_dir: str) -> int:
    from safetensors import safe_open

    total = 0
    for name in ("model.safetensors", "bertforge_heads.safetensors"):
        path = os.path.join(run_dir, "model", name)
        if os.path.exists(path):
            with safe_open(path, "pt") as f:
                total += sum(np.prod(f.get_slice(k).get_shape()) for k in f.keys())
    return int(total)


def random_init(pretrained: str, out: str, seed: int) -> None:
    """The pretrained model's architecture and vocabulary, randomly initialised, never pretrained."""
    code = ("import torch, shutil, os; from bertforge.families import load_config; from bertforge.formats import native; "
            "from bertforge.formats.hf import save_pretrained; from bertforge.load import load_tokenizer; "
            f"torch.manual_seed({seed}); config = load_config({pretrained!r}); tok = load_tokenizer({pretrained!r})\n"
            "if config.model_type == 'awd-lstm':\n"
            "    from bertforge.models.awd_lstm import AWDLSTMLanguageModel as M\n"
            "elif config.model_type == 'elmo':\n"
            "    from bertforge.models.elmo import ELMoLanguageModel as M\n"
            "else:\n    M = None\n"
            "if M is None:\n"
            "    from bertforge.models import encoder; save_pretrained(encoder(config), "
            f"{out!r}, tok)\n"
            "else:\n"
            f"    os.makedirs({out!r}, exist_ok=True); native.write(M(config), {out!r}, tok)\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10.0, help="pretraining budget of each model")
    parser.add_argument("--out", default="runs/bench-lineage")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1], help="fine-tuning seeds")
    parser.add_argument("--results", default="results.json",
                        help="the file (in --out) that keeps the runs; another one lets two calls fine-tune at once")
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--starts", nargs="+", default=["pretrained", "random"], choices=["pretrained", "random"])
    args = parser.parse_args()
    corpus, work = workspace(args.out)
    subsets(work)
    authors(work)
    saved = os.path.join(work, args.results)
    results = json.load(open(saved, encoding="utf-8")) if os.path.exists(saved) else {}

    def keep():
        with open(saved, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)

    for name in args.models:
        if f"{name} pretraining" not in results:
            results[f"{name} pretraining"] = pretrain(name, corpus, work, args.minutes)
            keep()
        final = os.path.join(work, name + "-sst2" if name.startswith("ulmfit") else name, "model")
        for seed in args.seeds:
            random_model = os.path.join(work, f"{name}-random-s{seed}")
            if "random" in args.starts and not os.path.isdir(random_model):
                random_init(final, random_model, seed)
            for variant, flags, tasks, starts in VARIANTS[name]:
                row = f"{name}/{variant}" if variant else name
                for start, model in (("pretrained", final), ("random", random_model)):
                    for task in tasks:
                        key = f"{row} {start} {task} seed={seed}"
                        if (key in results or start not in args.starts or start not in starts or task not in args.tasks
                                or task in FIRST_SEED_ONLY and seed != args.seeds[0]):
                            continue
                        kind, train_file, dev, metric, settings = TASKS[task]
                        out = finetuned(work, row, start, seed, task)
                        minutes = run([*BERTFORGE, "finetune", "--task", kind, "--train", path(train_file, work),
                                       "--dev", path(dev, work), "--model", model, "--out", out, "--seed", str(seed),
                                       "--quiet", *settings, *flags])
                        evals = [r["eval"] for r in records(out) if r.get("eval")]
                        # the run files hold fractions; this table (and its results file) percent
                        results[key] = {"score": 100 * max(e[metric] for e in evals), "minutes": round(minutes, 1)}
                        keep()
            for start in args.starts:  # ULMFiT's forward + backward ensemble, once both classifiers exist
                for task in [t for t in ("sst2", "authors") if t in args.tasks]:
                    key = f"ulmfit-ensemble/flat {start} {task} seed={seed}"
                    both = [os.path.join(finetuned(work, f"{n}/flat", start, seed, task), "model")
                            for n in ("ulmfit", "ulmfit-bwd")]
                    if key not in results and all(os.path.isdir(b) for b in both):
                        done = subprocess.run([*BERTFORGE, "evaluate", "--model", *both, "--data",
                                               path(TASKS[task][2], work)], check=True, capture_output=True, text=True)
                        results[key] = {"score": 100 * json.loads(done.stdout)["accuracy"]}
                        keep()
    table = summary(results, args.tasks)
    with open(os.path.join(work, "table.md"), "w", encoding="utf-8") as f:
        f.write(table + "\n")
    print(table)


def finetuned(work: str, row: str, start: str, seed: int, task: str) -> str:
    return os.path.join(work, "finetune", f"{row.replace('/', '-')}-{start}-s{seed}", task)


def path(name: str, work: str) -> str:
    return os.path.join(work, name.removeprefix("WORK/")) if name.startswith("WORK/") else os.path.join(DATA, name)


def held_out(pre: dict) -> str:
    held = pre["held_out"]
    if "mlm_loss" in held:
        return f"masked-token loss {held['mlm_loss']:.2f} ({100 * held['mlm_accuracy']:.1f}%)"
    if "forward_loss" in held:
        loss = (held["forward_loss"] + held["backward_loss"]) / 2
        return f"next-word loss {loss:.2f} (ppl {np.exp(loss):.0f}; fwd/bwd {held['forward_loss']:.2f}/" \
               f"{held['backward_loss']:.2f})"
    text = f"next-word loss {held['lm_loss']:.2f} (ppl {np.exp(held['lm_loss']):.0f})"
    if "target_lm" in pre:
        text += f"; on SST-2 text after stage 2: {pre['target_lm']['lm_loss']:.2f}"
    return text


def summary(results: dict, tasks: list[str]) -> str:
    header = {"sst2": "SST-2 acc", "conll": "CoNLL F1", "authors": "authors acc"}
    lines = ["| model | start | parameters | tokens/s | steps | held-out | "
             + " | ".join(header[t] for t in tasks) + " |", "|---" * (6 + len(tasks)) + "|"]
    rows = [(name, f"{name}/{v}" if v else name) for name in MODELS for v, *_ in VARIANTS[name]]
    rows.insert([r for _, r in rows].index("ulmfit-bwd/flat") + 1, ("ulmfit-bwd", "ulmfit-ensemble/flat"))
    described = set()  # each pretraining's figures on its model's first row
    for name, row in rows:
        pre = results.get(f"{name} pretraining")
        for start in ("pretrained", "random"):
            cells = []
            for task in tasks:
                scores = [r["score"] for key, r in sorted(results.items()) if key.startswith(f"{row} {start} {task} ")]
                each = "/".join(f"{s:.1f}" for s in scores)
                cells.append(f"{np.mean(scores):.1f} ({each})" if scores else "-")
            first = pre and start == "pretrained" and name not in described and not row.startswith("ulmfit-ens")
            if all(c == "-" for c in cells) and not first:
                continue
            size = speed = steps = loss = "-"
            if pre:
                size = f"{pre['parameters'] / 1e6:.1f}M"
            if first:
                described.add(name)
                speed, steps, loss = f"{pre['tokens_per_s']:,}", str(pre["steps"]), held_out(pre)
            if row.startswith("ulmfit-ensemble"):
                size = f"2 x {size}"
            lines.append(f"| {row} | {start} | {size} | {speed} | {steps} | {loss} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
