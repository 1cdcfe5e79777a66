"""Every block of the README and the docs pages runs, scaled down, so that the docs stay true.

The pages are read in PAGES's order, as one long document. Their fenced `bash` blocks (continuation
lines joined, comments dropped) run in order in a scratch folder laid out as the docs assume
(docs_data.py): tiny made-up data at the paths they name (`corpus/`, `data/glue/SST-2/train.tsv`,
`data/multi30k/...`, ...), so that nothing here needs the network or the real shared data. `bertforge` lines run
in-process through the CLI with their budgets scaled down (pretraining a few steps of the tiny
preset of its family, fine-tuning a few examples for one epoch); a few shell helpers (`cut`,
`printf`, `echo` into `bertforge`) run in bash; `torchrun` runs its two processes for real (gloo on
the CPU); `bertforge serve` starts the service on a free port and the `curl` lines after it ask that
one. A command that needs the output of one shown later (the command summary names runs made in
later pages) is tried again after the others; PREPARE makes what a command's input stands for (a
published ELMo). The `python` blocks run after the commands, each in a fresh interpreter in the same
folder. The benchmark commands quoted anywhere (`python benchmarks/...`, in a block or inline) are
parsed by the script's own argument parser. What cannot run here is listed in SKIPPED with the
reason, and a command that is neither run nor listed fails the test, so a new block cannot go
unchecked; a download (`curl` or `wget` of an address off this machine: docs/data.md's) is not run,
and docs_data.py lays out made-up files where it would put them (`data/...`). Relative links must
resolve (to a heading, when they name one) and every fence must name its language.
"""

import fnmatch
import glob
import io
import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from docs_data import PAGES, ROOT, lay_out, published_elmo, slug

from bertforge.cli import main

SHELL = ("bash", "sh", "shell", "console")

# Exact commands (as shlex reads them, comments dropped) that are not run, and why.
SKIPPED = {
    "make demo": "builds .venv/ and runs the 3-minute demo; tests/test_cli.py runs `bertforge demo` scaled down",
    "make test": "builds .venv/ and runs the whole suite, this test included",
    "bertforge demo": "3 minutes on the 37 plays; tests/test_cli.py::test_demo_runs_end_to_end runs it for 0.15",
    "pip install -e .[test]": "installs from the network",
    "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu": "installs from the network",
    "python -m build --wheel": "needs the build package; tests/test_install.py builds the wheel with pip and installs it",
    "pip install dist/bertforge-0.1.0-py3-none-any.whl[serve,translation,hub]":
        "installs its extras from the network; tests/test_install.py installs the wheel into a fresh venv",
    "pip install -e .[serve,onnx]": "installs from the network",
    "torchrun --nnodes=2 --nproc_per_node=8 --rdzv-id=job1 --rdzv-backend=c10d --rdzv-endpoint=HOST:29400 -m "
    "bertforge pretrain --corpus /shared/corpus --out /shared/runs/big --cache-dir /shared/cache --max-minutes 600":
        "needs a second machine; the two-process torchrun line runs, and tests/test_distributed.py checks the ranks",
    **{f"bertforge {command}": "reads from the Hugging Face Hub; tests/test_hub_datasets.py runs hf: names on a local "
       "dataset, offline" for command in (
        "finetune --task sst2 --train hf:nyu-mll/glue:sst2 --dev hf:nyu-mll/glue:sst2 --model runs/mine/model --out "
        "runs/sst2-hub",
        "pretrain --corpus hf:wikimedia/wikipedia:20231101.simple --out runs/wiki --max-minutes 60",
        "train-translation --source-lang de --target-lang en --train hf:wmt/wmt16:de-en@train[:200000] --dev "
        "hf:wmt/wmt16:de-en --out runs/wmt-de-en --max-minutes 60")},
    **{f"bertforge {command}": "reads a model from the Hugging Face Hub; tests/test_opus_mt.py runs a Hub name "
       "(an OPUS-MT model built offline, in a Hub cache laid out by hand) through translate, train-translation "
       "--init, info and the service" for command in (
        "translate --model Helsinki-NLP/opus-mt-en-de --input data/multi30k/test_2016_flickr.en --output "
        "runs/opus.de --reference data/multi30k/test_2016_flickr.de --beam 4",
        "train-translation --init Helsinki-NLP/opus-mt-en-de --source-lang en --target-lang de --train "
        "data/multi30k/train --dev data/multi30k/val --out runs/opus-en-de --max-minutes 30",
        "serve --model Helsinki-NLP/opus-mt-en-de --port 8000",
        "export --model Helsinki-NLP/opus-mt-en-de --out runs/opus-mt-onnx")},
    "mkdir -p ../shared && ln -s $PWD/data ../shared/data": "links data/ for the benchmark scripts, which this test "
                                                            "only parses",
}
# Python blocks (by their first line) that are not run, and why.
HUB = "downloads from the Hugging Face Hub; docs_data.py lays out made-up files at the paths it writes"
SKIPPED_PYTHON: dict[str, str] = {"# MRPC in GLUE's layout, from the Hub's copy of GLUE": HUB,
                                  "# CoNLL-2003 as its 4-column files (word POS chunk NER), from a copy on the "
                                  "Hugging Face Hub": HUB}
