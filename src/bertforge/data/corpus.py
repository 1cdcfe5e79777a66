"""Reading a text corpus: files, folders and globs of .txt / .jsonl (optionally gzipped), decoded
robustly, cut into documents and sentences.

Two text layouts are understood, chosen per file (or forced with `layout=`):
- `lines`: the original BERT convention, one sentence per line and a blank line between documents;
- `prose`: wrapped paragraphs separated by blank lines; the whole file is one document and
  paragraphs are split into sentences with fast, language-agnostic rules.
A `.jsonl` file holds one document per line, its text in a chosen field, treated as prose.

Everything streams line by line, so memory does not grow with file size. What had to be repaired
(a byte-order mark, Windows line ends, bytes that are not UTF-8, very long lines, Project Gutenberg
boilerplate, empty documents) is counted per file and reported.
"""

from __future__ import annotations

import glob
import gzip
import json
import os
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field

from ..errors import BertforgeError

TEXT_SUFFIXES = (".txt", ".jsonl", ".txt.gz", ".jsonl.gz")
LAYOUTS = ("auto", "lines", "prose")
MAX_LINE_BYTES = 1 << 20  # longer lines are read in pieces of this size
_LOOKAHEAD_LINES = 2000  # lines read ahead to choose the layout and find a Gutenberg header


@dataclass
class FileReport:
    """What reading one file found and repaired."""

    path: str
    layout: str = ""
    documents: int = 0
    paragraphs: int = 0
    lines: int = 0
    repairs: dict[str, int] = field(default_factory=dict)

    def repaired(self, what: str, count: int = 1) -> None:
        self.repairs[what] = self.repairs.get(what, 0) + count

    def summary(self) -> str:
        fixes = ", ".join(f"{what} ({n})" if n > 1 else what for what, n in self.repairs.items())
        return f"{self.path}: {self.layout}, {self.documents} documents" + (f"; repaired: {fixes}" if fixes else "")


def find_files(specs: str | list[str]) -> list[str]:
    """Expand files, folders (searched recursively) and glob patterns into a sorted list of text files."""
    specs = [specs] if isinstance(specs, (str, os.PathLike)) else list(specs)
    found: list[str] = []
    for spec in map(str, specs):
        if os.path.isdir(spec):
            matches = [os.path.join(root, name) for root, _, names in os.walk(spec) for name in names
                       if name.endswith(TEXT_SUFFIXES)]
            if not matches:
                raise BertforgeError(f"{spec}: no text files in this folder (looked for {', '.join(TEXT_SUFFIXES)})")
        elif os.path.isfile(spec):
            matches = [spec]
        else:
            matches = [m for m in glob.glob(spec, recursive=True) if os.path.isfile(m)]
            if not matches:
                raise BertforgeError(f"{spec}: no such file, folder or matching files")
        found.extend(sorted(matches))
    return list(dict.fromkeys(found))  # keep order, drop repeats


def read_lines(path: str, report: FileReport) -> Iterator[str]:
    """The lines of a file as text, whatever its bytes: UTF-8 (BOM and CR removed), and lines that
    are not valid UTF-8 decoded as Windows-1252, the usual legacy 8-bit encoding of such files.
    Binary data (a NUL byte anywhere, UTF-16) and a corrupt or truncated gzip stop with an error
    naming the file and line."""
    opener = gzip.open if path.endswith(".gz") else open
    try:
        f = opener(path, "rb")
        head = f.read(4096)
    except (OSError, EOFError, zlib.error) as e:  # gzip.BadGzipFile is an OSError
        raise BertforgeError(f"{path}: cannot read ({_reason(e)})") from None
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        f.close()
        raise BertforgeError(f"{path}: UTF-16 text; convert it to UTF-8 (e.g. iconv -f UTF-16 -t UTF-8)")
    f.seek(0)
    with f:
        pending = b""
        first = True
        while True:
            try:
                piece = f.readline(MAX_LINE_BYTES)
            except (OSError, EOFError, zlib.error) as e:
                raise BertforgeError(f"{path}, line {report.lines + 1}: cannot read ({_reason(e)})") from None
            if not piece:
                break
            if b"\x00" in piece:  # cheap (a C scan of bytes already read), and catches binary past the head
                raise BertforgeError(f"{path}, line {report.lines + 1}: a binary file, not text (a NUL byte)")
            data = pending + piece
            pending = b""
            complete = data.endswith(b"\n")
            if not complete and len(piece) == MAX_LINE_BYTES:
                report.repaired("very long line split")
            if first and data.startswith(b"\xef\xbb\xbf"):
                data = data[3:]
                report.repaired("byte-order mark removed")
            first = False
            if data.endswith(b"\r\n"):
                data = data[:-2]
                report.repaired("Windows line ends")
            elif complete:
                data = data[:-1]
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError as e:
                if not complete and e.reason == "unexpected end of data":
                    # A long line cut inside a multi-byte character: finish it with the next piece.
                    text, pending = data[: e.start].decode("utf-8", "replace"), data[e.start:]
                else:
                    text = data.decode("cp1252", errors="replace")
                    report.repaired("lines not UTF-8, decoded as cp1252")
            report.lines += 1
            yield text.replace("\r", "")
        if pending:
            yield pending.decode("utf-8", "replace")


