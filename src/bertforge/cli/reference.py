"""docs/cli-reference.md: every subcommand's `--help`, generated from the parser itself, so the page
cannot drift from the flags (tests/test_docs.py compares it with this output).

    python -m bertforge.cli.reference > docs/cli-reference.md
"""

from __future__ import annotations

import argparse
import os

WIDTH = "100"  # argparse wraps to the terminal: a fixed width makes the page the same on any machine


def reference() -> str:
    from . import _subcommands, build_parser

    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        parser = build_parser()
        parts = ["# Every command and flag", "",
                 "Generated from the parser by `python -m bertforge.cli.reference > docs/cli-reference.md`; a test",
                 "fails when it is not current. The commands in use: [command-line.md](command-line.md).", "",
                 "```text", parser.format_help().rstrip(), "```", ""]
        for command in _subcommands(parser):
            if any(isinstance(a, argparse._SubParsersAction) for a in command._actions):
                continue  # a group of commands (tokenizer): its members follow
            parts += [f"## {command.prog}", "", "```text", command.format_help().rstrip(), "```", ""]
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before
    return "\n".join(parts)


if __name__ == "__main__":
    print(reference())
