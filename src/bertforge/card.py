"""What travels with a saved model: `eval_results.json` (the scores it was kept for) and a model
card, `README.md`, saying what it is, what it was trained on and how, and how to load it."""

from __future__ import annotations

import json
import os
import shlex

from .atomic import atomic_file
from .data.held_out import describe
from .metrics import format_scores

# The `transformers` class a user loads each architecture with.
AUTO_CLASS = {"ForSequenceClassification": "AutoModelForSequenceClassification",
              "ForTokenClassification": "AutoModelForTokenClassification",
              "ForQuestionAnswering": "AutoModelForQuestionAnswering",
              "ForMultipleChoice": "AutoModelForMultipleChoice", "ForMaskedLM": "AutoModelForMaskedLM",
              "LMHeadModel": "AutoModelForCausalLM", "ForCausalLM": "AutoModelForCausalLM",
              "ForPreTraining": "AutoModelForPreTraining", "MTModel": "AutoModelForSeq2SeqLM",
              "ForConditionalGeneration": "AutoModelForSeq2SeqLM"}


def write_card(model_dir: str, run_config: dict, metrics: dict | None, step: int) -> None:
    with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    architecture = (config.get("architectures") or ["the model"])[0]
    with atomic_file(os.path.join(model_dir, "eval_results.json")) as f:
        json.dump({"step": step, **(metrics or {})}, f, indent=2)
        f.write("\n")
    auto = next((cls for suffix, cls in AUTO_CLASS.items() if architecture.endswith(suffix)), "AutoModel")
    task = run_config.get("task")
    if task == "translation":
        source, target = run_config.get("source_lang"), run_config.get("target_lang")
        what = f"`{architecture}` trained by bertforge to translate {source} to {target}"
        data = f"train `{run_config.get('train')}`, validation `{run_config.get('valid')}`"
        if run_config.get("averaged"):
            data += f"; the weights are the mean of {len(run_config['averaged'])} checkpoints"
    elif task:
        what = f"`{architecture}` fine-tuned by bertforge for `{task}`"
        data = f"train `{run_config.get('train')}`, dev `{run_config.get('dev')}`, from `{run_config.get('model')}`"
        labels = run_config.get("labels")
        if labels:
            data += f"; labels {', '.join(map(str, labels))}"
    else:
        what = f"`{architecture}` pretrained by bertforge with the `{run_config.get('objective')}` objective"
        corpus = run_config.get("corpus") or []
        held = describe(run_config["held_out"]) if "held_out" in run_config else \
            f"{run_config.get('eval_documents', 0)} documents held out"
        data = f"{len(corpus)} corpus file(s) ({', '.join(os.path.basename(c) for c in corpus[:5])}" \
               f"{', ...' if len(corpus) > 5 else ''}), {held}"
    training = run_config.get("training", {})
    recipe = ", ".join(f"{k} {training[k]}" for k in ("lr", "schedule", "warmup", "weight_decay", "seed")
                       if k in training)
    scores = format_scores(metrics or {}) or "not evaluated"  # percent here; fractions in eval_results.json
    size = _size(config)
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

With bertforge: `bertforge info --model {model_dir}`, and every command's `--model`.{_command(run_config)}
"""
    with atomic_file(os.path.join(model_dir, "README.md")) as f:
        f.write(card)


def _size(config: dict) -> str:
    """Layers, width and vocabulary, in the names each kind of config.json uses."""
    if "d_model" in config:  # an encoder-decoder (MarianMT)
        layers = f"{config.get('encoder_layers')} encoder and {config.get('decoder_layers')} decoder layers"
        width = config["d_model"]
    else:
        layers = f"{config.get('num_hidden_layers', config.get('n_layer', config.get('n_layers')))} layers"
        width = config.get("hidden_size", config.get("n_embd", config.get("cell_size")))
    return f"{layers} of {width}, vocabulary {config.get('vocab_size')}"


def _command(run_config: dict) -> str:
    """The command that made the model, from the options run_config.json saved (pretrain, finetune)."""
    if not isinstance(run_config.get("args"), dict) or not run_config.get("command"):
        return ""
    words = ["bertforge", run_config["command"]]
    for name, value in run_config["args"].items():
        flag = "--" + name.replace("_", "-")
        if value is None or value is False:
            continue
        words += [flag] if value is True else [flag, *map(str, value if isinstance(value, list) else [value])]
    return "\n\nMade by:\n\n```bash\n" + " ".join(shlex.quote(w) for w in words) + "\n```"
