"""Writing files and directories so that a crash, a kill or a full disk never leaves a half-written
one in place: everything is written beside its target under a temporary name, flushed to disk, then
renamed over it. Leftover temporary names (`NAME.tmp-*`, `NAME.old-*`) are what a kill can leave;
`remove_leftovers` clears them. What is written gets the ordinary permissions of the umask."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import time

from .errors import BertforgeError


def _read_umask() -> int:
    umask = os.umask(0)  # the only way to read it is to set it: once, at import, before any threads
    os.umask(umask)
    return umask


UMASK = _read_umask()


def _ordinary_permissions(path: str, directory: bool) -> None:
    # mkstemp and mkdtemp create 0600 / 0700; a saved model should be readable like any other file.
    os.chmod(path, (0o777 if directory else 0o666) & ~UMASK)


@contextlib.contextmanager
def atomic_file(path: str, mode: str = "w"):
    """Yield a file open for writing (`mode` "w" for UTF-8 text, "wb" for bytes) beside `path`; on
    success it replaces `path`. If the body raises, `path` is left exactly as it was."""
    with atomic_path(path) as tmp, open(tmp, mode, encoding=None if "b" in mode else "utf-8") as f:
        yield f


@contextlib.contextmanager
def atomic_path(path: str):
    """Yield the name of a new empty file beside `path`, for a writer that wants a name rather than
    an open file (ONNX's); on success it is flushed to disk and replaces `path`. The body may check
    what it wrote before that: if it raises, `path` is left exactly as it was."""
    path = os.path.abspath(path)
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".tmp-", dir=parent)
    os.close(fd)
    try:
        yield tmp
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        _ordinary_permissions(tmp, directory=False)
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise_naming(path, e)
    _fsync_directory(parent)


def remove_leftovers(path: str) -> None:
    """Remove what a killed atomic write of `path` left beside it. A kill between the two renames
    that replace a directory leaves no `path` and the previous one as `path.old-*`: that one is put
    back."""
    parent, name = os.path.split(os.path.abspath(path))
    if not os.path.isdir(parent):
        return
    previous = sorted(other for other in os.listdir(parent) if other.startswith(name + ".old-"))
    if not os.path.exists(path) and len(previous) == 1:
        os.rename(os.path.join(parent, previous[0]), path)
    for other in os.listdir(parent):
        if other.startswith((name + ".tmp-", name + ".old-")):
            full = os.path.join(parent, other)
            if os.path.isdir(full):
                shutil.rmtree(full, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(full)


def remove_leftovers_in(folder: str) -> None:
    """`remove_leftovers` for everything written atomically straight inside `folder` (a run's output
    folder: its model, tokenizer, plot, logs), whatever its name."""
    if os.path.isdir(folder):
        names = {re.split(r"\.(?:tmp|old)-", other)[0] for other in os.listdir(folder)
                 if ".tmp-" in other or ".old-" in other}
        for name in names:
            remove_leftovers(os.path.join(folder, name))


@contextlib.contextmanager
def atomic_directory(path: str):
    """Yield a fresh temporary directory beside `path`; on success it replaces `path` whole.

    If the body raises, the temporary directory is removed and `path` is left exactly as it was.
    Replacing an existing directory takes two renames (old aside, new in); a crash between them
    leaves the old one under `<path>.old-*`, never a partial new one under `path`.
    """
    path = os.path.abspath(path)
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=os.path.basename(path) + ".tmp-", dir=parent)
    try:
        yield tmp
        _fsync_tree(tmp)
        _ordinary_permissions(tmp, directory=True)
        _put_in_place(tmp, path)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise_naming(path, e)
    _fsync_directory(parent)  # make the rename itself durable


def _put_in_place(tmp: str, path: str) -> None:
    """Rename the directory `tmp` to `path`, the previous `path` (if a directory) aside first and
    removed after; a rename that fails (`path` a file, no permission) puts the previous one back."""
    if not os.path.isdir(path):
        os.rename(tmp, path)
        return
    old = tempfile.mkdtemp(prefix=os.path.basename(path) + ".old-", dir=os.path.dirname(path))
    os.rmdir(old)
    os.rename(path, old)
    try:
        os.rename(tmp, path)
    except BaseException:
        os.rename(old, path)
        raise
    shutil.rmtree(old, ignore_errors=True)


def check_space(path: str, needed: int) -> None:
    """Refuse to start writing `needed` bytes at `path` when its disk has less free: a write that
    fails half way costs the time it took, and some writers (HDF5's library) crash on a full disk
    rather than raise."""
    existing = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    free = shutil.disk_usage(existing).free
    if free < needed:
        raise BertforgeError(f"{path}: needs {needed / 2**20:,.1f} MiB but its disk has {free / 2**20:,.1f} MiB free; "
                             "nothing was written")


def raise_naming(path: str, e: BaseException):
    """Re-raise a failure to write `path` as an error that names it: a full disk surfaces from
    torch, safetensors or tokenizers as their own exception types, with no file name."""
    if isinstance(e, (BertforgeError, KeyboardInterrupt, SystemExit)) or not isinstance(e, Exception):
        raise e
    reason = getattr(e, "strerror", None) or " ".join(str(e).split()) or type(e).__name__
    raise BertforgeError(f"{path}: could not be written ({reason}); what was there before is unchanged") from e


def stale(directory: str, seconds: float) -> bool:
    """Whether nothing in `directory` (a temporary one) was written for `seconds`: its writer died."""
    newest = os.path.getmtime(directory)
    for root, _, names in os.walk(directory):
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                newest = max(newest, os.path.getmtime(os.path.join(root, name)))
    return time.time() - newest > seconds


def _fsync_directory(directory: str) -> None:
    """Make a rename durable: best effort, since the rename has happened either way (and some file
    systems cannot sync a directory at all)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _fsync_tree(directory: str) -> None:
    # Data must be on disk before the rename makes it visible, or a power cut could expose
    # a directory of empty files under the final name. Writers inside (safetensors, mkdtemp)
    # leave 0600 / 0700: everything gets the umask's ordinary permissions.
    for name in os.listdir(directory):
        full = os.path.join(directory, name)
        if os.path.isdir(full) and not os.path.islink(full):
            _fsync_tree(full)
            _ordinary_permissions(full, directory=True)
        elif os.path.isfile(full) and not os.path.islink(full):
            with open(full, "rb") as f:
                os.fsync(f.fileno())
            _ordinary_permissions(full, directory=False)
    _fsync_directory(directory)
