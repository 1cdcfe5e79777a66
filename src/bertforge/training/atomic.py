"""Writing a directory so that a crash, a kill or a full disk never leaves a half-written one in place."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile


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
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if os.path.isdir(path):
        old = tempfile.mkdtemp(prefix=os.path.basename(path) + ".old-", dir=parent)
        os.rmdir(old)
        os.rename(path, old)
        os.rename(tmp, path)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(tmp, path)
    _fsync_directory(parent)  # make the rename itself durable


def _fsync_directory(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(directory: str) -> None:
    # Data must be on disk before the rename makes it visible, or a power cut could expose
    # a directory of empty files under the final name.
    for name in os.listdir(directory):
        full = os.path.join(directory, name)
        if os.path.isfile(full):
            with open(full, "rb") as f:
                os.fsync(f.fileno())
    _fsync_directory(directory)
