"""Hugging Face Hub datasets where a command reads data: `hf:NAME[:CONFIG][@SPLIT]`.

`finetune --train hf:nyu-mll/glue:sst2`, `--dev hf:nyu-mll/glue:sst2@validation`,
`pretrain --corpus hf:Salesforce/wikitext:wikitext-103-raw-v1`: NAME is anything
`datasets.load_dataset` takes (a Hub name, or a local folder of data files), CONFIG its second
argument, SPLIT a split or a split expression (`train[:1000]`, `train+validation`); without one the
option's own split is read (`train`, `validation` for --dev). No path begins with `hf:` in
practice, and a file that does is still reached as `./hf:...`.

The split is loaded through `load_dataset`, which downloads it once into the datasets cache
(`HF_HOME`, `HF_DATASETS_CACHE`) and reads it from there afterwards, also offline
(`HF_HUB_OFFLINE=1` / `HF_DATASETS_OFFLINE=1`). It is then written once, under bertforge's cache
(`$BERTFORGE_CACHE/hub-datasets`), as what the readers already take: a folder saved by
`save_to_disk` for task tables (class labels keep their names), JSON lines of `text` for a corpus,
of `translation` for parallel text. `datasets` is imported here only: the `datasets` extra."""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from dataclasses import dataclass

from ..errors import BertforgeError

PREFIX = "hf:"
HINT = "pip install 'bertforge[datasets]'"
SYNTAX = "hf:NAME[:CONFIG][@SPLIT], e.g. hf:nyu-mll/glue:sst2@validation"
# What the readers take: a saved folder (task tables), or JSON lines of one column.
KINDS = ("table", "text", "translation")


@dataclass(frozen=True)
class HubDataset:
    """A parsed `hf:` value: what `load_dataset(name, config, split=split)` is called with."""

    name: str
    config: str | None
    split: str

    def __str__(self) -> str:
        return f"{PREFIX}{self.name}{':' + self.config if self.config else ''}@{self.split}"


def is_hub_dataset(value) -> bool:
    """Whether a command-line value names a Hub dataset rather than a path."""
    return isinstance(value, str) and value.startswith(PREFIX)


def parse(value: str, default_split: str = "train") -> HubDataset:
    """`hf:NAME[:CONFIG][@SPLIT]` as its parts; the split is `default_split` when none is given."""
    if not is_hub_dataset(value):
        raise BertforgeError(f"{value}: not a Hub dataset; write {SYNTAX}")
    rest, at, split = value[len(PREFIX):].partition("@")
    name, colon, config = rest.partition(":")
    if not name.strip() or (colon and not config.strip()) or (at and not split.strip()) \
            or any(c.isspace() for c in value):
        raise BertforgeError(f"{value}: not a Hub dataset name; write {SYNTAX}")
    return HubDataset(name, config or None, split or default_split)


def resolve(value: str, kind: str = "table", default_split: str = "train", column: str | None = None,
            cache_dir: str | None = None) -> str:
    """A local path the readers take for the Hub dataset `value` (`hf:NAME[:CONFIG][@SPLIT]`), made
    once per version of the split and reused: for `kind` "table" a `save_to_disk` folder; for
    "text" (a corpus) and "translation" (parallel text) a JSON-lines file of `column` (default
    `text` and `translation`), checked to be there. Problems (no `datasets`, offline and not
    cached, no such dataset, config, split or column) are one line naming `value`."""
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r} is not one of {KINDS}")
    spec = parse(value, default_split)
    column = column or {"text": "text", "translation": "translation"}.get(kind)
    try:
        import datasets
    except ImportError:
        raise BertforgeError(f"{value}: reading a Hub dataset needs the datasets package; install it with "
                             f"{HINT}") from None
    data = _load(datasets, spec)
    if column and column not in data.column_names:
        raise BertforgeError(f"{spec}: no column {column!r} (columns: {', '.join(data.column_names)})"
                             + ("; choose one with --text-field" if kind == "text" else ""))
    if kind != "table":
        data = data.select_columns([column])
    path = _cache_path(spec, kind, column, data, cache_dir)
    if not os.path.exists(path):
        _write(data, kind, path)
    print(f"{spec}: {data.num_rows:,} rows, read from {path}", file=sys.stderr)
    return path


def _load(datasets, spec: HubDataset):
    """The split, through the datasets cache; its failures as one line."""
    offline = bool(getattr(datasets.config, "HF_HUB_OFFLINE", getattr(datasets.config, "HF_DATASETS_OFFLINE", False)))
    cache = datasets.config.HF_DATASETS_CACHE
    try:
        data = datasets.load_dataset(spec.name, spec.config, split=spec.split)
    except ConnectionError:  # datasets' "Couldn't reach NAME on the Hub": not cached, and no Hub to ask
        if offline:
            raise BertforgeError(f"{spec}: not in the datasets cache ({cache}), and the Hub is switched off "
                                 "(HF_HUB_OFFLINE or HF_DATASETS_OFFLINE): download it once online") from None
        raise BertforgeError(f"{spec}: cannot reach the Hugging Face Hub, and the dataset is not in the datasets "
                             f"cache ({cache})") from None
    except Exception as e:  # datasets raises many kinds: no such dataset, config or split, a loading script
        message = " ".join(str(e).split()) or type(e).__name__
        if type(e).__name__ in ("DatasetNotFoundError", "FileNotFoundError", "DataFilesNotFoundError"):
            message = f"no such dataset on the Hub or on disk, or one you may not read ({message})"
        raise BertforgeError(f"{spec}: {message}") from None
    if not isinstance(data, datasets.Dataset):  # an IterableDataset or a dict, from arguments we never pass
        raise BertforgeError(f"{spec}: not a single split ({type(data).__name__})")
    if data.num_rows == 0:
        raise BertforgeError(f"{spec}: no rows in the split")
    return data


def _cache_path(spec: HubDataset, kind: str, column: str | None, data, cache_dir: str | None) -> str:
    """Where the readable copy of this version of the split lives: named after the spec, keyed by it
    and by the datasets cache files it was loaded from (a new download is a new key)."""
    from .shards import default_cache_dir

    files = []
    for entry in data.cache_files:
        stat = os.stat(entry["filename"])
        files.append([entry["filename"], stat.st_size, stat.st_mtime_ns])
    key = hashlib.sha256(json.dumps([str(spec), kind, column, files, data.num_rows]).encode()).hexdigest()[:16]
    slug = re.sub(r"[^\w.-]+", "-", f"{spec.name}-{spec.config or ''}-{spec.split}").strip("-")[-80:]
    name = f"{slug}-{key}" + ("" if kind == "table" else ".jsonl")
    return os.path.join(cache_dir or default_cache_dir(), "hub-datasets", name)


def _write(data, kind: str, path: str) -> None:
    """The split at `path`, atomically: a folder `save_to_disk` writes, or JSON lines."""
    import datasets

    from ..atomic import atomic_directory, atomic_path

    bars = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()  # a local copy: quick, and the line resolve prints says where it is
    try:
        if kind == "table":
            with atomic_directory(path) as tmp:
                data.save_to_disk(tmp)
        else:
            with atomic_path(path) as tmp:
                data.to_json(tmp, lines=True, force_ascii=False)
    finally:
        if bars:
            datasets.enable_progress_bars()
