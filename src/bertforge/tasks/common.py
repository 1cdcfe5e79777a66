"""What every task kind shares: reading tables, batching features by length, predicting in batches."""

from __future__ import annotations

import csv
import io
import json
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import asdict

import numpy as np
import torch

from ..data.batches import Position
from ..data.padding import in_length_order
from ..data.corpus import json_object
from ..errors import BertforgeError
from ..losses import next_token_loss
from ..nn.layers import token_types  # a task's model reads it from here (docs/architecture.md's task kind too)
from ..paths import why_missing

csv.field_size_limit(sys.maxsize)


def read_text(path: str | None) -> str:
    """A whole task file (standard input when `path` is None) as text: UTF-8, with or without a
    byte-order mark. Anything else stops with the line of the first bad byte."""
    name = path or "<stdin>"
    if path is None:
        if not hasattr(sys.stdin, "buffer"):  # a text stream put in its place (a notebook, a test)
            return sys.stdin.read()
        data = sys.stdin.buffer.read()
    else:
        if not os.path.isfile(path):
            raise BertforgeError(f"{path}: {why_missing(path)}")
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise BertforgeError(f"{path}: cannot read ({e.strerror or e})") from None
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise BertforgeError(f"{name}: UTF-16 text; convert it to UTF-8 (e.g. iconv -f UTF-16 -t UTF-8)")
    nul = data.find(b"\x00")
    if nul >= 0:
        line = data.count(b"\n", 0, nul) + 1
        raise BertforgeError(f"{name}, line {line}: a binary file, not text (a NUL byte)")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise BertforgeError(f"{name}, line {line}: not UTF-8 (byte 0x{data[e.start]:02x}); convert the file "
                             "to UTF-8") from None


TABLE_SUFFIXES = (".tsv", ".tab", ".txt", ".csv", ".jsonl", ".json")
DATASET_SUFFIXES = (".parquet", ".arrow")
DATASETS_HINT = "pip install 'bertforge[datasets]'"


def is_dataset(path: str) -> bool:
    """Whether `path` is read as a table of rows: a Parquet or Arrow file, or a folder written by
    `datasets`' `save_to_disk`."""
    return path.lower().endswith(DATASET_SUFFIXES) or os.path.isdir(path)


def place(path: str, number: int) -> str:
    """"FILE, line N" for a text file; "FILE, row N" (from 1) for a Parquet, Arrow or saved dataset."""
    return f"{path}, {'row' if is_dataset(path) else 'line'} {number}"


def read_dataset(path: str) -> list[tuple[int, dict]]:
    """(row number from 1, record) for each row of a Parquet file, an Arrow file (the IPC stream
    `datasets` writes, or the IPC file format) or a folder written by `datasets.Dataset.save_to_disk`.
    A `DatasetDict` folder holds one such folder per split: a single split is read as it is, and of
    several the user names one as `FOLDER/SPLIT`. Columns `datasets` marks as class labels
    (`ClassLabel`, also in lists, as `ner_tags`) are read as their names, as a JSON file would spell
    them. pyarrow (and `datasets` for folders) are imported here only: the `datasets` extra."""
    try:
        import pyarrow as pa
    except ImportError:
        raise BertforgeError(f"{path}: reading Parquet, Arrow and saved datasets needs pyarrow; install it with "
                             f"{DATASETS_HINT}") from None
    if os.path.isdir(path):
        table, features = saved_dataset(path)
    elif not os.path.isfile(path):
        raise BertforgeError(f"{path}: {why_missing(path)}")
    else:
        kind = "Parquet" if path.lower().endswith(".parquet") else "Arrow"
        try:
            if kind == "Parquet":
                import pyarrow.parquet as pq
                table = pq.read_table(path)
            else:
                import pyarrow.ipc as ipc
                with open(path, "rb") as f:  # read into memory: a file changed while mapped would crash the process
                    data = pa.py_buffer(f.read())
                try:
                    table = ipc.open_stream(data).read_all()
                except pa.ArrowInvalid:
                    table = ipc.open_file(data).read_all()
        except ImportError:
            raise BertforgeError(f"{path}: reading {kind} files needs pyarrow; install it with {DATASETS_HINT}") \
                from None
        except (pa.ArrowException, OSError) as e:
            raise BertforgeError(f"{path}: not a readable {kind} file ({str(e).splitlines()[0]})") from None
        metadata = (table.schema.metadata or {}).get(b"huggingface")
        try:
            features = json.loads(metadata)["info"]["features"] if metadata else {}
        except (ValueError, KeyError, TypeError):
            features = {}
    try:  # Arrow reads buffers as they lie: a damaged offset would crash the process, not raise
        table.validate(full=True)
    except pa.ArrowException as e:
        raise BertforgeError(f"{path}: damaged data ({str(e).splitlines()[0]})") from None
    rows = table.to_pylist()
    for name, feature in features.items():
        names = class_names(feature)
        if names:
            for number, row in enumerate(rows, start=1):
                row[name] = class_label(path, number, name, row.get(name), names)
    if not rows:
        raise BertforgeError(f"{path}: no examples in the file")
    return list(enumerate(rows, start=1))


