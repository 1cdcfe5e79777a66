"""A run's command line, saved and replayed: `pretrain` and `finetune` write their command and
options to run_config.json, and `--config FILE` reads them back as the command's defaults (options
given on the command line override them), each checked as the command line checks it."""

from __future__ import annotations

import argparse
import json
import os

from .checks import check_options
from .errors import BertforgeError

# Options that say where a run goes on, not what it is: not saved for a replay, nor read from a config.
NOT_REPLAYED = ("config", "resume", "debug", "help")
# Saved absolute, so that a replay finds the same files from any working directory.
PATH_OPTIONS = ("corpus", "out", "tokenizer", "init", "cache_dir", "train", "dev", "model")
REPLAYABLE = ("pretrain", "finetune")
# Options saved under an earlier name: old run_config.json files replay under the new one.
RENAMED = {"min_freq": "min_count"}


def run_arguments(command: str, given: dict) -> dict:
    """The command and every option of a pretrain or finetune run, in the command line's own names
    (argparse's dests), as given: saved in the run's run_config.json, so that `--config` replays it."""
    options = {}
    for name, value in given.items():
        if name in ("command", "func", *NOT_REPLAYED):
            continue
        if name in PATH_OPTIONS and value is not None:
            value = [os.path.abspath(v) for v in value] if isinstance(value, list) else os.path.abspath(value)
        options[name] = value
    return {"command": command, "args": options}


def config_defaults(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """`pretrain` and `finetune` with `--config FILE`: the options saved in FILE (a run's
    run_config.json) become the command's defaults, so that options on the command line override them."""
    command = next((a for a in argv if not a.startswith("-")), None)  # the top level takes no values
    if command not in REPLAYABLE:
        return
    probe = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    probe.add_argument("--config")
    try:
        path = probe.parse_known_args(argv)[0].config
    except argparse.ArgumentError:  # `--config` without a file: the real parse says so
        return
    if path is None:
        return
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    saved = read_run_config(path, command, sub)
    sub.set_defaults(**saved)
    for action in sub._actions:
        if action.dest in saved:
            action.required = False


def read_run_config(path: str, command: str, sub: argparse.ArgumentParser) -> dict:
    """The options saved in `path` (its "command" and "args"), checked as the command line checks
    them: each must be an option of `command`, of the option's type, among its choices, in its range."""
    try:
        with open(path, encoding="utf-8") as f:
            saved = json.load(f)
    except OSError as e:
        raise BertforgeError(f"{path}: cannot be read ({e.strerror or e})") from None
    except ValueError as e:  # not JSON, or not UTF-8
        raise BertforgeError(f"{path}: not a JSON file ({' '.join(str(e).split())})") from None
    if not isinstance(saved, dict) or not isinstance(saved.get("command"), str) or \
            not isinstance(saved.get("args"), dict):
        raise BertforgeError(f'{path}: no "command" and "args" to replay (a run_config.json written by bertforge '
                             f'{command} has them; runs made before they were recorded do not)')
    if saved["command"] != command:
        raise BertforgeError(f"{path}: the settings of a bertforge {saved['command']} run, not {command}: "
                             f"replay it with bertforge {saved['command']} --config")
    actions = {a.dest: a for a in sub._actions if a.dest not in NOT_REPLAYED}
    options = {}
    for name, value in saved["args"].items():
        name = RENAMED.get(name, name)
        if name not in actions:
            raise BertforgeError(f"{path}: unknown option {name!r} for bertforge {command}")
        options[name] = _saved_value(actions[name], value, path)
    try:
        check_options(options, command)
    except BertforgeError as e:
        raise BertforgeError(f"{path}: {e}") from None
    return options


def _saved_value(action: argparse.Action, value, path: str):
    """`value` from a config file for `action`, as the command line would have given it (a float
    option's 3 as 3.0), or a one-line error naming the file and the option."""
    if value is None:
        if action.required:  # --out, --corpus...: the file must give it, or leave it to the command line
            raise BertforgeError(f"{path}: option {action.dest!r} is required, got null")
        return None
    if action.nargs == 0:  # a switch
        if isinstance(value, bool):
            return value
        expected = "true or false"
    else:
        many = action.nargs in ("+", "*")
        items = value if many and isinstance(value, list) and value else [value] if not many else None
        kind = {int: (int,), float: (int, float)}.get(action.type, (str,))
        if items is not None and all(isinstance(v, kind) and not isinstance(v, bool) for v in items) and \
                (action.choices is None or all(v in action.choices for v in items)):
            items = [float(v) for v in items] if action.type is float else items
            return items if many else items[0]
        expected = ("an integer" if action.type is int else "a number" if action.type is float else "text")
        if action.choices is not None:
            expected = f"one of {', '.join(map(str, action.choices))}"
        if many:
            expected = f"a non-empty list, each {expected}"
    raise BertforgeError(f"{path}: option {action.dest!r} must be {expected}, got {value!r}")
