"""Static word vectors on the Gutenberg corpus: bertforge's GloVe against what a user would run instead.

Each side runs in its own process, one after the other, on the same words (the corpus read and split
by bertforge's reader: Gutenberg boilerplate removed, paragraphs, lowercased words):
- ours: `bertforge word-vectors` (GloVe: window 10, min count 5, frequent words subsampled at 1e-3,
  x_max 10, AdaGrad 0.2) with --dim, --epochs, --subsample, --draws and --remove-directions, counting
  included in its time, scored twice: the vectors it writes by default (word + context) and the same
  fit's word vectors alone (`--vectors word`, written by resuming a copy of the finished run);
- gensim's Word2Vec with its defaults (CBOW, window 5, min count 5, negative 5, 5 epochs, 3 workers)
  at --dim, on the same word lists held in memory (its time is its training; reading and
  splitting the corpus, which ours includes, is timed apart);
- gensim's Word2Vec at its best for these scores (`--no-best` leaves it out): skip-gram, GloVe's
  window of 10, negative 10, 10 epochs, one worker per core (Mikolov et al. 2013 and
  gensim's docs: skip-gram is the better of the two on semantic analogies and for rare words).
Then both are scored the same way, by `bertforge.vector_scores` (equal to gensim's own scoring, tested):
WordSim-353 (Spearman) and the analogy questions (3CosAdd among the 30,000 most frequent words),
both from gensim's test data. Peak resident memory of each process.

The official GloVe tool is not run here (it is C, built from source); its published speed is quoted
beside the table: Pennington et al. (2014), section 4.6.

    python benchmarks/word_vectors.py --out runs/word-vectors
    python benchmarks/word_vectors.py --dim 100 --epochs 10 --out runs/word-vectors
    python benchmarks/word_vectors.py --subsample 0 --no-best --out runs/word-vectors-all-words
    python benchmarks/word_vectors.py --subsample 2e-4 --draws 4 --epochs 4 --no-best --out runs/wv-draws
    python benchmarks/word_vectors.py --subsample 2e-4 --draws 4 --epochs 4 --remove-directions 1 --no-best \
        --out runs/wv-abtt-s0
    python benchmarks/word_vectors.py --quick --out runs/word-vectors-quick

Writes OUT/word_vectors.json and OUT/word_vectors.md headed by where it came from. Run it alone on
a quiet machine. Needs the shared data (../shared/data/corpus/gutenberg) and gensim (the test extra).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time

from harness import DATA, peak_rss_mb, provenance, provenance_line

CORPUS = os.path.join(DATA, "corpus", "gutenberg")
PUBLISHED = ("The official C tool, as published (Pennington et al. 2014, section 4.6): counting a 6-billion-word "
             "corpus (window 10, 400,000 words) took about 85 minutes on one thread of a 2.1 GHz Xeon E5-2658 "
             "(about 1.2 M words/s), and one training iteration of 300-d vectors 14 minutes on 32 cores.")


def corpus_files(quick: bool) -> list[str]:
    files = sorted(os.path.join(CORPUS, f) for f in os.listdir(CORPUS))
    return files[:2] if quick else files


def run_ours(out: str, dim: int, epochs: int, subsample: float, quick: bool, seed: int = 0, draws: int = 1,
             remove: int = 0) -> dict:
    from bertforge.word_vectors import GloveOptions, train_word_vectors

    path, word_path = os.path.join(out, "glove.txt"), os.path.join(out, "glove-word.txt")
    options = GloveOptions(dim=dim, epochs=epochs, subsample=subsample, seed=seed, draws=draws,
                           remove_directions=remove)
    start = time.perf_counter()
    summary = train_word_vectors(corpus_files(quick), path, options, progress=False)
    seconds = round(time.perf_counter() - start, 1)
    # the same fit's word vectors alone (`--vectors word`): a copy of the finished run resumed, nothing to train
    shutil.rmtree(word_path + ".run", ignore_errors=True)
    shutil.copytree(path + ".run", word_path + ".run")
    train_word_vectors(corpus_files(quick), word_path, dataclasses.replace(options, vectors="word"), resume=True,
                       progress=False)
    return {"seconds": seconds, "vectors": path, "word_vectors": word_path, "summary": summary,
            "peak_mb": round(peak_rss_mb()), "subsample": subsample, "draws": draws, "seed": seed,
            "remove_directions": remove}


GENSIM_BEST = {"sg": 1, "window": 10, "negative": 10, "epochs": 10}  # and a worker per core


def run_gensim(out: str, dim: int, quick: bool, best: bool = False, seed: int = 0) -> dict:
    """gensim's Word2Vec with its defaults, or at its best (GENSIM_BEST)."""
    from gensim.models import Word2Vec

    from bertforge.word_vectors import _units

    start = time.perf_counter()
    sentences = [words for words in _units(corpus_files(quick), lowercase=True, layout="auto") if words]
    read = time.perf_counter() - start
    start = time.perf_counter()
    settings = {**GENSIM_BEST, "workers": os.cpu_count()} if best else {}
    model = Word2Vec(sentences, vector_size=dim, seed=seed + 1, **settings)  # else its defaults (seed 1 is gensim's)
    seconds = time.perf_counter() - start
    path = os.path.join(out, "word2vec-best.vec" if best else "word2vec.vec")
    model.wv.save_word2vec_format(path)
    return {"seconds": round(seconds, 1), "read_seconds": round(read, 1), "vectors": path,
            "words": len(model.wv), "peak_mb": round(peak_rss_mb()),
            "settings": {k: settings[k] for k in ("epochs", "workers")} if best else {}}