def _reason(e: BaseException) -> str:
    if isinstance(e, EOFError):
        return "the compressed stream ends early: a truncated .gz"
    return getattr(e, "strerror", None) or str(e) or type(e).__name__


def corpus_sentences(files: list[str], layout: str = "auto", text_field: str = "text") -> Iterator[str]:
    """Every sentence of the corpus, read as the shard builder reads it (vocabulary training)."""
    for path in files:
        for _, text, is_paragraph in read_units(path, FileReport(path), layout, text_field):
            yield from (split_sentences(text) if is_paragraph else [text])


_GUTENBERG_START = re.compile(r"\*\*\* ?START OF (THE|THIS) PROJECT GUTENBERG", re.IGNORECASE)
_GUTENBERG_END = re.compile(r"(\*\*\* ?)?END OF (THE|THIS) PROJECT GUTENBERG", re.IGNORECASE)


def _is_gutenberg_start(line: str) -> bool:
    return _GUTENBERG_START.match(line) is not None


def _is_gutenberg_end(line: str) -> bool:
    return _GUTENBERG_END.match(line) is not None


_TERMINAL = re.compile(r"[.!?…。！？।؟][\"'”’»)\]]*$")


def choose_layout(lines: list[str]) -> str:
    """`lines` when most non-empty lines end a sentence (one sentence per line), else `prose`."""
    filled = [line.rstrip() for line in lines if line.strip()]
    if not filled:
        return "lines"
    ending = sum(1 for line in filled if _TERMINAL.search(line))
    return "lines" if ending >= 0.7 * len(filled) else "prose"


def read_units(path: str, report: FileReport, layout: str = "auto",
               text_field: str = "text") -> Iterator[tuple[bool, str, bool]]:
    """Yield `(new_document, text, is_paragraph)` for one file.

    `is_paragraph` says the text still needs sentence splitting (prose); otherwise it is one sentence.
    """
    if layout not in LAYOUTS:
        raise BertforgeError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    lines = read_lines(path, report)
    if path.endswith((".jsonl", ".jsonl.gz")):
        report.layout = "jsonl"
        yield from _jsonl_units(path, lines, report, text_field)
        return
    lookahead = []
    for line in lines:
        lookahead.append(line)
        if len(lookahead) >= _LOOKAHEAD_LINES:
            break
    start = next((i for i, line in enumerate(lookahead) if _is_gutenberg_start(line)), None)
    if start is not None:
        lookahead = lookahead[start + 1:]
        report.repaired("Project Gutenberg header removed")
    report.layout = choose_layout(lookahead) if layout == "auto" else layout

    def body():
        for line in _chain(lookahead, lines):
            if start is not None and _is_gutenberg_end(line):
                report.repaired("Project Gutenberg licence removed")
                return
            yield line

    if report.layout == "lines":
        yield from _line_units(body(), report)
    else:
        yield from _prose_units(body(), report)


def _chain(first: list[str], rest: Iterator[str]) -> Iterator[str]:
    yield from first
    yield from rest


