"""The `bertforge` command: a thin table of subcommands over the Python API.

Each subcommand is one module here: `add_command` declares its flags, `run` calls one function;
everything it does can be done from Python. `main` is the one error boundary: every failure is one
line on standard error, exit code 2 for a problem with the input or the machine (a file, a value,
a full disk, memory), 1 for an error bertforge did not foresee (a bug, to report); `--debug` or
BERTFORGE_DEBUG=1 shows the traceback instead. Warnings are one line too.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

from ..checks import check_options
from ..errors import BertforgeError
from ..paths import check_outputs
from ..replay import REPLAYABLE, config_defaults
from . import (demo, embed, evaluate, evaluate_lm, export, fill_mask, finetune, generate, import_allennlp, info,
               predict, pretrain, serve, tokenizer, translation, word_vectors)
from .common import CommandParser, HelpFormatter, resolve_positionals

# In the order `bertforge --help` lists them.
COMMANDS = (demo, info, pretrain, finetune, evaluate, predict, embed, fill_mask, serve, export, import_allennlp,
            generate, evaluate_lm, translation, word_vectors, tokenizer)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bertforge", description="Contextual pretraining end to end: BERT, its family and its ancestors.")
    parser.add_argument("--debug", action="store_true", help="show the Python traceback of an error")
    parser.add_argument("--version", action="version", version=f"bertforge {_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=CommandParser)
    for command in COMMANDS:
        command.add_command(commands)
    for name in REPLAYABLE:
        commands.choices[name].add_argument(
            "--config", metavar="RUN_CONFIG.json",
            help="replay a run: the options saved in its run_config.json become the defaults, and options given "
                 "here override them (--out OTHER to replay it elsewhere)")
    # --debug after the command too; SUPPRESS so that a command's default does not undo one given before it
    for command in _subcommands(parser):
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        command.formatter_class = HelpFormatter
    return parser


def _subcommands(parser: argparse.ArgumentParser):
    """Every subcommand's parser, the nested ones (tokenizer train) included."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command in action.choices.values():
                yield command
                yield from _subcommands(command)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # what the error boundary reads until the parse
    args = argparse.Namespace(debug="--debug" in argv or os.environ.get("BERTFORGE_DEBUG") == "1")
    plain = warnings.formatwarning
    if not args.debug:
        warnings.formatwarning = one_line_warning
    try:
        return _run(argv, args)
    finally:
        warnings.formatwarning = plain


def _run(argv: list[str], args: argparse.Namespace) -> int:
    try:
        parser = build_parser()
        config_defaults(parser, argv)
        if not argv:  # `bertforge` alone: what there is to run
            parser.print_help()
            return 0
        args = parser.parse_args(argv)
        resolve_positionals(args)
        check_options(vars(args), args.command)
        for name in ("model", "init"):  # a run directory stands for the model it wrote
            value = getattr(args, name, None)
            if isinstance(value, list):  # an ensemble
                setattr(args, name, [model_directory(v) for v in value])
            elif value:
                setattr(args, name, model_directory(value))
        hub_datasets(args)  # hf:NAME[:CONFIG][@SPLIT] stands for a local copy of that split
        check_outputs(vars(args))  # no command writes over, or inside, what it reads
        args.func(args)
    except KeyboardInterrupt:
        print("bertforge: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `bertforge predict ... | head`: the reader left; nothing to say
        sys.stderr.close()
        return 0
    except Exception as e:  # the one error boundary: one line, a traceback only with --debug
        if getattr(args, "debug", False) or os.environ.get("BERTFORGE_DEBUG") == "1":
            raise
        message, code = describe(e)
        print(f"bertforge: error: {message}", file=sys.stderr)
        return code
    return 0


def one_line_warning(message, category, filename, lineno, line=None) -> str:
    """A warning as one line, without the file and source line Python's format adds (they name our
    code, not the user's input)."""
    kind = "" if category is UserWarning else f"{category.__name__}: "
    return f"bertforge: warning: {kind}{' '.join(str(message).split())}\n"


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:  # the installed package's, without importing torch as `bertforge.__version__` would
        return version("bertforge")
    except PackageNotFoundError:
        return "(not installed)"


def model_directory(path: str) -> str:
    """`path`, or `path/model` when `path` is the output folder of `pretrain` or `finetune`; where no
    such path exists, a Hugging Face Hub name (`owner/name[@revision]`) stands for its folder in the
    Hub's cache, fetched if need be (hub.py)."""
    from ..hub import model_path

    path = model_path(path)
    if not os.path.exists(os.path.join(path, "config.json")) and os.path.exists(os.path.join(path, "model",
                                                                                             "config.json")):
        return os.path.join(path, "model")
    return path


# The options that read data, and the split an `hf:` value without one reads there.
DATA_OPTIONS = {"train": "train", "dev": "validation", "test": "test", "corpus": "train"}


def hub_datasets(args: argparse.Namespace) -> None:
    """Each Hub dataset given to --train, --dev, --test or --corpus (`hf:NAME[:CONFIG][@SPLIT]`)
    replaced by the local copy the command's reader takes (data/hub_datasets.py: a saved folder for
    a task table, JSON lines for a corpus or parallel text); `datasets` is imported only then."""
    for name, split in DATA_OPTIONS.items():
        value = getattr(args, name, None)
        values = value if isinstance(value, list) else [value]
        if not any(isinstance(v, str) and v.startswith("hf:") for v in values):
            continue
        from ..data.hub_datasets import is_hub_dataset, resolve

        kind = "text" if name == "corpus" else getattr(args, "_hub_kind", "table")  # as the command says
        column = getattr(args, "text_field", None) if kind == "text" else None
        resolved = [resolve(v, kind, split, column) if is_hub_dataset(v) else v for v in values]
        setattr(args, name, resolved if isinstance(value, list) else resolved[0])


def describe(e: Exception) -> tuple[str, int]:
    """One line for any exception, and the exit code: ours as written; a file system error with its
    file, or memory running out (2: the input or the machine); anything else is an error bertforge
    did not foresee (1: a bug), with its type and what to do."""
    message = " ".join(str(e).split())
    if isinstance(e, BertforgeError):
        return str(e), 2
    if isinstance(e, ModuleNotFoundError) and e.name in ("torch", "numpy", "tokenizers", "safetensors", "tqdm"):
        return (f"{e.name} is not installed, and bertforge's commands need it: pip install bertforge brings it "
                "(torch: install the build for your machine first, as the README says)"), 2
    if isinstance(e, OSError):
        return (f"{e.filename}: " if e.filename else "") + (e.strerror or message or type(e).__name__), 2
    if isinstance(e, MemoryError) or type(e).__name__ == "OutOfMemoryError":  # torch's is a RuntimeError
        return f"out of memory ({message or type(e).__name__}): try a smaller --batch-size", 2
    return (f"{type(e).__name__}: {message or 'no message'}. This is a bug in bertforge: please report it, with "
            "the traceback that --debug (or BERTFORGE_DEBUG=1) shows"), 1
