"""BERT and its ancestors side by side at equal compute: GloVe (static vectors into a task network),
CoVe (GloVe and an MT-LSTM trained on translation, into the same network), ELMo (frozen biLM
features mixed into a task biLSTM), TagLM (the LM's states inside a biLSTM-CRF tagger), ULMFiT
(AWD-LSTM, its three stages, forward and backward and their ensemble), GPT-1 (a left-to-right
Transformer, fine-tuned through its input transforms) and BERT (the small-budget recipe), each
pretrained for the same wall-clock minutes on the same Gutenberg corpus (CoVe: GloVe's minutes on
it, then as many on Multi30k en-de translation, so its row costs twice the compute), then fine-tuned
on SST-2 (10k training sentences, the full dev set), CoNLL-2003 (5k training sentences, the full
valid set) and a question-type task (SQuAD v1.1's questions labelled number / name / description by
their answers, TREC's coarse types folded to what an answer's text decides; articles 0-37 train,
38-47 dev), each also from a random initialisation (the same architecture never pretrained; CoVe's:
a fresh MT-LSTM over the same GloVe vectors; GloVe's: random vectors), with every fine-tuning seed
given. ULMFiT is a classifier only, TagLM a tagger only. ULMFiT's paper is about long documents
(IMDb): `authors`, built here from the Gutenberg books, asks which of eight novelists wrote a
300-word passage (800 training passages, 200 dev; ULMFiT reads all of it, BERT its first 128
pieces; first seed only, ~5 minutes per ULMFiT run).

    python benchmarks/lineage.py [--minutes 10] [--seeds 0 1] [--out runs/bench-lineage]
                                 [--models bert ulmfit ulmfit-bwd elmo gpt cove]
                                 [--tasks sst2 conll questions authors] [--starts pretrained random]
                                 [--pretrain-only]

ULMFiT's budget covers stages 1 and 2: general-domain pretraining for 80% of the minutes, then the LM
fine-tuned on the SST-2 training sentences for the rest (the target-task text its paper uses). Its
backward model (`ulmfit-bwd`, the LM reading right to left) gets the same minutes again, so the
forward + backward ensemble (the mean of the two classifiers' probabilities, `bertforge evaluate
--model FWD BWD`) costs twice the compute of any other row. ULMFiT's classifier is fine-tuned with
the paper's recipe (discriminative rates, gradual unfreezing: row `ulmfit`) and with every layer at
one rate of 3e-3 from the first step (rows `.../flat`; the backward model and the ensemble use it).
TagLM is ELMo's biLM inside TagLM's tagger (`--tagger taglm`); `taglm-baseline` is the same tagger
without the LM, so it has one start. Fine-tuning otherwise uses each family's `bertforge finetune`
defaults (ULMFiT's recipe, Adam at 1e-3 for the task models over ELMo and CoVe, the rate by width
for BERT and GPT) with the same epochs, batch and length for all. Held-out figures are each
pretraining's own: BERT's masked-token loss, GPT's and the recurrent models' next-word loss (ELMo:
the mean of its two directions) on the held-out books, GloVe's WordSim-353 and analogy scores and
the translation's validation BLEU for CoVe; the vocabularies differ, so losses compare within a
family only.

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
from harness import save_table

TASKS = {  # name: (--task, train, dev, metric, settings)
    "sst2": ("sst2", "WORK/sst2-train-10k.tsv", "glue/SST-2/dev.tsv", "accuracy",
             ["--epochs", "2", "--batch-size", "32", "--max-seq-length", "64"]),
    "conll": ("ner", "WORK/conll-train-5k.txt", "conll2003/valid.txt", "f1",
              ["--epochs", "3", "--batch-size", "32", "--max-seq-length", "128"]),
    "authors": ("classification", "WORK/authors-train.tsv", "WORK/authors-dev.tsv", "accuracy",
                ["--epochs", "3", "--batch-size", "16", "--max-seq-length", "512", "--text-column", "text",
                 "--label-column", "label"]),
}
TASKS["questions"] = ("classification", "WORK/questions-train.tsv", "WORK/questions-dev.tsv", "accuracy",
                      ["--epochs", "2", "--batch-size", "32", "--max-seq-length", "64", "--text-column", "text",
                       "--label-column", "label"])
FIRST_SEED_ONLY = {"authors"}  # ~5 minutes per ULMFiT run: one seed
# The long-document set: who wrote a 300-word passage, among eight novelists with 140k+ words here.
AUTHORS = {"Dumas": ["1184-0.txt"], "Hugo": ["135-0.txt"], "Tolstoy": ["2600-0.txt"], "Dostoevsky": ["2554-0.txt"],
           "Melville": ["2701-0.txt"], "Dickens": ["98-0.txt", "pg46.txt"], "Austen": ["158-0.txt", "pg161.txt"],
           "Twain": ["74-0.txt", "76-0.txt"]}
PASSAGE, TRAIN_PASSAGES, DEV_PASSAGES, FRONT_MATTER = 300, 100, 25, 2000
MODELS = {"bert": ["--objective", "bert"], "ulmfit": ["--objective", "awd-lstm"],
          "ulmfit-bwd": ["--objective", "awd-lstm", "--backwards"], "elmo": ["--objective", "elmo"],
          "gpt": ["--objective", "gpt"], "cove": []}
# CoVe's MT-LSTM learns on Multi30k en-de over 300-d GloVe vectors learned first on the corpus; each
# step gets the minutes, so CoVe's row costs twice the compute (the GloVe row, its vectors alone, once).
COVE_TRANSLATION = ["--arch", "lstm", "--source-lang", "en", "--target-lang", "de", "--eval-every", "250",
                    "--bleu-sentences", "200", "--average", "1"]
FLAT = ["--layer-lr-decay", "1", "--lr", "3e-3"]  # ULMFiT's classifier with every layer at one rate throughout
# What each pretrained model is fine-tuned as: (variant, its flags, the tasks it serves, the starts it has)
VARIANTS = {
    "bert": [("", [], ("sst2", "conll", "questions", "authors"), ("pretrained", "random"))],
    "ulmfit": [("", [], ("sst2",), ("pretrained", "random")),
               ("flat", FLAT, ("sst2", "questions", "authors"), ("pretrained", "random"))],
    "ulmfit-bwd": [("flat", FLAT, ("sst2", "authors"), ("pretrained", "random"))],
    "gpt": [("", [], ("sst2", "conll", "questions"), ("pretrained", "random"))],
    # random: a fresh MT-LSTM over the same GloVe vectors (what translation adds); for GloVe alone,
    # random vectors
    "cove": [("", ["--features", "glove+cove"], ("sst2", "conll", "questions"), ("pretrained", "random")),
             ("glove", ["--features", "glove"], ("sst2", "conll", "questions"), ("pretrained", "random"))],
    "elmo": [("", [], ("sst2", "conll", "questions"), ("pretrained", "random")),
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


MONTHS = set("january february march april may june july august september october november december".split())
NUMBER_WORDS = set("one two three four five six seven eight nine ten eleven twelve twenty hundred thousand million "
                   "billion first second third".split())
MINOR = {"of", "the", "and", "de", "von", "van", "for", "in"}  # lower-case words inside names


def answer_type(answer: str) -> str:
    """TREC's coarse question types folded to three that an answer's text decides: a number (digits,
    number words, months: TREC's NUM), a name (every word capitalised: HUM, LOC and named ENTY), or a
    description (DESC and the rest)."""
    words = [w.strip(".,;:'\"()").lower() for w in answer.split()]
    if any(c.isdigit() for c in answer) or any(w in MONTHS | NUMBER_WORDS for w in words):
        return "number"
    named = [w for w in answer.split() if w[:1].isalpha() and w.lower() not in MINOR]
    return "name" if named and all(w[0].isupper() for w in named) else "description"


def questions(work: str) -> None:
    """questions-{train,dev}.tsv, the question-type task (TREC is not in the shared data): each SQuAD
    v1.1 dev question labelled by the type of its first answer (`answer_type`); articles 0-37 train
    (~8,400 questions), 38-47 dev (~2,100), so no article is in both. The model reads the question
    alone, as in TREC: it must tell what kind of thing is asked for."""
    with open(os.path.join(DATA, "squad", "dev-v1.1.json"), encoding="utf-8") as f:
        articles = json.load(f)["data"]
    for split, chosen in (("train", articles[:38]), ("dev", articles[38:])):
        rows = [f"{' '.join(q['question'].split())}\t{answer_type(q['answers'][0]['text'])}\n"
                for a in chosen for p in a["paragraphs"] for q in p["qas"]]
        with open(os.path.join(work, f"questions-{split}.tsv"), "w", encoding="utf-8") as f:
            f.write("text\tlabel\n" + "".join(rows))


def pretrain_cove(corpus: str, work: str, minutes: float) -> dict:
    """GloVe on the corpus for `minutes`, then CoVe's MT-LSTM on Multi30k en-de over those vectors for
    `minutes`; the figures of both."""
    from gensim.test.utils import datapath  # the test sets gensim ships (the test extra)

    from bertforge import vector_scores
    from bertforge.formats.word_vectors import read_vectors

    vectors = os.path.join(work, "glove", "vectors.txt")
    os.makedirs(os.path.dirname(vectors), exist_ok=True)
    wall = 0.0
    if not os.path.exists(vectors):
        wall += run([*BERTFORGE, "word-vectors", "--corpus", corpus, "--output", vectors, "--dim", "300",
                     "--max-minutes", str(minutes)])
    words, matrix = read_vectors(vectors)
    pairs, sections = (vector_scores.read_pairs(datapath("wordsim353.tsv")),
                       vector_scores.read_questions(datapath("questions-words.txt")))
    glove = {"words": len(words), "wordsim": round(vector_scores.word_similarity(words, matrix, pairs)["spearman"], 3),
             "analogies": round(100 * vector_scores.analogies(words, matrix, sections)["accuracy"], 1)}
    run_dir = os.path.join(work, "cove")
    if not os.path.isdir(os.path.join(run_dir, "model")):
        prefix = os.path.join(DATA, "multi30k")
        wall += run([*BERTFORGE, "train-translation", *COVE_TRANSLATION, "--word-vectors", vectors,
                     "--train", os.path.join(prefix, "train"), "--dev", os.path.join(prefix, "val"),
                     "--out", run_dir, "--max-minutes", str(minutes)])
    return {**figures_of(run_dir, "cove"), "glove": glove, "wall_minutes": round(wall, 1)}


def pretrain(name: str, corpus: str, work: str, minutes: float) -> dict:
    """Pretrain `name` (ULMFiT: stages 1 and 2) within `minutes`; its figures."""
    if name == "cove":
        return pretrain_cove(corpus, work, minutes)
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
    code = ("import torch, shutil, os; from bertforge.checkpoint import read_config; from bertforge.formats import native; "
            "from bertforge.formats.hf import save_pretrained; from bertforge.load import load_tokenizer; "
            f"torch.manual_seed({seed}); config = read_config({pretrained!r}); tok = load_tokenizer({pretrained!r})\n"
            "if config.model_type == 'awd-lstm':\n"
            "    from bertforge.families.awd_lstm.model import AWDLSTMLanguageModel as M\n"
            "elif config.model_type == 'elmo':\n"
            "    from bertforge.families.elmo.model import ELMoLanguageModel as M\n"
            "else:\n    M = None\n"
            "if M is None:\n"
            "    from bertforge.families import encoder; save_pretrained(encoder(config), "
            f"{out!r}, tok)\n"
            "else:\n"
            f"    os.makedirs({out!r}, exist_ok=True); native.write(M(config), {out!r}, tok)\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def random_cove(pretrained: str, out: str, seed: int, keep_vectors: bool) -> None:
    """CoVe's architecture and vocabularies never trained on translation: a fresh MT-LSTM (and decoder)
    over the pretrained GloVe vectors, or (GloVe's own random start) over random vectors of GloVe's
    spread."""
    vectors = "w" if keep_vectors else "torch.randn_like(w) * w.std()"
    code = ("import os, torch; from bertforge import load; from bertforge.formats.hf import write_parts; "
            "from bertforge.families.cove.model import CoveTranslator\n"
            f"loaded = load({pretrained!r}); torch.manual_seed({seed}); fresh = CoveTranslator(loaded.config)\n"
            "w = loaded.model.encoder.vectors.weight\n"
            f"with torch.no_grad(): fresh.encoder.vectors.weight.copy_({vectors})\n"
            f"os.makedirs({out!r}); write_parts(fresh, {out!r}, loaded.tokenizer)\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def random_start(name: str, variant: str, final: str, work: str, seed: int) -> str:
    """The never-pretrained model of a row (made on first use): the same architecture and vocabulary."""
    vectors_too = name == "cove" and variant == "glove"
    out = os.path.join(work, f"{name}-random{'-vectors' if vectors_too else ''}-s{seed}")
    if not os.path.isdir(out):
        if name == "cove":
            random_cove(final, out, seed, keep_vectors=not vectors_too)
        else:
            random_init(final, out, seed)
    return out


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
    parser.add_argument("--pretrain-only", action="store_true",
                        help="pretrain the models and stop: fine-tune them with a later call")
    args = parser.parse_args()
    corpus, work = workspace(args.out)
    subsets(work)
    authors(work)
    questions(work)
    saved = os.path.join(work, args.results)
    results = json.load(open(saved, encoding="utf-8")) if os.path.exists(saved) else {}

    def keep():
        with open(saved, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)

    for name in args.models:
        if f"{name} pretraining" not in results:
            results[f"{name} pretraining"] = pretrain(name, corpus, work, args.minutes)
            keep()
        if args.pretrain_only:
            continue
        final = os.path.join(work, name + "-sst2" if name.startswith("ulmfit") else name, "model")
        for seed in args.seeds:
            for variant, flags, tasks, starts in VARIANTS[name]:
                row = f"{name}/{variant}" if variant else name
                for start in ("pretrained", "random"):
                    for task in tasks:
                        key = f"{row} {start} {task} seed={seed}"
                        if (key in results or start not in args.starts or start not in starts or task not in args.tasks
                                or task in FIRST_SEED_ONLY and seed != args.seeds[0]):
                            continue
                        model = final if start == "pretrained" else random_start(name, variant, final, work, seed)
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
    save_table(os.path.join(work, "table.md"), table)


def finetuned(work: str, row: str, start: str, seed: int, task: str) -> str:
    return os.path.join(work, "finetune", f"{row.replace('/', '-')}-{start}-s{seed}", task)


def path(name: str, work: str) -> str:
    return os.path.join(work, name.removeprefix("WORK/")) if name.startswith("WORK/") else os.path.join(DATA, name)


def held_out(pre: dict) -> str:
    held = pre["held_out"]
    if pre["model_type"] == "cove":
        g = pre["glove"]
        return (f"GloVe: {g['words']:,} words, WordSim {g['wordsim']:.2f}, analogies {g['analogies']:.1f}%; "
                f"translation: validation BLEU {held['bleu']:.1f} (greedy, 200 sentences)")
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


LABELS = {  # row: (what its pretrained start is, what its random start is)
    "bert": ("BERT (bert-tiny, rotary; the small-budget recipe)", "BERT, never pretrained"),
    "ulmfit": ("ULMFiT (awd-lstm-small), the paper's recipe", "ULMFiT's recipe, never pretrained"),
    "ulmfit/flat": ("ULMFiT, every layer at 3e-3", "ULMFiT at 3e-3, never pretrained"),
    "ulmfit-bwd/flat": ("ULMFiT backward, every layer at 3e-3", "ULMFiT backward, never pretrained"),
    "ulmfit-ensemble/flat": ("ULMFiT forward + backward ensemble", "the ensemble, never pretrained"),
    "elmo": ("ELMo (elmo-cpu) + task biLSTM", "a random biLM + task biLSTM"),
    "elmo/taglm": ("TagLM over the ELMo biLM", "TagLM over a random biLM"),
    "elmo/taglm-baseline": ("TagLM's tagger without the LM", "-"),
    "gpt": ("GPT-1 (bert-tiny size, rotary, GPT-2's order)", "GPT-1, never pretrained"),
    "cove": ("CoVe: [GloVe; MT-LSTM] into the BCN", "a fresh MT-LSTM over the same GloVe"),
    "cove/glove": ("GloVe alone into the BCN", "GloVe's words, random vectors"),
}


def summary(results: dict, tasks: list[str]) -> str:
    header = {"sst2": "SST-2 acc", "conll": "CoNLL F1", "questions": "question type acc", "authors": "authors acc"}
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
                speed, steps, loss = f"{pre['tokens_per_s']:,}", f"{pre['steps']:,}", held_out(pre)
            if row.startswith("ulmfit-ensemble"):
                size = f"2 x {size}"
            label = LABELS[row][start == "random"]
            lines.append(f"| {label} | {start} | {size} | {speed} | {steps} | {loss} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
