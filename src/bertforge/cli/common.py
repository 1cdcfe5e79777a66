"""What several subcommands share: the help formatter, option tables, the names `--help` shows
without importing torch, and the device option."""

from __future__ import annotations

import argparse

from ..training.tracking import REPORTERS

# Named here so that `--help` needs no torch import (a test checks they are tokenizer.KINDS).
VOCAB_KINDS = ["wordpiece", "byte-bpe", "bpe"]
# The trackers fed metrics.jsonl's records; with --config, the command line's list replaces the file's.
REPORT_TO = dict(nargs="+", choices=REPORTERS, metavar="TRACKER",
                 help="also send every record of metrics.jsonl to: csv (OUT/metrics.csv), tensorboard "
                      "(OUT/tensorboard), wandb (Weights & Biases; its WANDB_* variables apply); several may "
                      "be named (default: none)")
# --max-minutes, the same budget in every command that trains.
MAX_MINUTES_HELP = ("the whole command's wall-clock budget in minutes, from its start (reading and preparing the "
                    "data count) to its last training step; the final evaluation and save follow")
# --precision of the commands that only run a model (evaluate, predict, embed).
INFERENCE_PRECISION = dict(
    choices=["fp32", "bf16", "int8"], default="fp32",
    help="bf16: the matrix products in bf16 (fast where the CPU or GPU has it; outputs within ~1e-2 of fp32's); "
         "int8: the linear layers quantized, CPU only (docs/speed.md has its speed and accuracy)")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Each flag's default after its help, unless it has none (None, a switch that is off) or the
    help already says what it is."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.default in (None, False, argparse.SUPPRESS) or "default" in text or action.required:
            return text
        return super()._get_help_string(action)


def add_device(parser: argparse.ArgumentParser) -> None:
    """--device, last among the options of a command that runs a model."""
    parser.add_argument("--device", default="auto",
                        help="auto (a GPU when there is one, else the CPU; the CPU for --precision int8), "
                             "cpu, cuda or cuda:N")


def resolve_device(name: str, precision: str | None = None):
    from ..training.device import resolve_device as resolve  # torch is imported only by commands that use it

    return resolve(name, precision)


class _Renamed(argparse.Action):
    """An old spelling of a flag: works as the new one, with a one-line note."""

    def __init__(self, option_strings, dest, new: str, **kwargs):
        super().__init__(option_strings, dest, **kwargs)
        self.new = new

    def __call__(self, parser, namespace, values, option_string=None):
        import sys

        print(f"bertforge: note: {option_string} is an old spelling: use {self.new} (the old one will go)",
              file=sys.stderr)
        setattr(namespace, self.dest, values)


def renamed(parser: argparse.ArgumentParser, old: str, new: str) -> None:
    """Accept `old` (hidden from --help) for the already declared flag `new`."""
    action = next(a for a in parser._actions if new in a.option_strings)
    parser.add_argument(old, dest=action.dest, type=action.type, choices=action.choices, nargs=action.nargs,
                        metavar=action.metavar, action=_Renamed, new=new, default=argparse.SUPPRESS,
                        help=argparse.SUPPRESS)


def add_path(parser: argparse.ArgumentParser, flag: str, help: str, required: bool = True,
             positional: bool = True, metavar: str | None = None) -> None:
    """A path flag (`--model`, `--out`), with the positional argument of earlier versions kept as an alias
    (hidden from --help; `resolve_positionals` gives its value to the flag after the parse)."""
    dest = flag.lstrip("-").replace("-", "_")
    parser.add_argument(flag, dest=dest, metavar=metavar or dest.upper(),
                        help=help + ("" if required else " (optional)"))
    if positional:
        parser.add_argument(f"{dest}_positional", nargs="?", help=argparse.SUPPRESS)
    aliases = parser.get_default("_path_flags") or {}
    parser.set_defaults(_path_flags={**aliases, dest: (flag, required, positional)}, _parser=parser)


class CommandParser(argparse.ArgumentParser):
    """A subcommand's parser. Where a positional alias (`add_path`) sits beside other positionals,
    options may come between them (`import-allennlp OPTIONS WEIGHTS --vocab V OUT`), as when every
    positional was required: argparse's intermixed parse, or the optional alias would be taken, empty,
    with the positionals before the first option."""

    def parse_known_args(self, args=None, namespace=None):
        if getattr(self, "_intermixing", False) or not self.get_default("_path_flags"):
            return super().parse_known_args(args, namespace)
        self._intermixing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixing = False


def resolve_positionals(args: argparse.Namespace) -> None:
    """Give the positional aliases' values to their flags: the command line's positional values fill,
    in the order the positionals were declared, each alias whose flag was not given and each of the
    command's own positionals (a list-valued one takes what the singles after it leave)."""
    flags, parser = getattr(args, "_path_flags", None), getattr(args, "_parser", None)
    for name in ("_path_flags", "_parser"):
        if hasattr(args, name):
            delattr(args, name)
    if not flags:
        return
    positionals = [a for a in parser._actions if not a.option_strings and a.nargs != argparse.PARSER]
    values = []
    for action in positionals:
        value = getattr(args, action.dest)
        values += value if isinstance(value, list) else [] if value is None else [value]
    for index, action in enumerate(positionals):
        alias = action.dest.removesuffix("_positional")
        if action.dest.endswith("_positional") and alias in flags:
            delattr(args, action.dest)
            if getattr(args, alias) is None and values:
                setattr(args, alias, values.pop(0))
        elif action.nargs in ("+", "*"):
            singles = sum(1 for a in positionals[index + 1:] if not a.dest.endswith("_positional"))
            taken = len(values) - singles
            setattr(args, action.dest, values[:taken])
            values = values[taken:]
        elif values:
            setattr(args, action.dest, values.pop(0))
    if values:
        parser.error(f"unrecognized arguments: {' '.join(values)}")
    missing = [flag for dest, (flag, required, _) in flags.items() if required and getattr(args, dest) is None]
    missing += [a.dest.upper() for a in positionals if not a.dest.endswith("_positional")
                and a.nargs != "?" and getattr(args, a.dest) in (None, [])]
    if missing:
        parser.error(f"the following arguments are required: {', '.join(missing)}")


def keywords(args: argparse.Namespace) -> dict:
    """The parsed options of a command as the keywords of its Python function (`pretrain`, `finetune`,
    `train_translation`, `word_vectors`), which takes the options under their dests."""
    return {name: value for name, value in vars(args).items()
            if name not in ("command", "func", "debug", "config") and not name.startswith("_")}  # _: the CLI's own