SHELL_TOOLS = ("cut", "printf", "echo")  # shell lines run in bash (echo ... | bertforge: bertforge in-process)
OPERATORS = ("|", ">", ">>", "<", "&&", ";")

# The tiny preset of each objective's family.
TINY = {"awd-lstm": "awd-lstm-tiny", "elmo": "elmo-tiny"}

# What a command needs made just before it runs (from the output of commands before it).
PREPARE = {"bertforge import-allennlp options.json weights.hdf5 runs/elmo-in": published_elmo}


def blocks(text: str) -> list[tuple[str, int, list[str]]]:
    """(language, line number of the opening fence, lines) of each fenced block of a page."""
    found, current = [], None
    for number, line in enumerate(text.split("\n"), start=1):
        stripped = line.strip()
        if not stripped.startswith("```"):
            if current:
                current[2].append(line)
        elif current is None:
            current = (stripped[3:].strip(), number, [])
        else:
            found.append(current)
            current = None
    assert current is None, f"line {current[1]}: a fence that is never closed"
    return found


def split_line(line: str) -> list[str]:
    """A command line as bash splits it (quotes removed, comments dropped; pipes and redirections
    are words of their own)."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    return list(lexer)


def shell_commands(text: str) -> list[tuple[int, list[str]]]:
    """(line number, words) for each command line of a page's fenced shell blocks."""
    commands = []
    for language, fence, lines in blocks(text):
        if language not in SHELL:
            continue
        pending, start = "", 0
        for offset, line in enumerate(lines, start=1):
            stripped = line.strip()
            if not stripped:
                continue
            if not pending:
                start = fence + offset
            pending += stripped
            if pending.endswith("\\"):
                pending = pending[:-1] + " "
                continue
            if words := split_line(pending):
                commands.append((start, words))
            pending = ""
    return commands


def python_blocks(text: str) -> list[tuple[int, str]]:
    return [(fence, textwrap.dedent("\n".join(lines))) for language, fence, lines in blocks(text)
            if language == "python"]


def quoted_benchmarks(text: str) -> list[tuple[int, list[str]]]:
    """(line number, words) of each benchmark command quoted inline (`python benchmarks/...`)."""
    return [(number, split_line(m.group(1))) for number, line in enumerate(text.split("\n"), start=1)
            for m in re.finditer(r"`(python benchmarks/[^`]+)`", line)]


def page_commands() -> list[tuple[str, list[str], str]]:
    """(where, words, key) of every command of every page, in reading order."""
    return [(f"{page}, line {n}", words, " ".join(words)) for page in PAGES
            for n, words in shell_commands((ROOT / page).read_text())]


def bash(words: list[str]) -> str:
    """Words as a bash command line again (pipes and redirections bare, the rest quoted)."""
    return " ".join(w if w in OPERATORS else shlex.quote(w) for w in words)


