"""Paths that must stay where they belong: an output apart from the inputs it is made from (checked
before any work, so that a typo never writes predictions over the labelled file they came from),
and a file named by a model's metadata inside that model's folder (so that a downloaded model's
index cannot make us read `/etc/...` or a file beside it)."""

from __future__ import annotations

import os

from .errors import BertforgeError


def _same(a: str, b: str) -> bool:
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)  # hard links, and paths that resolve alike
    except OSError:  # one of them does not exist yet
        return False


def _holds(folder: str, path: str) -> bool:
    """Whether `path` is inside `folder` (both resolved, links followed)."""
    folder, path = os.path.realpath(folder), os.path.realpath(path)
    return os.path.commonpath([folder, path]) == folder


def check_apart(output: str | None, *inputs: str | None) -> None:
    """Refuse, before any work, an output that is one of the inputs, or a folder that is or holds one
    (writing it would replace what is being read). Inputs given as None (standard input) are skipped."""
    if output is None:
        return
    for given in inputs:
        if given is None:
            continue
        if _same(output, given):
            raise BertforgeError(f"{output}: is the input {given}; writing it would replace what is read "
                                 "(name another output)")
        if _holds(output, given):
            raise BertforgeError(f"{output}: holds the input {given}; writing it would replace what is read "
                                 "(name another output)")


def inside(folder: str, relative, source: str) -> str:
    """`relative` (a name read from `source`, a model's metadata file) joined to `folder`; an absolute
    name, or one whose `..` leaves the folder, is refused. The name is judged as written: links
    inside the folder are its owner's (the Hugging Face cache links every file to a blob elsewhere)."""
    if not isinstance(relative, str) or "\0" in relative:
        raise BertforgeError(f"{source}: {relative!r} is not a file name")
    if os.path.isabs(relative) or os.path.normpath(relative).split(os.sep)[0] == os.pardir:
        raise BertforgeError(f"{source}: {relative!r} leads outside {folder}; a model's files stay in its folder")
    return os.path.join(folder, relative)
