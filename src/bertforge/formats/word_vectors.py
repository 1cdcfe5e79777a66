"""Static word vectors on disk, in the two formats everyone reads.

- GloVe's text format: `word v1 ... vd` per line, no header (GloVe's `vectors.txt`, 840B and 6B).
- word2vec's: a header line `count dim`, then the same lines (text), or each word followed by a
  space and `dim` little-endian float32 (binary, `.bin`; fastText's `.vec` is the text form).

Reading takes the format from the file (a header line of two integers means word2vec; `.bin` means
binary). Some published files have words with spaces in them (GloVe 840B): the last `dim` fields of
a line are the vector and the rest is the word. Every problem is an error naming the file and line.
"""

from __future__ import annotations

import os

import numpy as np

from ..atomic import atomic_file
from ..errors import BertforgeError
from ..paths import why_missing

FORMATS = ("glove", "word2vec", "word2vec-binary")


def format_of(path: str) -> str:
    """The format a path's name implies when writing: `.bin` binary word2vec, `.vec` text word2vec,
    anything else GloVe's text."""
    if path.endswith(".bin"):
        return "word2vec-binary"
    return "word2vec" if path.endswith(".vec") else "glove"


def write_vectors(path: str, words: list[str], vectors: np.ndarray, fmt: str | None = None) -> None:
    """Write `vectors` (len(words), dim) for `words` to `path` atomically, in `fmt` (default: from the
    name, `format_of`). Text formats keep 6 decimals, as GloVe's tool writes them."""
    fmt = fmt or format_of(path)
    if fmt not in FORMATS:
        raise BertforgeError(f"unknown vector format {fmt!r}; choose one of {', '.join(FORMATS)}")
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim != 2 or len(words) != len(vectors):
        raise BertforgeError(f"{len(words)} words but vectors of shape {tuple(vectors.shape)}")
    bad = [w for w in words if not w or any(c.isspace() for c in w)]
    if bad:
        raise BertforgeError(f"{path}: the word {bad[0]!r} is empty or has a space; the formats cannot hold it")
    if fmt == "word2vec-binary":
        with atomic_file(path, "wb") as f:
            f.write(f"{len(words)} {vectors.shape[1]}\n".encode())
            for word, row in zip(words, vectors):
                f.write(word.encode("utf-8") + b" " + row.astype("<f4").tobytes() + b"\n")
        return
    with atomic_file(path, "w") as f:
        if fmt == "word2vec":
            f.write(f"{len(words)} {vectors.shape[1]}\n")
        row_format = " ".join(["%.6f"] * vectors.shape[1])
        for word, row in zip(words, vectors):
            f.write(word + " " + row_format % tuple(row.tolist()) + "\n")


def read_vectors(path: str, limit: int | None = None) -> tuple[list[str], np.ndarray]:
    """(words, float32 vectors) from a GloVe or word2vec file (text or binary); `limit`: the first
    that many words only (published files list the most frequent first). A word seen twice keeps
    its first vector, as gensim does."""
    if not os.path.isfile(path):
        raise BertforgeError(f"{path}: {why_missing(path)}")
    with open(path, "rb") as f:
        first = f.readline()
    header = first.split()
    has_header = len(header) == 2 and all(h.isdigit() for h in header)
    if path.endswith(".bin"):
        if not has_header:
            raise BertforgeError(f"{path}:1: a binary word2vec file starts with 'count dim', got {first[:40]!r}")
        words, vectors = _read_binary(path, int(header[0]), int(header[1]), limit)
    else:
        words, vectors = _read_text(path, has_header, limit)
    return _first_of_each(words, vectors)


def _read_text(path: str, has_header: bool, limit: int | None) -> tuple[list[str], np.ndarray]:
    words, rows, dim, count = [], [], None, None
    with open(path, "rb") as f:  # decoded line by line, so that an error names its line
        for number, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8").rstrip("\r\n").rstrip(" ")
            except UnicodeDecodeError as e:
                raise BertforgeError(f"{path}:{number}: not UTF-8 ({e.reason})") from None
            if has_header and number == 1:
                count, dim = (int(h) for h in line.split())
                continue
            if limit is not None and len(words) >= limit:
                break
            fields = line.split(" ")
            if dim is None:
                dim = len(fields) - 1
            if dim < 1 or len(fields) < dim + 1:
                raise BertforgeError(f"{path}:{number}: expected a word and {dim} numbers, got {len(fields)} fields")
            # A word may hold spaces in GloVe's files (840B), never in word2vec's (a header's); a "word"
            # ending in a number is a row longer than its dimension says.
            if len(fields) > dim + 1 and (has_header or _is_number(fields[-dim - 1])):
                raise BertforgeError(f"{path}:{number}: {len(fields) - 1} numbers after the word, but "
                                     f"{'the header says' if has_header else 'the first line has'} {dim} dimensions")
            try:
                row = np.array(fields[-dim:], dtype=np.float32)
            except ValueError:
                raise BertforgeError(f"{path}:{number}: not a number among the last {dim} fields") from None
            if not np.isfinite(row).all():
                raise BertforgeError(f"{path}:{number}: a NaN or infinite number in the vector of {fields[0]!r}")
            rows.append(row)
            words.append(" ".join(fields[:-dim]))
    if not words:
        raise BertforgeError(f"{path}: no vectors in the file")
    if count is not None and limit is None and count != len(words):
        raise BertforgeError(f"{path}:1: the header says {count:,} words, the file has {len(words):,} (a truncated "
                             "or edited file?)")
    return words, np.stack(rows)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _read_binary(path: str, count: int, dim: int, limit: int | None) -> tuple[list[str], np.ndarray]:
    count = count if limit is None else min(count, limit)
    with open(path, "rb") as f:
        start = len(f.readline())
        # each vector is a word, a space and 4 x dim bytes: a header that asks for more than the file
        # holds is said before its rows are allocated (a lying header once asked for 58.2 TiB)
        size, least = os.fstat(f.fileno()).st_size, count * (4 * dim + 2)
        if dim < 1 or least > size - start:
            raise BertforgeError(f"{path}:1: the header says {count:,} words of {dim:,} dimensions, at least "
                                 f"{least:,} bytes, but the file holds {size - start:,} after it: a truncated file, "
                                 "or a header inconsistent with it")
        words, vectors = [], np.empty((count, dim), dtype=np.float32)
        for row in range(count):
            word = bytearray()
            while (c := f.read(1)) != b" ":
                if not c:
                    raise BertforgeError(f"{path}: ends at vector {row + 1} of {count} (a truncated file?)")
                if c != b"\n":  # the newline word2vec writes after each vector
                    word += c
            data = f.read(4 * dim)
            if len(data) < 4 * dim:
                raise BertforgeError(f"{path}: ends inside vector {row + 1} of {count} (a truncated file?)")
            try:
                words.append(word.decode("utf-8"))
            except UnicodeDecodeError:
                raise BertforgeError(f"{path}: word {row + 1} is not UTF-8") from None
            vectors[row] = np.frombuffer(data, dtype="<f4")
            if not np.isfinite(vectors[row]).all():
                raise BertforgeError(f"{path}: a NaN or infinite number in vector {row + 1} of {count} "
                                     f"({words[-1]!r})")
    return words, vectors


def _first_of_each(words: list[str], vectors: np.ndarray) -> tuple[list[str], np.ndarray]:
    seen: dict[str, int] = {}
    for row, word in enumerate(words):
        seen.setdefault(word, row)
    if len(seen) == len(words):
        return words, vectors
    rows = sorted(seen.values())
    return [words[r] for r in rows], vectors[rows]
