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
                        help="auto (a GPU when there is one, else the CPU), cpu, cuda or cuda:N")


def resolve_device(name: str):
    from ..training.device import resolve_device as resolve  # torch is imported only by commands that use it

    return resolve(name)