def saved_dataset(path: str):
    """The pyarrow table and the features (as `datasets` writes them in JSON) of a saved dataset folder."""
    try:
        import datasets
    except ImportError:
        raise BertforgeError(f"{path}: reading a saved dataset folder needs the datasets package; install it with "
                             f"{DATASETS_HINT}") from None
    if not any(os.path.isfile(os.path.join(path, name)) for name in ("state.json", "dataset_dict.json")):
        raise BertforgeError(f"{path}: a folder, but not one written by datasets' save_to_disk (no state.json or "
                             "dataset_dict.json)")
    try:
        data = datasets.load_from_disk(path)
    except Exception as e:  # datasets raises many kinds for damaged folders
        raise BertforgeError(f"{path}: cannot read the saved dataset ({type(e).__name__}: "
                             f"{str(e).splitlines()[0] if str(e) else ''})") from None
    if isinstance(data, datasets.DatasetDict):
        splits = list(data)
        if len(splits) != 1:
            raise BertforgeError(f"{path}: a DatasetDict with splits {', '.join(splits)}; name the split to read as "
                                 f"{os.path.join(path, splits[0])}")
        data = data[splits[0]]
    return data.with_format("arrow")[:], data.features.to_dict()


def class_names(feature) -> list[str] | None:
    """The names of a `ClassLabel` feature, or of the `ClassLabel` inside a list feature; else None."""
    if not isinstance(feature, dict):
        return None
    if feature.get("_type") == "ClassLabel":
        return feature.get("names")
    if feature.get("_type") in ("List", "Sequence", "LargeList"):
        inner = class_names(feature.get("feature"))
        return inner and [inner]  # names of the elements, marked as a list by the nesting
    return None


def class_label(path: str, number: int, column: str, value, names: list):
    """A class-label value (or a list of them) as its name(s); -1 (datasets' "no label") stays as is."""
    if names and isinstance(names[0], list):
        return value if not isinstance(value, list) else [class_label(path, number, column, v, names[0]) for v in value]
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(names):
        return names[value]
    if value is None or value == -1:
        return value
    raise BertforgeError(f"{path}, row {number}: {column} {value!r} is not one of the {len(names)} class labels")


def read_records(path: str, header: bool = True) -> list[tuple[int, dict | list]]:
    """(line number, record) for each row of a .tsv (.tab, .txt), .csv, .jsonl or .json file (a
    JSON array of objects, or an object whose "data" is one); (row number, record) for a .parquet or
    .arrow file or a saved `datasets` folder (see `read_dataset`). Any other suffix is an error: the
    format is never guessed.

    TSV files are read with no quoting at all, as GLUE's are written (their sentences contain bare
    quote characters); CSV with standard quoting. With a header, records are dicts by column name;
    without, lists. A UTF-8 byte-order mark is ignored.
    """
    if is_dataset(path):
        return read_dataset(path)
    if not path.lower().endswith(TABLE_SUFFIXES):
        raise BertforgeError(f"{path}: cannot tell the format from the name; use a file ending in "
                             f"{', '.join(TABLE_SUFFIXES + DATASET_SUFFIXES)}, or a folder saved by datasets")
    text = read_text(path)
    f = io.StringIO(text, newline="")
    if path.lower().endswith(".json"):
        rows = json_array(path, text)
    elif path.lower().endswith(".jsonl"):
        rows = []
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            rows.append((number, json_object(path, number, line)))
    else:
        tsv = not path.endswith(".csv")
        # strict CSV: a quote left open would otherwise swallow the rest of the file into one field
        reader = csv.reader(f, delimiter="\t" if tsv else ",", quoting=csv.QUOTE_NONE if tsv else csv.QUOTE_MINIMAL,
                            strict=not tsv)
        rows = []
        while True:
            first_line = reader.line_num + 1  # where the record starts (a quoted field may span lines)
            try:
                row = next(reader)
            except StopIteration:
                break
            except csv.Error as e:
                problem = "a quoted field is never closed" if "unexpected end of data" in str(e) else str(e)
                raise BertforgeError(f"{path}, line {first_line}: {problem}") from None
            if row:
                rows.append((first_line, row))
        if header and rows:
            names = rows[0][1]
            body = []
            for number, row in rows[1:]:
                if len(row) != len(names):
                    raise BertforgeError(f"{path}, line {number}: {len(row)} columns, the header has {len(names)}")
                body.append((number, dict(zip(names, row))))
            rows = body
    if not rows:
        raise BertforgeError(f"{path}: no examples in the file")
    return rows


