"""`bertforge word-vectors`: GloVe vectors learned from a corpus."""

from __future__ import annotations

from .common import MAX_MINUTES_HELP, HelpFormatter, keywords, renamed


def add_command(commands) -> None:
    p = commands.add_parser("word-vectors", formatter_class=HelpFormatter,
                            help="learn static word vectors (GloVe, Pennington et al. 2014) from a corpus")
    p.add_argument("--corpus", required=True, nargs="+", help="text files, folders or glob patterns")
    p.add_argument("--output", required=True,
                   help="the vectors: GloVe's text format, or word2vec's for a name ending .vec (text) or .bin "
                        "(binary); the run's state goes to OUTPUT.run/")
    renamed(p, "--out", "--output")
    p.add_argument("--dim", type=int, default=300, help="dimensions per vector")
    p.add_argument("--window", type=int, default=10, help="words counted on each side, weighted 1/distance")
    p.add_argument("--min-count", type=int, default=5, help="rarer words get no vector")
    p.add_argument("--max-vocab", type=int, help="keep at most this many words, the most frequent")
    p.add_argument("--cased", action="store_true", help="keep case (the default lowercases)")
    p.add_argument("--subsample", type=float, default=1e-3, metavar="T",
                   help="before counting, keep each occurrence of a word of frequency f above T with probability "
                        "sqrt(T / f), as word2vec does (gensim's default 1e-3); 0 keeps every word, as GloVe's tool")
    p.add_argument("--draws", type=int, default=1,
                   help="subsample the corpus this many times and average the counts (each draw reads it again): "
                        "nearer what subsampling keeps on average than one draw")
    p.add_argument("--x-max", type=float, default=10.0,
                   help="counts above this weigh 1 in the objective (GloVe's demo: 10; the paper's 100 is for "
                        "billions of words)")
    p.add_argument("--alpha", type=float, default=0.75, help="exponent of the weighting below x_max")
    p.add_argument("--lr", type=float, default=0.2, help="AdaGrad's learning rate")
    p.add_argument("--epochs", type=int, default=15, help="passes over the co-occurrence counts")
    p.add_argument("--batch-size", type=int, default=65536, help="co-occurrence entries per update")
    p.add_argument("--memory-mb", type=int, default=1024,
                   help="memory for counting (beyond it, sorted runs are spilled to OUT.run/) and for shuffling")
    p.add_argument("--max-minutes", type=float, help=MAX_MINUTES_HELP + " (counting included); the vectors "
                   "are written when it ends")
    p.add_argument("--layout", choices=["auto", "lines", "prose"], default="auto",
                   help="lines: one sentence per line; prose: paragraphs (the window never crosses either)")
    p.add_argument("--vectors", choices=["sum", "word"], default="sum",
                   help="what is written: sum, word + context vectors (GloVe's -model 2: the better for word "
                        "similarity); word, word vectors alone (-model 1: the better for analogies); --resume may "
                        "change it")
    p.add_argument("--remove-directions", type=int, default=0, metavar="D",
                   help="take the written vectors' mean away, then their D top principal directions (Mu & "
                        "Viswanath's all-but-the-top; their rule: D = dim / 100); --resume may change it")
    p.add_argument("--seed", type=int, default=0, help="seed of the initialisation and the shuffling")
    p.add_argument("--resume", action="store_true", help="continue the run of OUT from OUT.run/")
    p.set_defaults(func=run)


def run(args) -> None:
    from ..word_vectors import word_vectors

    summary = word_vectors(**keywords(args))
    print(f"{summary['words']:,} words, {summary['entries']:,} co-occurrence entries from "
          f"{summary['corpus_words']:,} words of text; {summary['epochs']} epochs "
          f"({summary['status']}), cost {summary['cost']}, {summary['seconds']} s; vectors in {args.output}")
    if summary["status"] != "done":
        print(f"--resume continues the run (its state is in {args.output}.run/)")
