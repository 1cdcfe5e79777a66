"""The package as users who do not clone get it: a wheel built from this tree, installed into a fresh
virtual environment, has its entry point, its page and its extras, and `bertforge --help` runs there
with none of the dependencies installed (the command line imports torch only when a command runs)."""

import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_a_built_wheel_installs_into_a_fresh_venv_and_its_command_runs(tmp_path):
    pytest.importorskip("setuptools", reason="building the wheel needs setuptools (make test's venv has it)")
    source = tmp_path / "source"  # a copy: building in place would leave build/ in the checkout
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".venv", ".git", "runs", "build", "*.egg-info",
                                                                "__pycache__", ".pytest_cache"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp_path / "dist"), str(source)], check=True)
    (wheel,) = (tmp_path / "dist").glob("bertforge-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        metadata = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "bertforge/serve/page.html" in names and "bertforge/cli/__init__.py" in names
    for extra in ("serve", "onnx", "translation", "datasets", "hub", "demo", "plot"):
        assert f"Provides-Extra: {extra}" in metadata, extra
    env = tmp_path / "venv"
    venv.create(env, with_pip=False)
    python = env / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
                    str(wheel)], check=True)
    help = subprocess.run([str(env / "bin" / "bertforge"), "--help"], capture_output=True, text=True, check=True)
    assert "pretrain" in help.stdout and "translate" in help.stdout
    version = subprocess.run([str(env / "bin" / "bertforge"), "--version"], capture_output=True, text=True)
    assert version.stdout.strip() == "bertforge 0.1.0"
    # a command that needs torch says how to get it, in one line, instead of a traceback
    run = subprocess.run([str(env / "bin" / "bertforge"), "info", "--model", str(tmp_path)], capture_output=True,
                         text=True)
    assert run.returncode != 0 and "torch" in run.stderr