def scores(path: str) -> dict:
    from gensim.test.utils import datapath

    from bertforge import vector_scores
    from bertforge.formats.word_vectors import read_vectors

    words, vectors = read_vectors(path)
    similarity = vector_scores.word_similarity(words, vectors, vector_scores.read_pairs(datapath("wordsim353.tsv")))
    analogy = vector_scores.analogies(words, vectors, vector_scores.read_questions(datapath("questions-words.txt")))
    semantic = [s for name, s in analogy["sections"].items() if not name.startswith("gram")]
    syntactic = [s for name, s in analogy["sections"].items() if name.startswith("gram")]

    def share(parts):
        answered = sum(p["answered"] for p in parts)
        return round(sum(p["correct"] for p in parts) / answered, 4) if answered else None

    return {"wordsim353": round(similarity["spearman"], 4), "wordsim_pairs": similarity["pairs"],
            "analogy": round(analogy["accuracy"], 4), "semantic": share(semantic), "syntactic": share(syntactic),
            "answered": analogy["answered"], "skipped": analogy["skipped"]}


def child(kind: str, args: list[str]) -> dict:
    done = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", kind, *args], check=True,
                          stdout=subprocess.PIPE, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def table(report: dict) -> str:
    ours = report["ours"]
    removed = ours.get("remove_directions", 0)
    recipe = (f", {ours['draws']} draws averaged" if ours.get("draws", 1) > 1 else "") + \
        (f", mean and top {removed} direction{'s' * (removed > 1)} removed" if removed else "")
    names = {"ours": f"bertforge GloVe (subsampling {ours['subsample']:g}{recipe}): counting "
                     f"({ours['summary']['count_seconds']} s) + "
                     f"{ours['summary']['epochs']} epochs ({ours['summary']['status']})",
             "gensim": "gensim Word2Vec, its defaults: training (+ {} s reading the corpus)",
             "gensim-best": "gensim Word2Vec at its best (skip-gram, window 10, negative 10, {epochs} epochs, "
                            "{workers} workers): training (+ {} s reading)"}
    rows = ["| | time | peak MB | words | WordSim-353 (Spearman) | analogies: all / semantic / syntactic |",
            "|---|---|---|---|---|---|"]

    def row(name, seconds, peak, words, s):
        rows.append(f"| {name} | {seconds} | {peak} | {words:,} | {s['wordsim353']:.3f} ({s['wordsim_pairs']} pairs) "
                    f"| {s['analogy']:.1%} / {s['semantic']:.1%} / {s['syntactic']:.1%} ({s['answered']:,} answered) |")

    for side in [k for k in names if k in report]:
        r = report[side]
        words = r["summary"]["words"] if side == "ours" else r["words"]
        name = names[side] if side == "ours" else names[side].format(r["read_seconds"], **r.get("settings", {}))
        row(f"{name}: word + context vectors (the default)" if side == "ours" else name, f"{r['seconds']} s",
            f"{r['peak_mb']:,}", words, r["scores"])
        if side == "ours" and "word_scores" in r:
            row("the same fit, its word vectors alone (`--vectors word`)", "-", "-", words, r["word_scores"])
    return "\n".join(rows)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--dim", type=int, default=100, help="dimensions of both sides' vectors")
    parser.add_argument("--epochs", type=int, default=8,
                        help="GloVe's passes over the counts (8: counting and fit inside 2 minutes on 2 cores)")
    parser.add_argument("--subsample", type=float, default=1e-3, help="GloVe's --subsample (0: every word)")
    parser.add_argument("--draws", type=int, default=1, help="GloVe's --draws (subsampling's draws averaged)")
    parser.add_argument("--remove-directions", type=int, default=0,
                        help="GloVe's --remove-directions (all-but-the-top)")
    parser.add_argument("--seed", type=int, default=0, help="ours' seed; gensim's is this + 1 (its default 1 at 0)")
    parser.add_argument("--out", default="runs/word-vectors")
    parser.add_argument("--quick", action="store_true", help="two books, 2 epochs: checks the script")
    parser.add_argument("--no-best", dest="best", action="store_false", help="leave out gensim at its best")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.child:
        kind, out = args.child[0], args.child[1]
        result = {"ours": lambda: run_ours(out, args.dim, args.epochs, args.subsample, args.quick, args.seed,
                                           args.draws, args.remove_directions),
                  "gensim": lambda: run_gensim(out, args.dim, args.quick, seed=args.seed),
                  "gensim-best": lambda: run_gensim(out, args.dim, args.quick, best=True, seed=args.seed),
                  "scores": lambda: scores(out)}[kind]()
        print(json.dumps(result))
        return
    if args.quick:
        args.epochs = 2
    os.makedirs(args.out, exist_ok=True)
    flags = ["--dim", str(args.dim), "--epochs", str(args.epochs), "--subsample", str(args.subsample),
             "--draws", str(args.draws), "--remove-directions", str(args.remove_directions),
             "--seed", str(args.seed)] + \
        (["--quick"] if args.quick else [])
    shutil.rmtree(os.path.join(args.out, "glove.txt.run"), ignore_errors=True)  # a fresh count every time
    sides = ["ours", "gensim"] + (["gensim-best"] if args.best else [])
    report = {side: child(side, [args.out, *flags]) for side in sides}
    for side in sides:
        report[side]["scores"] = child("scores", [report[side]["vectors"]])
    report["ours"]["word_scores"] = child("scores", [report["ours"]["word_vectors"]])
    origin = provenance(sys.argv if argv is None else [sys.argv[0], *argv])
    report["provenance"] = origin
    with open(os.path.join(args.out, "word_vectors.json"), "w") as f:
        json.dump(report, f, indent=1)
    markdown = f"{provenance_line(origin)}\n\n{table(report)}\n\n{PUBLISHED}\n"
    with open(os.path.join(args.out, "word_vectors.md"), "w") as f:
        f.write(markdown)
    print(markdown)


if __name__ == "__main__":
    main()