def _line_units(lines: Iterator[str], report: FileReport):
    new_document = True
    for line in lines:
        line = line.strip()
        if not line:
            new_document = True
            continue
        if new_document:
            report.documents += 1
        yield new_document, line, False
        new_document = False


def _prose_units(lines: Iterator[str], report: FileReport):
    paragraph: list[str] = []
    size, first = 0, True
    for line in lines:
        line = line.strip()
        if line:
            paragraph.append(line)
            size += len(line)
            if size < MAX_LINE_BYTES:  # a file without blank lines still comes in bounded pieces
                continue
        if paragraph:
            report.paragraphs += 1
            if first:
                report.documents += 1
            yield first, " ".join(paragraph), True
            first = False
            paragraph, size = [], 0
    if paragraph:
        report.paragraphs += 1
        if first:
            report.documents += 1
        yield first, " ".join(paragraph), True
    if first:
        report.repaired("empty document skipped")


def json_object(path: str, number: int, line: str) -> dict:
    """One line of a JSONL file as a dict, or an error naming the file and line."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as e:
        raise BertforgeError(f"{path}, line {number}: not valid JSON ({e.msg})") from None
    if not isinstance(record, dict):
        raise BertforgeError(f"{path}, line {number}: expected a JSON object")
    return record


def _jsonl_units(path: str, lines: Iterator[str], report: FileReport, text_field: str):
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        record = json_object(path, number, line)
        if text_field not in record:
            raise BertforgeError(f"{path}, line {number}: no {text_field!r} field")
        text = record[text_field]
        if not isinstance(text, str):
            raise BertforgeError(f"{path}, line {number}: {text_field!r} is {type(text).__name__}, not text")
        paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", text)]
        paragraphs = [p for p in paragraphs if p]
        if not paragraphs:
            report.repaired("empty document skipped")
            continue
        report.documents += 1
        for i, paragraph in enumerate(paragraphs):
            report.paragraphs += 1
            yield i == 0, paragraph, True


# ---- sentences -----------------------------------------------------------------------------------

# A sentence ends at terminal punctuation, optionally followed by closing quotes or brackets, then
# white space. Scripts without spaces (Chinese, Japanese) end at their full stops directly.
_BOUNDARY = re.compile(r"[.!?…।؟]+[\"'”’»)\]]*\s+|[。！？]+[」』）]*\s*")
_ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof st jr sr vs etc e.g i.e mt no vol fig cf al ch p pp ed col gen gov lt capt sgt rev".split()
)
MAX_SENTENCE_CHARS = 10_000  # longer "sentences" (tables, lists, run-on text) are cut at spaces


def split_sentences(paragraph: str) -> list[str]:
    """Split a paragraph into sentences with rules that need no model and no language: a boundary
    is terminal punctuation and white space, unless the next word starts in lowercase or the word
    before is a known abbreviation or a single initial ("J. Smith")."""
    sentences, start = [], 0
    for match in _BOUNDARY.finditer(paragraph):
        end = match.end()
        if end >= len(paragraph):
            break
        if paragraph[match.start()] in ".!?…" and paragraph[end].islower():
            continue
        if paragraph[match.start()] == "." and match.group().startswith(".") and match.group().count(".") == 1:
            word = paragraph[start: match.start()].rsplit(None, 1)[-1:] or [""]
            word = word[0].lstrip("\"'“‘([").lower()
            if word in _ABBREVIATIONS or (len(word) == 1 and word.isalpha()):
                continue
        sentence = paragraph[start:end].strip()
        if sentence:
            sentences.extend(_cut_long(sentence))
        start = end
    rest = paragraph[start:].strip()
    if rest:
        sentences.extend(_cut_long(rest))
    return sentences


def _cut_long(sentence: str) -> list[str]:
    if len(sentence) <= MAX_SENTENCE_CHARS:
        return [sentence]
    pieces = []
    while len(sentence) > MAX_SENTENCE_CHARS:
        cut = sentence.rfind(" ", 0, MAX_SENTENCE_CHARS)
        cut = cut if cut > 0 else MAX_SENTENCE_CHARS
        pieces.append(sentence[:cut].strip())
        sentence = sentence[cut:].strip()
    return pieces + ([sentence] if sentence else [])
