"""Paths that must stay where they belong: an output apart from the inputs it is made from (checked
before any work, so that a typo never writes predictions over the labelled file they came from),
and a file named by a model's metadata inside that model's folder (so that a downloaded model's
index cannot make us read `/etc/...` or a file beside it)."""

from __future__ import annotations

import fnmatch
import glob
import hashlib
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


def _read_where(given: str) -> str | None:
    """What an input names on disk: itself; for a recursive glob (`corpus/**/*.txt`) the folder it
    searches, since whatever is written anywhere under it may match; None for another pattern
    (`corpus/*.txt`), which only the paths it matches stand for (`_matches`)."""
    if os.path.exists(given) or not glob.has_magic(given):
        return given
    if "**" not in given:
        return None
    parts = given.split(os.sep)
    static = next(i for i, part in enumerate(parts) if glob.has_magic(part))
    return os.sep.join(parts[:static]) or os.curdir


def _matches(pattern: str, path: str) -> bool:
    """Whether the non-recursive glob `pattern` matches `path`, part by part (a `*` never crosses a `/`)."""
    wanted = os.path.abspath(pattern).split(os.sep)
    parts = os.path.abspath(path).split(os.sep)
    return len(wanted) == len(parts) and all(fnmatch.fnmatchcase(p, w) for p, w in zip(parts, wanted))


def check_apart(output: str | None, *inputs) -> None:
    """Refuse, before any work, an output that is one of the inputs, a folder that is or holds one
    (writing it would replace what is read), or a path inside an input folder (a model's folder, a
    corpus folder or the folder of a pattern: writing there changes what this and the next run
    read). Inputs given as None (standard input) are skipped; a list stands for its members."""
    if output is None:
        return
    for given in _flat(inputs):
        where = _read_where(given)
        if where is None:  # a pattern: refused only where the output is one of the files it reads
            if _matches(given, output):
                raise BertforgeError(f"{output}: matches the input pattern {given}; the next run would read it "
                                     "(name another output)")
            continue
        if _same(output, where):
            raise BertforgeError(f"{output}: is the input {given}; writing it would replace what is read "
                                 "(name another output)")
        if _holds(output, where):
            raise BertforgeError(f"{output}: holds the input {given}; writing it would replace what is read "
                                 "(name another output)")
        if os.path.isdir(where) and _holds(where, output):
            raise BertforgeError(f"{output}: is inside the input folder {given}; writing there would change what "
                                 "is read (name an output outside it)")


def _flat(values) -> list[str]:
    out = []
    for value in values:
        if isinstance(value, (list, tuple)):
            out.extend(_flat(value))
        elif value is not None:
            out.append(os.fspath(value))
    return out


# What every command reads and writes, by the destination of its option (the same name in every
# command), so that the command line checks each output against each input of any command, a new
# one included, before its work starts; the Python functions check their own arguments too.
READS = ("model", "init", "tokenizer", "input", "reference", "corpus", "files", "data", "train", "dev", "valid",
         "word_vectors", "options", "weights", "vocab")
WRITES = ("out", "output", "cache_dir")


def check_outputs(options: dict) -> None:
    """`check_apart` for each output in `options` (a command's parsed arguments) against its inputs."""
    inputs = [options.get(name) for name in READS]
    for name in WRITES:
        value = options.get(name)
        if isinstance(value, str):
            check_apart(value, *inputs)


def inside(folder: str, relative, source: str) -> str:
    """`relative` (a name read from `source`, a model's metadata file) joined to `folder`; an absolute
    name, or one whose `..` leaves the folder, is refused. The name is judged as written: links
    inside the folder are its owner's (the Hugging Face cache links every file to a blob elsewhere)."""
    if not isinstance(relative, str) or "\0" in relative:
        raise BertforgeError(f"{source}: {relative!r} is not a file name")
    if os.path.isabs(relative) or os.path.normpath(relative).split(os.sep)[0] == os.pardir:
        raise BertforgeError(f"{source}: {relative!r} leads outside {folder}; a model's files stay in its folder")
    return os.path.join(folder, relative)


def file_identities(files) -> str:
    """Each file's absolute path, size and modification time, a line each: what tells that a file
    read before is the same one now (pretrain's shard key hashes it)."""
    lines = []
    for path in files:
        stat = os.stat(path)
        lines.append(f"{os.path.abspath(path)}\0{stat.st_size}\0{stat.st_mtime_ns}\n")
    return "".join(lines)


def fingerprint(files) -> str:
    """A digest of `file_identities(files)`: saved with a run, so that resuming it over other data
    is refused (`check_fingerprint`)."""
    return hashlib.sha256(file_identities(files).encode()).hexdigest()[:20]


def check_fingerprint(run: str, saved: str | None, now: str, what: str = "input files") -> None:
    """Refuse to resume the run in `run` when the fingerprint of its data `now` is not the one it
    began with (`saved`; None for a run made before fingerprints, which is not checked)."""
    if saved is not None and saved != now:
        raise BertforgeError(f"{run}: the {what} changed since the run began (sizes or modification times "
                             "differ), so resuming would train on other data; restore them or start a new run")


def why_missing(path: str, kind: str = "file") -> str:
    """Why `path` is not the `kind` ("file" or "directory") an error expected, in words that follow
    its name: "is a directory, not a file", "is a file, not a directory", "F is a file, not a
    directory" (a file where the path needs a directory above it: `MODEL/config.json` with a file
    given as the model), or "no such file" / "no such directory"."""
    if os.path.isdir(path) and kind == "file":
        return "is a directory, not a file"
    if os.path.isfile(path) and kind == "directory":
        return "is a file, not a directory"
    above = os.path.dirname(os.path.normpath(path))  # as the user wrote it
    while above and not os.path.exists(above) and os.path.dirname(above) != above:
        above = os.path.dirname(above)
    if above and os.path.isfile(above):
        return f"{above} is a file, not a directory"
    return f"no such {kind}"