def option(argv: list[str], name: str, value: str | None) -> list[str]:
    """`argv` with `name value` set (or `name` alone when value is None), in place of any given."""
    if name in argv:
        i = argv.index(name)
        argv = argv[:i] + argv[i + (1 if value is None else 2):]
    return argv + ([name] if value is None else [name, value])


def scaled(argv: list[str]) -> list[str]:
    """A README command made small: a few steps of a tiny model, a few examples for one epoch."""
    command = argv[0]
    if command == "pretrain":
        objective = argv[argv.index("--objective") + 1] if "--objective" in argv else "bert"
        if "--max-minutes" in argv:
            i = argv.index("--max-minutes")
            argv = argv[:i] + argv[i + 2:]
        argv = option(argv, "--steps", "6" if "--resume" in argv else "3")
        if "--init" not in argv:
            argv = option(argv, "--preset", TINY.get(objective, "bert-tiny"))
        argv = option(argv, "--batch-size", "4")
        argv = option(argv, "--quiet", None)
    elif command == "finetune":
        argv = option(argv, "--max-train-samples", "16")
        argv = option(argv, "--max-eval-samples", "8")
        argv = option(argv, "--epochs", "1")
        argv = option(argv, "--batch-size", "4")
        argv = option(argv, "--quiet", None)
    elif command == "generate":
        argv = option(argv, "--max-new-tokens", "5")
    elif command == "train-translation":
        if "--max-minutes" in argv:
            i = argv.index("--max-minutes")
            argv = argv[:i] + argv[i + 2:]
        tiny = "cove-tiny" if "lstm" in argv else "mt-tiny"
        for flag, value in (("--steps", "4"), ("--preset", tiny), ("--vocab-size", "200"),
                            ("--eval-every", "4"), ("--average", "2"), ("--bleu-sentences", "4")):
            argv = option(argv, flag, value)
    elif command == "word-vectors":
        for flag, value in (("--dim", "8"), ("--epochs", "2"), ("--min-count", "1")):
            argv = option(argv, flag, value)
    elif command == "translate":
        argv = option(argv, "--max-len-b", "4")
    return argv


def expand(argv: list[str], env: dict, cwd: Path) -> list[str]:
    """Variables and globs as bash would expand them."""
    out = []
    for word in argv:
        word = re.sub(r"\$(\w+)|\$\{(\w+)\}", lambda m: env.get(m.group(1) or m.group(2), ""), word)
        matches = sorted(glob.glob(word, root_dir=cwd)) if any(c in word for c in "*?") else []
        out += matches or [word]
    return out


