"""What travels with a saved model: `eval_results.json` (the scores it was kept for) and a model
card, `README.md`, saying what it is, what it was trained on and how, and how to load it."""

from __future__ import annotations

import json
import os

from .atomic import atomic_file
from .metrics import format_scores

# The `transformers` class a user loads each architecture with.
AUTO_CLASS = {"ForSequenceClassification": "AutoModelForSequenceClassification",
              "ForTokenClassification": "AutoModelForTokenClassification",
              "ForQuestionAnswering": "AutoModelForQuestionAnswering",
              "ForMultipleChoice": "AutoModelForMultipleChoice", "ForMaskedLM": "AutoModelForMaskedLM",
              "LMHeadModel": "AutoModelForCausalLM", "ForCausalLM": "AutoModelForCausalLM",
              "ForPreTraining": "AutoModelForPreTraining"}


def write_card(model_dir: str, run_config: dict, metrics: dict | None, step: int) -> None:
    with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    architecture = (config.get("architectures") or ["the model"])[0]
    with atomic_file(os.path.join(model_dir, "eval_results.json")) as f:
        json.dump({"step": step, **(metrics or {})}, f, indent=2)
        f.write("\n")
    auto = next((cls for suffix, cls in AUTO_CLASS.items() if architecture.endswith(suffix)), "AutoModel")
    task = run_config.get("task")
    if task:
        what = f"`{architecture}` fine-tuned by bertforge for `{task}`"
        data = f"train `{run_config.get('train')}`, dev `{run_config.get('dev')}`, from `{run_config.get('model')}`"
        labels = run_config.get("labels")
        if labels:
            data += f"; labels {', '.join(map(str, labels))}"
    else:
        what = f"`{architecture}` pretrained by bertforge with the `{run_config.get('objective')}` objective"
        corpus = run_config.get("corpus") or []
        data = f"{len(corpus)} corpus file(s) ({', '.join(os.path.basename(c) for c in corpus[:5])}" \
               f"{', ...' if len(corpus) > 5 else ''}), {run_config.get('eval_documents', 0)} documents held out"
    training = run_config.get("training", {})
    recipe = ", ".join(f"{k} {training[k]}" for k in ("lr", "schedule", "warmup", "weight_decay", "seed")
                       if k in training)
    scores = format_scores(metrics or {}) or "not evaluated"  # percent here; fractions in eval_results.json
    size = f"{config.get('num_hidden_layers', config.get('n_layer'))} layers of " \
           f"{config.get('hidden_size', config.get('n_embd'))}, vocabulary {config.get('vocab_size')}"
    card = f"""# {os.path.basename(os.path.dirname(os.path.abspath(model_dir))) or "model"}

{what}: {size}.

- **Data**: {data}.
- **Recipe**: {step} steps; {recipe}. Everything is in `run_config.json` beside this folder.
- **Scores** (at step {step}, also in `eval_results.json`): {scores}.

```python
from transformers import {auto}, AutoTokenizer
model = {auto}.from_pretrained("{model_dir}")
tokenizer = AutoTokenizer.from_pretrained("{model_dir}")
```

With bertforge: `bertforge info {model_dir}`, and every command's `--model`.
"""
    with atomic_file(os.path.join(model_dir, "README.md")) as f:
        f.write(card)
