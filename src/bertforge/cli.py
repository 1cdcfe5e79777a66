"""The `bertforge` command: a thin table of subcommands over the Python API.

Each entry parses its flags and calls one function; everything it does can be done from Python.
"""

from __future__ import annotations

import argparse
import sys

from .errors import BertforgeError


def cmd_tokenizer_train(args) -> None:
    from .tokenizer import Tokenizer

    tokenizer = Tokenizer.train(
        files=args.files, vocab_size=args.vocab_size, min_frequency=args.min_frequency,
        lowercase=not args.cased, strip_accents=args.strip_accents, split_cjk=not args.no_cjk_split,
        limit_alphabet=args.limit_alphabet, show_progress=True,
    )
    tokenizer.save_pretrained(args.out)
    print(f"wrote a {tokenizer.vocab_size}-token WordPiece vocabulary to {args.out}")


def cmd_info(args) -> None:
    from .hf import load_pretrained

    model = load_pretrained(args.model)
    params = sum(p.numel() for p in model.parameters())
    print(f"{args.model}: {model.config.architectures[0]}, {params / 1e6:.1f}M parameters")
    for key, value in model.config.to_dict().items():
        print(f"  {key}: {value}")


def cmd_demo(args) -> None:
    from .demo import run_demo

    run_demo(args.out)


def _bool(text: str) -> bool:
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bertforge", description="BERT end to end.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = commands.add_parser("demo", help="run the built-in end-to-end demo (no arguments needed)")
    demo.add_argument("--out", default="runs/demo", help="where to write the demo's outputs (default: runs/demo)")
    demo.set_defaults(func=cmd_demo)

    info = commands.add_parser("info", help="show the configuration and size of a checkpoint")
    info.add_argument("model", help="an HF BERT checkpoint directory")
    info.set_defaults(func=cmd_info)

    tokenizer = commands.add_parser("tokenizer", help="WordPiece vocabularies")
    tokenizer_commands = tokenizer.add_subparsers(dest="tokenizer_command", required=True, metavar="COMMAND")
    train = tokenizer_commands.add_parser("train", help="learn a WordPiece vocabulary from text files")
    train.add_argument("files", nargs="+", help="UTF-8 text files to learn from")
    train.add_argument("--out", required=True, help="directory to write vocab.txt and tokenizer files to")
    train.add_argument("--vocab-size", type=int, default=30522, help="number of tokens (default: 30522, as BERT)")
    train.add_argument("--min-frequency", type=int, default=2,
                       help="how often a pair must occur to be merged (default: 2)")
    train.add_argument("--cased", action="store_true", help="keep case (default: lowercase, as BERT-uncased)")
    train.add_argument("--strip-accents", type=_bool, default=None,
                       help="true/false; default: strip when lowercasing, as BERT")
    train.add_argument("--no-cjk-split", action="store_true",
                       help="do not put spaces around CJK ideographs (default: split, as BERT)")
    train.add_argument("--limit-alphabet", type=int, default=None,
                       help="keep at most this many distinct characters (default: all)")
    train.set_defaults(func=cmd_tokenizer_train)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except BertforgeError as e:
        print(f"bertforge: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("bertforge: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