def value_of(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def parsed(argv: list[str]):
    """`argv` as the command line reads it (a positional model or output given to its flag)."""
    from bertforge.cli import build_parser
    from bertforge.cli.common import resolve_positionals

    args = build_parser().parse_args(argv)
    resolve_positionals(args)
    return args


def saved_model(directory: Path) -> dict:
    config = json.loads((directory / "config.json").read_text())
    assert config.get("model_type"), f"{directory / 'config.json'} names no model type"
    return config


def check_output(argv: list[str], out: str, work: Path) -> None:
    """Beyond its exit code, one thing each kind of command must have done: the file it writes is
    there and reads back, or what it prints says what it should. `argv` as run (scaled down)."""
    command, lines = argv[0], out.strip().splitlines()
    assert lines or command in ("embed", "predict", "translate") and "--output" in argv or command == "translate", \
        "it printed nothing"
    if command in ("pretrain", "finetune"):
        run = work / value_of(argv, "--out")
        saved_model(run / "model")
        assert lines[-1].endswith(f"model in {value_of(argv, '--out')}/model" + (
            f", checkpoints in {value_of(argv, '--out')}/checkpoints" if command == "pretrain" else "")), lines[-1]
        records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        assert any("loss" in r for r in records), "no training record in metrics.jsonl"
        kept = json.loads((run / "model" / "eval_results.json").read_text())
        assert set(kept) - {"step"}, f"eval_results.json holds no scores: {kept}"
    elif command == "tokenizer":
        assert json.loads((work / value_of(argv, "--out") / "tokenizer.json").read_text())["model"]["vocab"]
    elif command == "generate":
        assert lines[0].startswith(parsed(argv).prompt), lines  # the prompt, then what the model adds
    elif command == "train-translation":
        expected = "cove" if "lstm" in argv else "marian"
        assert saved_model(work / value_of(argv, "--out") / "model")["model_type"] == expected
        assert re.match(r"done at step 4 after [\d.]+ minutes; the model is in ", lines[-3]), lines[-3:]
        assert lines[-2].startswith("validation: loss ") and "BLEU" in lines[-2], lines[-2]
    elif command == "translate":
        given = (work / value_of(argv, "--input")).read_text().splitlines() if "--input" in argv else [argv[-1]]
        written = (work / value_of(argv, "--output")).read_text() if "--output" in argv else out
        per = int(value_of(argv, "--n-best")) if "--n-best" in argv else 1  # K lines each with --n-best K
        assert written.count("\n") == per * (len(given) if "--input" in argv else 1), written  # empty or not
    elif command == "word-vectors":
        from bertforge.formats.word_vectors import read_vectors

        words, vectors = read_vectors(str(work / value_of(argv, "--output")))
        assert vectors.shape == (len(words), 8) and len(words) > 10, vectors.shape
        assert re.match(r"[\d,]+ words, [\d,]+ co-occurrence entries", lines[0]), lines
    elif command == "evaluate-lm":
        # a masked LM's accuracy, or a left-to-right or bidirectional LM's perplexity, beside its baseline
        assert re.search(r"masked-token accuracy \d+\.\d%, always guessing|perplexity [\d.]+, \w+ frequencies alone",
                         out), out
    elif command == "fill-mask":
        assert re.match(r"\[MASK\] 1: \S+ \(\d", lines[0]), lines
    elif command == "export":
        assert lines[0].startswith(f"wrote {parsed(argv).out}: ")
        if "allennlp" in argv:
            assert json.loads((work / parsed(argv).out / "options.json").read_text())["lstm"]
        else:
            assert "onnxruntime agrees" in lines[0] and (work / parsed(argv).out).stat().st_size > 1000, lines
    elif command == "import-allennlp":
        assert saved_model(work / parsed(argv).out)["model_type"] == "elmo"
    elif command == "evaluate":
        scores = json.loads(lines[-1])
        assert 0 <= scores["accuracy"] <= 1 and scores["examples"] > 0, scores
    elif command == "info":
        assert re.match(rf"{re.escape(parsed(argv).model)}: \w+, \d+\.\dM parameters", lines[0]), lines
    elif command == "predict":
        if "--format" in argv and value_of(argv, "--format") == "conll":
            assert all(len(line.split()) >= 2 for line in lines if line), lines  # a word and its tags
        else:
            written = (work / value_of(argv, "--output")).read_text() if "--output" in argv else out
            # a label per text (classification), tags per word (tagging)
            assert all({"label", "tags"} & set(json.loads(line)) for line in written.splitlines()), written
    elif command == "embed":
        path = work / value_of(argv, "--output")
        texts = (work / value_of(argv, "--input")).read_text().splitlines()
        if path.suffix == ".npy":
            assert np.load(path).shape[0] == len(texts)
        else:  # a vector per token
            records = [json.loads(line) for line in path.read_text().splitlines()]
            assert len(records) == len(texts) and all(len(r["vector"]) == len(r["tokens"]) > 0 for r in records)
    else:
        raise AssertionError(f"no output check for `bertforge {command}`: add one to check_output")


def not_empty(path: Path) -> None:
    assert path.read_text().strip(), f"{path} is empty"


class Failed(Exception):
    """A command that ran but did not do what it should."""


def output_is_right(check, *args) -> None:
    try:
        check(*args)
    except Exception as e:  # an assertion, or a file that is missing or does not parse
        raise Failed(f"exit 0, but {type(e).__name__}: {e}") from None


def is_benchmark(words: list[str]) -> bool:
    return len(words) > 1 and words[0] == "python" and words[1].startswith("benchmarks/")


def downloads(words: list[str]) -> bool:
    """Whether a command fetches from the network (curl or wget of an address off this machine, as
    docs/data.md's do): not run, since docs_data.py lays out made-up files where it puts them."""
    return bool({"curl", "wget"} & set(words)) and any(
        re.match(r"https?://(?!(127\.0\.0\.1|localhost)[:/])", w) for w in words)


def unchecked(commands: list[tuple[str, list[str], str]]) -> list[str]:
    """The commands this test can neither run nor finds in SKIPPED."""
    return [f"{where}: {key}" for where, words, key in commands if key not in SKIPPED and not (
        words[0] in ("bertforge", "torchrun", "curl", *SHELL_TOOLS) or is_benchmark(words) or downloads(words)
        or re.fullmatch(r"\w+=\S+", key))]


class Parsed(Exception):
    """Raised right after a benchmark script has parsed its arguments: nothing is measured."""


def benchmark_parses(words: list[str], monkeypatch) -> str | None:
    """None if the benchmark script `words[1]` accepts its arguments, else what its parser said."""
    import argparse
    import contextlib
    import runpy

    script = ROOT / words[1]
    if not script.exists():
        return f"{words[1]} does not exist"
    parse = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, args=None, namespace=None):
        parse(self, args, namespace)
        raise Parsed

    errors = io.StringIO()
    with monkeypatch.context() as m:
        m.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
        m.setattr(sys, "argv", [str(script), *words[2:]])
        m.syspath_prepend(str(script.parent))
        try:
            with contextlib.redirect_stderr(errors):
                runpy.run_path(str(script), run_name="__main__")
        except Parsed:
            return None
        except SystemExit as e:
            return (errors.getvalue().strip().splitlines() or [f"exit {e.code}"])[-1]
    return "it ran to the end without parsing arguments"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_service(argv: list[str], work: Path) -> tuple[subprocess.Popen, int]:
    """`bertforge serve ...` on a free port, once it answers /health."""
    port = free_port()
    argv = option(argv, "--port", str(port))
    process = subprocess.Popen([sys.executable, "-m", "bertforge", *argv], cwd=work, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    for _ in range(240):
        if process.poll() is not None:
            raise Failed(f"the service stopped: {process.stderr.read().strip().splitlines()[-1:]}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
            return process, port
        except OSError:
            time.sleep(0.25)
    process.kill()
    process.wait()
    process.stderr.close()
    raise Failed("the service did not answer /health in 60 seconds")


class Runner:
    """Runs the pages' commands in order in `work`, keeping variables and the running service."""

    def __init__(self, work: Path, monkeypatch, capsys):
        self.work, self.monkeypatch, self.capsys = work, monkeypatch, capsys
        self.env, self.services = {}, []

    def close(self) -> None:
        for process, _ in self.services:
            process.kill()
            process.wait()
            process.stderr.close()  # its pipe, or the file object warns when collected (in a later test)

    def run(self, words: list[str], key: str) -> None:
        """Run one command; raise Failed (or OSError when its input is not made yet) if it fails."""
        PREPARE.get(key, lambda work: None)(self.work)
        if re.fullmatch(r"\w+=\S+", key):
            name, value = key.split("=", 1)
            self.env[name] = value
        elif is_benchmark(words):
            if message := benchmark_parses(expand(words, self.env, self.work), self.monkeypatch):
                raise Failed(message)
        elif words[0] == "torchrun":
            self.torchrun(words)
        elif words[0] == "curl":
            self.curl(words)
        elif words[:2] == ["bertforge", "serve"]:
            self.services.append(start_service(expand(words[1:], self.env, self.work), self.work))
        elif "bertforge" in words and words[0] != "bertforge":  # `echo ... | bertforge ...`: its standard input
            cut = words.index("bertforge")
            assert words[cut - 1] == "|", key
            piped = subprocess.run(["bash", "-c", bash(words[: cut - 1])], cwd=self.work, capture_output=True,
                                   text=True, check=True).stdout
            self.monkeypatch.setattr("sys.stdin", io.StringIO(piped))
            self.bertforge(words[cut + 1:])
        elif words[0] in SHELL_TOOLS:
            done = subprocess.run(["bash", "-c", bash(words)], cwd=self.work, env={**os.environ, **self.env},
                                  capture_output=True, text=True)
            if done.returncode:
                raise Failed(f"exit {done.returncode}: {done.stderr.strip()}")
            if ">" in words:
                output_is_right(not_empty, self.work / expand([words[words.index(">") + 1]], self.env, self.work)[0])
        else:
            self.bertforge(words[1:])

    def bertforge(self, words: list[str]) -> None:
        argv = scaled(expand(words, self.env, self.work))
        self.capsys.readouterr()
        code = main(argv)
        printed = self.capsys.readouterr()
        if code != 0:
            raise Failed(f"exit {code}: {(printed.err.strip().splitlines() or [''])[-1]}")
        output_is_right(check_output, argv, printed.out, self.work)

    def torchrun(self, words: list[str]) -> None:
        """Two processes on this machine, gloo on the CPU."""
        cut = words.index("bertforge") + 1
        argv = words[:cut] + scaled(expand(words[cut:], self.env, self.work))
        done = subprocess.run(["bash", "-c", bash(argv)], cwd=self.work, capture_output=True, text=True,
                              env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
                                   "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""})
        if done.returncode:
            raise Failed(f"exit {done.returncode}: {(done.stderr.strip().splitlines() or [''])[-1]}")
        output_is_right(saved_model, self.work / value_of(argv, "--out") / "model")

    def curl(self, words: list[str]) -> None:
        """Against the service started last, wherever the page says it listens."""
        if not self.services:
            raise OSError("no service started before it")
        port = self.services[-1][1]
        argv = [re.sub(r"(127\.0\.0\.1|localhost):\d+", f"127.0.0.1:{port}", w) for w in words]
        done = subprocess.run(["bash", "-c", bash([*argv, "--fail-with-body"])], cwd=self.work,
                              capture_output=True, text=True)
        if done.returncode:
            raise Failed(f"exit {done.returncode}: {done.stdout.strip()[:200]} {done.stderr.strip()}")
        output_is_right(lambda out: json.loads(out), done.stdout)


def run_commands(commands: list[tuple[str, list[str], str]], runner: Runner) -> list[str]:
    """Run the commands in order, again those that failed while any other succeeds (a command can
    need what a later page makes); returns the failures, each with its page and line."""
    unique = {}  # a command shown on two pages (the README's overview, a family's page) runs once
    for command in commands:
        unique.setdefault(command[2], command)
    queue, errors = [c for c in unique.values() if c[2] not in SKIPPED and not downloads(c[1])], {}
    while queue:
        waiting = []
        for where, words, key in queue:
            try:
                runner.run(words, key)
            except (Failed, OSError) as e:
                waiting.append((where, words, key))
                errors[where] = f"{where}: {key}\n  -> {e}"
        if len(waiting) == len(queue):  # no progress: what is left fails for itself, not for its order
            return [errors[where] for where, _, _ in waiting]
        queue = waiting
    return []


def run_python(code: str, work: Path) -> str | None:
    """None if a python block runs to its end in a fresh interpreter in `work`, else its last error line."""
    done = subprocess.run([sys.executable, "-c", code], cwd=work, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    return None if done.returncode == 0 else (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]


def test_shell_blocks_are_read_as_bash_reads_them_and_a_new_kind_of_command_fails():
    text = ("```bash\nbertforge info runs/a   # a comment\nbertforge fill-mask M \\\n    \"the [MASK] sat\"\n```\n"
            "```python\nprint('not a shell block')\n```\n- a list item:\n\n  ```bash\n  python tool.py --flag\n"
            "  make demo\n  ```\n")
    commands = shell_commands(text)
    assert commands == [(2, ["bertforge", "info", "runs/a"]), (3, ["bertforge", "fill-mask", "M", "the [MASK] sat"]),
                        (12, ["python", "tool.py", "--flag"]), (13, ["make", "demo"])]
    assert python_blocks(text) == [(6, "print('not a shell block')")]
    found = [(f"page.md, line {n}", w, " ".join(w)) for n, w in commands]
    assert unchecked(found) == ["page.md, line 12: python tool.py --flag"]


def test_downloads_are_recognised_and_the_services_curls_are_not():
    commands = [split_line(line) for line in (
        "curl -fL --create-dirs -o data/x.zip https://example.org/x.zip && unzip -o data/x.zip -d data",
        "for id in 1 2; do wget -O data/$id.txt http://example.org/$id.txt; done",
        "curl -s 127.0.0.1:8000/embed -d '{}'", "curl -s http://localhost:8000/health", "echo https://example.org")]
    assert [downloads(words) for words in commands] == [True, True, False, False, False]
    found = [(f"page.md, line {n}", w, " ".join(w)) for n, w in enumerate(commands[:2], start=1)]
    assert unchecked(found) == []


def test_a_broken_block_fails(tmp_path, monkeypatch, capsys):
    """What the whole-docs test relies on: a failing command, a wrong benchmark flag and a failing
    python block are each reported with their page and line."""
    text = ("```bash\nbertforge info no/such/model\npython benchmarks/lineage.py --no-such-flag\n"
            "python benchmarks/lineage.py --minutes 10\n```\n```python\nimport bertforge\nbertforge.load('nowhere')\n```\n")
    commands = [(f"page.md, line {n}", w, " ".join(w)) for n, w in shell_commands(text)]
    runner = Runner(tmp_path, monkeypatch, capsys)
    failures = run_commands(commands, runner)
    assert [f.split("\n")[0] for f in failures] == ["page.md, line 2: bertforge info no/such/model",
                                                     "page.md, line 3: python benchmarks/lineage.py --no-such-flag"]
    assert "unrecognized arguments: --no-such-flag" in failures[1]
    (_, code), = python_blocks(text)
    assert "nowhere" in run_python(code, tmp_path)
    assert run_python("print(1)", tmp_path) is None


def test_the_pages_are_all_listed_their_links_resolve_and_every_fence_names_its_language():
    assert set(PAGES) == {"README.md", *(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))}
    assert len((ROOT / "README.md").read_text().splitlines()) <= 200
    problems = []
    for page in PAGES:
        text = (ROOT / page).read_text()
        problems += [f"{page}, line {fence}: a fence without a language" for language, fence, _ in blocks(text)
                     if not language]
        prose = re.sub(r"```.*?```", "", text, flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", prose):
            if re.match(r"\w+:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            linked = (ROOT / page).parent / path if path else ROOT / page
            if not linked.exists():
                problems.append(f"{page}: a link to {target}, which does not exist")
            elif anchor and linked.suffix == ".md" and anchor not in {
                    slug(h) for h in re.findall(r"^#+ (.+)$", re.sub(r"```.*?```", "", linked.read_text(), flags=re.S),
                                                re.M)}:
                problems.append(f"{page}: a link to {target}, whose page has no such heading")
    assert not problems, "\n".join(problems)


def test_the_command_reference_is_current():
    from bertforge.cli.reference import reference

    assert (ROOT / "docs" / "cli-reference.md").read_text() == reference() + "\n", \
        "docs/cli-reference.md is stale: python -m bertforge.cli.reference > docs/cli-reference.md"


# The commands that read a model: each names it --model (pretrain and train-translation start from one with --init).
MODEL_READERS = ("info", "finetune", "evaluate", "predict", "embed", "fill-mask", "serve", "export", "generate",
                 "evaluate-lm", "translate")


def test_every_flag_has_one_meaning_across_the_commands():
    """The command reference's vocabulary: one flag, one name in Python (argparse's dest) and one kind of
    value wherever it appears, so that --out, --max-seq-length or --min-count mean the same in every
    command; and every command that reads a model takes it as --model."""
    import argparse

    from bertforge.cli import _subcommands, build_parser

    meanings: dict[str, set] = {}
    for command in _subcommands(build_parser()):
        for action in command._actions:
            if action.help == argparse.SUPPRESS:  # old spellings and positional aliases
                continue
            for flag in action.option_strings:
                if flag.startswith("--") and flag not in ("--help", "--debug"):
                    kind = "number" if action.type in (int, float) else getattr(action.type, "__name__", None)
                    meanings.setdefault(flag, set()).add((action.dest, kind, action.nargs == 0))
    assert not {flag: m for flag, m in meanings.items() if len(m) > 1}
    dests: dict[str, set] = {}
    for flag, ((dest, _, _),) in meanings.items():
        dests.setdefault(dest, set()).add(flag)
    assert not {dest: flags for dest, flags in dests.items() if len(flags) > 1}
    commands = {c.prog.split()[-1]: c for c in _subcommands(build_parser())}
    for name in MODEL_READERS:
        assert "--model" in commands[name].format_help(), name


def test_every_command_and_block_of_the_docs_runs(tmp_path, monkeypatch, capsys):
    for module, extra in (("onnxruntime", "onnx"), ("h5py", "allennlp"), ("matplotlib", "plot")):
        pytest.importorskip(module, reason=f"the docs' commands need the {extra} extra (make test installs it)")
    commands = page_commands()
    assert len(commands) > 30  # the parser found the blocks
    unknown = unchecked(commands)
    assert not unknown, "commands neither run nor listed in SKIPPED:\n" + "\n".join(unknown)
    stale = set(SKIPPED) - {key for _, _, key in commands}
    assert not stale, f"SKIPPED lists commands no longer in the docs: {stale}"
    quoted = [(f"{page}, line {n}", words, " ".join(words)) for page in PAGES
              for n, words in quoted_benchmarks((ROOT / page).read_text())]

    work = lay_out(tmp_path)
    monkeypatch.chdir(work)
    monkeypatch.setenv("BERTFORGE_CACHE", str(tmp_path / "cache"))
    runner = Runner(work, monkeypatch, capsys)
    try:
        failures = run_commands(commands + quoted, runner)
        assert not failures, "commands of the docs that fail:\n" + "\n".join(failures)
    finally:
        runner.close()
    failures = [f"{page}, line {fence}: {error}" for page in PAGES for fence, code in python_blocks((ROOT / page).read_text())
                if code.splitlines()[0] not in SKIPPED_PYTHON and (error := run_python(code, work))]
    assert not failures, "python blocks of the docs that fail:\n" + "\n".join(failures)


def test_the_layout_page_names_every_module():
    """docs/layout.md is the map of the package: a new module that it does not name fails here (the
    command's modules, one per subcommand, are the reference page's)."""
    layout = (ROOT / "docs" / "layout.md").read_text()
    named = set(re.findall(r"([\w.]+\.(?:py|html))", layout))
    package = ROOT / "src" / "bertforge"
    missing = [str(p.relative_to(package)) for p in sorted(package.rglob("*.py")) if p.name != "__init__.py"
               and not {"__pycache__", "cli"} & set(p.parts) and p.name not in named]
    assert not missing, f"docs/layout.md does not name: {missing}"


def test_the_test_map_covers_every_module_and_test_file():
    """docs/architecture.md's "Where the tests are": every module of the package falls under a row
    (a path or a folder/*), and every test file is named in a row, so the map stays whole."""
    page = (ROOT / "docs" / "architecture.md").read_text()
    table = page.split("## Where the tests are", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1:3] for line in table.splitlines() if line.startswith("| `")]
    sources = [p for cell, _ in rows for p in re.findall(r"`([^`]+)`", cell)]
    tests = {t for _, cell in rows for t in re.findall(r"`(test_\w+\.py)`", cell)}
    package = ROOT / "src" / "bertforge"
    modules = [str(p.relative_to(package)) for p in sorted(package.rglob("*.py")) if "__pycache__" not in p.parts]
    unmapped = [m for m in modules if not any(fnmatch.fnmatch(m, pattern) for pattern in sources)]
    assert not unmapped, f"no row of the test map holds {unmapped}"
    files = {p.name for p in (ROOT / "tests").glob("test_*.py")}
    assert files - tests == set(), f"the test map does not name {sorted(files - tests)}"
    assert tests - files == set(), f"the test map names missing files {sorted(tests - files)}"