# Suffixes that always mean a task's own layout (tables, JSON rows), never plain text.
LAYOUT_SUFFIXES = (".tsv", ".tab", ".csv", ".jsonl", ".json")


def read_inputs(task, path: str | None, names: list[str] | None = None) -> list[dict]:
    """The examples to predict on (no labels; a tagging file's gold tags kept where it has them).
    Standard input (`path` None) is plain text, one example per line. A file is read in the task's
    layout, except that a task reading one text per example (classification or regression of single
    texts, tagging) also takes plain text, one example per line (tagging: words split at white
    space), where the file says so (see `plain_text`). Blank lines are skipped; each example's
    `where` names its file and line."""
    if path is not None and not plain_text(task, path, names):
        return task.read(path, with_labels=task.labelled_inputs)
    task.from_lines([])  # a task without a plain-text form (QA, pairs) says so before standard input is read
    lines = [(number, line.rstrip("\r")) for number, line in enumerate(read_text(path).split("\n"), start=1)
             if line.strip()]
    examples = task.from_lines([line for _, line in lines])
    for example, (number, _) in zip(examples, lines):
        example["where"] = f"{path or '<stdin>'}, line {number}"
    return examples


def plain_text(task, path: str, names: list[str] | None = None) -> bool:
    """Whether `path` holds plain text, one example per line, for a task that reads single texts.
    Never for a Parquet, Arrow or dataset folder, nor for .tsv, .tab, .csv, .jsonl or .json: those
    are the task's tables. Any other file (.txt, or any name) is plain text unless its lines read as
    the task's own layout (the task's `in_layout`: a table's header, CoNLL columns)."""
    if not task.single_text() or is_dataset(path) or path.lower().endswith(LAYOUT_SUFFIXES):
        return False
    lines = [line.rstrip("\r") for line in read_text(path).split("\n") if line.strip()]
    return bool(lines) and not task.in_layout(lines, names)  # an empty file: the task's reader says so


