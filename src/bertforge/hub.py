"""Models by name: a Hugging Face Hub name (`bert-base-uncased`, `Helsinki-NLP/opus-mt-en-de`, with
`@revision` for a branch, tag or commit) stands for the folder `huggingface_hub` keeps it in, where
an argument is not a path here.

Only what bertforge reads is fetched: the config, the tokenizer's files and the weights, as
safetensors where the repository has them (an old `pytorch_model.bin` only where it has none, read
later with `torch.load(weights_only=True)`). The cache is `huggingface_hub`'s own, read from the
environment at each call: HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub; with
HF_HUB_OFFLINE=1, or when the Hub cannot be reached, a name is read from the cache alone.
`huggingface_hub` is the `hub` extra, imported here when a name is first looked up.
"""

from __future__ import annotations

import os
import re
import sys

from .errors import BertforgeError

INSTALL = "pip install 'bertforge[hub]'"
# Config, tokenizers (WordPiece, byte-level BPE, OPUS-MT's SentencePiece, our word vocabularies)
# and weights in safetensors, at the top of the repository only.
FILES = ["config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
         "special_tokens_map.json", "added_tokens.json", "vocab.txt", "vocab.json", "merges.txt", "source.spm",
         "target.spm", "target_vocab.json", "words.json", "source_words.json"]
SAFETENSORS = ["model.safetensors", "model.safetensors.index.json", "model-*-of-*.safetensors",
               "bertforge_heads.safetensors"]
PICKLED = "pytorch_model.bin"
NETWORK_LIBRARIES = ("httpx", "httpx2", "httpcore", "requests", "urllib3")  # huggingface_hub's, by release
# A repository id as the Hub allows them: [owner/]name, letters, digits, `-`, `_`, `.`, 96 at most each
PART = r"[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?"
REPO_ID = re.compile(rf"(?:{PART}/)?{PART}")
REVISION = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_./-]*")


def hub_name(name: str) -> tuple[str, str | None] | None:
    """(repository id, revision or None) when `name` reads as a Hub name (`owner/name@revision`),
    else None (a path: absolute, `./`, `~`, more than one `/`, ...)."""
    repo, at, revision = name.partition("@")
    if not REPO_ID.fullmatch(repo) or "--" in repo or ".." in repo:
        return None
    if at and (not REVISION.fullmatch(revision) or ".." in revision):
        return None
    return repo, revision or None


def cache_folder() -> tuple[str, str]:
    """The Hub cache `huggingface_hub` uses under the present environment, and how to name it."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.path.expanduser(os.environ["HF_HUB_CACHE"]), f"HF_HUB_CACHE={os.environ['HF_HUB_CACHE']}"
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME") or "~/.cache", "huggingface")
    return os.path.join(os.path.expanduser(home), "hub"), f"HF_HOME={home}"


def offline() -> bool:
    """HF_HUB_OFFLINE as `huggingface_hub` reads it (1, true, yes, on)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def model_path(name: str) -> str:
    """`name` when it is a path here (or cannot be a Hub name: then the caller's own "no such
    directory" says so), else the local folder of the Hub model `name` names, fetched into the cache
    if it is not there. A name not found, or not cached while offline, is one BertforgeError line."""
    if os.path.exists(name):
        return name
    parsed = hub_name(name)
    if parsed is None:
        return name
    try:
        import huggingface_hub
    except ImportError:
        raise BertforgeError(f"{name}: no such directory (to read it as a Hugging Face Hub name, install the hub "
                             f"extra: {INSTALL})") from None
    repo, revision = parsed
    cache, where = cache_folder()
    options = dict(revision=revision, cache_dir=cache, local_files_only=offline())
    folder = _download(huggingface_hub, name, repo, FILES + SAFETENSORS, where, options)
    weights = [f for f in os.listdir(folder) if f.endswith(".safetensors") and f != "bertforge_heads.safetensors"]
    if not weights and not options["local_files_only"]:  # an old upload's only weights
        folder = _download(huggingface_hub, name, repo, [PICKLED], where, options)
    # said, so that a mistyped local folder that happens to be a Hub name is never read unnoticed
    print(f"{name}: no such directory here; the Hugging Face Hub model {repo}, from {folder}", file=sys.stderr)
    return folder


def _download(hub, name: str, repo: str, patterns: list[str], where: str, options: dict) -> str:
    """`snapshot_download` of the files matching `patterns`, its failures as one line naming `name`."""
    from huggingface_hub.utils import (HfHubHTTPError, LocalEntryNotFoundError, RepositoryNotFoundError,
                                       RevisionNotFoundError)

    try:
        return hub.snapshot_download(repo, allow_patterns=patterns, **options)
    except LocalEntryNotFoundError as e:  # offline, or the Hub unreachable, and not in the cache
        if type(e).__name__ == "IncompleteSnapshotError":  # huggingface_hub 1.x's: a download cut short
            raise BertforgeError(f"{name}: the Hugging Face cache ({where}) holds only part of it, and it cannot be "
                                 "completed while offline") from None
        if options["local_files_only"]:
            why = "HF_HUB_OFFLINE is set; unset it to download the model"
        else:
            cause = e.__cause__ or e
            why = f"the Hub cannot be reached ({type(cause).__name__}: {' '.join(str(cause).split())[:200]})"
        revision = f" at revision {options['revision']}" if options["revision"] else ""
        raise BertforgeError(f"{name}: not a local directory, and not in the Hugging Face cache ({where}){revision} "
                             f"while offline: {why}") from None
    except RevisionNotFoundError:
        raise BertforgeError(f"{name}: the Hugging Face Hub model {repo} has no revision {options['revision']!r}") \
            from None
    except RepositoryNotFoundError:  # gated and private ones too, without a token that opens them
        raise BertforgeError(f"{name}: no such directory, nor a model on the Hugging Face Hub (a private or gated "
                             "one needs a token: `hf auth login`, or HF_TOKEN)") from None
    except HfHubHTTPError as e:
        raise BertforgeError(f"{name}: the Hugging Face Hub refused it ({' '.join(str(e).split())[:200]})") from None
    except ValueError as e:  # an id the Hub's own rules refuse (HFValidationError)
        raise BertforgeError(f"{name}: no such directory, nor a valid Hugging Face Hub name ({e})") from None
    except Exception as e:  # the HTTP library's own (a proxy refusing, a connection cut mid-download)
        if type(e).__module__.split(".")[0] not in NETWORK_LIBRARIES:
            raise
        raise BertforgeError(f"{name}: the Hugging Face Hub could not be read ({type(e).__name__}: "
                             f"{' '.join(str(e).split())[:200]})") from None
