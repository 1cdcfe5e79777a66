"""`bertforge tokenizer train`: a vocabulary learned from text files."""

from __future__ import annotations

import argparse
import os

from .common import VOCAB_KINDS, renamed


def add_command(commands) -> None:
    tokenizer = commands.add_parser("tokenizer", help="learn a sub-word vocabulary from text (tokenizer train)")
    tokenizer_commands = tokenizer.add_subparsers(dest="tokenizer_command", required=True, metavar="COMMAND")
    train = tokenizer_commands.add_parser("train", help="learn a sub-word vocabulary from text files, as pretrain "
                                          "reads its corpus: WordPiece (the default), byte-level BPE or BPE (--kind); "
                                          "writes tokenizer.json, its config and, for WordPiece, vocab.txt to --out")
    train.add_argument("files", nargs="+", help="the text to learn from: .txt or .jsonl files (and their .gz), folders "
                       "searched for them, or glob patterns, read as pretrain reads its corpus")
    train.add_argument("--out", required=True, help="directory to write vocab.txt and tokenizer files to")
    train.add_argument("--vocab-size", type=int, default=30522, help="number of tokens (default: 30522, as BERT)")
    train.add_argument("--min-count", type=int, default=2,
                       help="how often a pair must occur to be merged (default: 2)")
    renamed(train, "--min-frequency", "--min-count")
    train.add_argument("--cased", action="store_true", help="keep case (default: lowercase, as BERT-uncased)")
    train.add_argument("--strip-accents", type=_bool, default=None,
                       help="true/false; default: strip when lowercasing, as BERT")
    train.add_argument("--accents", choices=["latin", "all"], default="latin",
                       help="where stripping takes accents off: latin (Latin, Greek and Cyrillic letters only, the "
                            "text composed again, so that Korean syllables, kana and Indic vowel signs stay whole) "
                            "or all (every combining mark, as BERT's own vocabularies were learned)")
    train.add_argument("--no-cjk-split", action="store_true",
                       help="do not put spaces around CJK ideographs (default: split, as BERT)")
    train.add_argument("--limit-alphabet", type=int, default=None,
                       help="keep at most this many distinct characters (default: all)")
    train.add_argument("--kind", choices=VOCAB_KINDS, default="wordpiece",
                       help="wordpiece (BERT's, the default), byte-bpe (RoBERTa's; case kept unless lowercased), "
                            "bpe (GPT-1's, marking word ends with </w>)")
    train.set_defaults(func=run)


def run(args) -> None:
    from ..data.corpus import find_files
    from ..report import header, say
    from ..data.tokenizer import Tokenizer

    files = find_files(args.files)  # every file there, before the header (their text is checked as it is read)
    size = sum(os.path.getsize(f) for f in files)
    packed = " (gzip-compressed size)" if any(f.endswith(".gz") for f in files) else ""
    vocabulary = (f"vocabulary: {args.vocab_size:,} tokens, {args.kind}, {'cased' if args.cased else 'lowercased'}, "
                  f"min frequency {args.min_count}")
    say(header(data=f"{len(files):,} file(s), {size / 1e6:,.1f} MB{packed}", output=args.out, extra=(vocabulary,)))
    tokenizer = Tokenizer.train(
        files=files, vocab_size=args.vocab_size, min_frequency=args.min_count,
        lowercase=not args.cased, strip_accents=args.strip_accents, accents=args.accents, split_cjk=not args.no_cjk_split,
        limit_alphabet=args.limit_alphabet, show_progress=True, kind=args.kind,
    )
    tokenizer.save_pretrained(args.out)
    kind = {"wordpiece": "WordPiece", "byte-bpe": "byte-level BPE", "bpe": "BPE (</w>)"}[args.kind]
    print(f"wrote a {tokenizer.vocab_size}-token {kind} vocabulary to {args.out}")


def _bool(text: str) -> bool:
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