def json_array(path: str, text: str) -> list[tuple[int, dict]]:
    """(line number, object) for each element of a JSON array (or of the "data" array of an object)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise BertforgeError(f"{path}, line {e.lineno}: not valid JSON ({e.msg})") from None
    if isinstance(data, dict) and isinstance(data.get("data"), list):
        data, start = data["data"], text.index('"data"')
    elif isinstance(data, list):
        start = 0
    else:
        raise BertforgeError(f"{path}: expected a JSON array of examples (or an object with a \"data\" array)")
    # Where each element starts, for messages that name a line: decode the array element by element.
    decoder, at, rows = json.JSONDecoder(), text.index("[", start) + 1, []
    for number, element in enumerate(data, start=1):
        while text[at] in " \t\r\n,":
            at += 1
        line = text.count("\n", 0, at) + 1
        if not isinstance(element, dict):
            raise BertforgeError(f"{path}, line {line}: example {number} is not a JSON object")
        _, at = decoder.raw_decode(text, at)
        rows.append((line, element))
    return rows


def field(path: str, number: int, record: dict | list, column: str | int):
    """One column of a record, with an error naming the file, line and column when it is missing."""
    try:
        return record[column] if isinstance(record, dict) else record[int(column)]
    except (KeyError, IndexError, ValueError):
        have = ", ".join(map(str, record)) if isinstance(record, dict) else f"{len(record)} columns"
        raise BertforgeError(f"{place(path, number)}: no column {column!r} (found {have})") from None


class FinetuneData:
    """Batches of task features for the trainer: shuffled each epoch (seeded), grouped by length so
    that little is spent on padding, and cut for processes and gradient accumulation."""

    def __init__(self, features: list, collate: Callable[[list], dict], length: Callable[[object], int],
                 batch_size: int, seed: int = 0, rank: int = 0, world: int = 1, accum: int = 1):
        if batch_size % (world * accum):
            raise BertforgeError(f"the batch size {batch_size} must be divisible by the number of processes "
                                 f"({world}) times the accumulation steps ({accum})")
        if len(features) < batch_size:
            raise BertforgeError(f"{len(features)} training examples, fewer than one batch of {batch_size}")
        self.features, self.collate, self.batch_size, self.seed = features, collate, batch_size, seed
        self.rank, self.world, self.accum = rank, world, accum
        self.lengths = np.array([length(f) for f in features])

    @property
    def steps_per_epoch(self) -> int:
        return len(self.features) // self.batch_size

    def epoch_batches(self, epoch: int) -> list[np.ndarray]:
        """Indices of each batch of an epoch: a random order, sorted by length within pools of
        50 batches, cut into batches, and the batches shuffled."""
        rng = np.random.default_rng([self.seed, epoch])
        # The remainder that does not fill a batch is dropped first, at random: dropping it after
        # sorting would leave out the longest examples every epoch.
        order = rng.permutation(len(self.features))[: self.steps_per_epoch * self.batch_size]
        pool = 50 * self.batch_size
        for start in range(0, len(order), pool):
            chunk = order[start: start + pool]
            order[start: start + pool] = chunk[np.argsort(self.lengths[chunk], kind="stable")]
        batches = [order[i: i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        return [batches[i] for i in rng.permutation(len(batches))]

    def batches(self, start: Position) -> Iterator[tuple[Position, list[dict]]]:
        epoch, index = start.epoch, start.index
        while True:
            for b, rows in enumerate(self.epoch_batches(epoch)[index:], start=index):
                mine = rows[self.rank:: self.world]
                micro = [self.collate([self.features[i] for i in part]) for part in np.array_split(mine, self.accum)]
                yield Position(epoch, b + 1), micro
            epoch, index = epoch + 1, 0


def encoder_inputs(features: list[dict], pad_id: int) -> dict:
    """input_ids, token_type_ids and attention_mask (B, T) padded to the longest feature, from
    features holding `ids` (and `types`, else all zeros); plus the count of real tokens."""
    ids = pad([f["ids"] for f in features], pad_id)
    types = pad([f["types"] for f in features], 0) if "types" in features[0] else torch.zeros_like(ids)
    batch = {"input_ids": ids, "token_type_ids": types,
             "attention_mask": pad([[1] * len(f["ids"]) for f in features], 0),
             "tokens": sum(len(f["ids"]) for f in features)}
    if "chars" in features[0]:  # ELMo: each word's characters (B, T, C), 0 at padding
        chars = torch.zeros(*ids.shape, len(features[0]["chars"][0]), dtype=torch.long)
        for i, f in enumerate(features):
            chars[i, :len(f["chars"])] = torch.tensor(f["chars"])
        batch["input_chars"] = chars
    return batch


def inference_batches(model, task, features: list, batch_size: int) -> Iterator[tuple[list[int], dict]]:
    """(feature indices, batch on the model's device), in batches of similar length."""
    device = next(model.parameters()).device
    for rows in in_length_order(features, batch_size, task.length):
        yield rows, to_device(task.collate([features[i] for i in rows], model.backbone.config.pad_token_id), device)


def auxiliary_lm(model, hidden: torch.Tensor, batch: dict) -> dict:
    """GPT-1's auxiliary language-model loss on the task inputs, `{"lm": summed loss}`, when the
    fine-tuning recipe gave `model` a weight for it (`model.loss_weights["lm"]`); else nothing.
    `hidden` (B', T, H) are the decoder's states of the batch's inputs, flattened as `hidden` is."""
    if "lm" not in getattr(model, "loss_weights", {}):
        return {}
    shape = hidden.shape[:2]
    return {"lm": next_token_loss(hidden, batch["input_ids"].reshape(shape), batch["attention_mask"].reshape(shape),
                                  model.backbone.embeddings.word.weight)}


def lm_count(batch: dict) -> dict:
    """`batch` with the count of next-token targets the auxiliary LM loss sums over (see `auxiliary_lm`)."""
    mask = batch["attention_mask"]
    batch["counts"] = {**batch["counts"], "lm": int(mask.reshape(-1, mask.shape[-1])[:, 1:].sum())}
    return batch


def finetuned_config(config, task, drop: tuple = (), **updates):
    """The config of a model fine-tuned for `task`: the task saved in it, keys of other heads dropped."""
    values = {k: v for k, v in config.to_dict().items() if k not in ("label2id", *drop)}
    values.update(finetuning_task=task.name, bertforge_task=saved_task(task), **updates)
    return type(config)(**values)


def saved_task(task) -> dict:
    """The task as config.json keeps it: its fields in order, its kind under the key "family"."""
    return {("family" if k == "kind" else k): v for k, v in asdict(task).items()}


def pad(rows: list[list[int]], value: int) -> torch.Tensor:
    width = max(len(r) for r in rows)
    out = torch.full((len(rows), width), value, dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r, dtype=torch.long)
    return out


def to_device(batch: dict, device) -> dict:
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
