"""How much a pretrained model learned, on any text: masked-token accuracy and loss at 15% masking,
next-sentence (or sentence-order) accuracy where the model has that head, each beside what
knowing only word counts scores (always guessing the commonest token; the majority label).

The text is read, split into documents and masked exactly as pretraining does, all of it held out,
from a fixed seed, so that two evaluations of the same files see the same masks.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections import Counter

import numpy as np
import torch

from .config import GPTConfig
from .data.batches import MaskingOptions, PretrainingData
from .data.shards import build_shards
from .errors import BertforgeError
from .formats.hf import head_keys, load_pretrained, read_config, read_weights
from .models.objectives import BertPretraining
from .data.tokenizer import Tokenizer
from .training.trainer import evaluate

# The HF name of each family's MLM bias and of its sentence-pair head: which heads a checkpoint has.
_SENTENCE_HEADS = {"cls.seq_relationship.weight": "nsp", "bertforge_nsp.weight": "nsp",
                   "sop_classifier.classifier.weight": "sop"}


def evaluate_lm(model_dir: str, files, max_seq_length: int = 128, batch_size: int = 32,
                max_batches: int = 100, seed: int = 0, layout: str = "auto", text_field: str = "text",
                cache_dir: str | None = None) -> dict:
    """Scores of the checkpoint `model_dir` on `files` (files, folders, globs), with baselines.

    An ELECTRA discriminator is scored through its generator (`generator/`), the part with an MLM
    head. At most `max_batches` batches of `batch_size` instances are read. The sentence-pair head
    is scored only when the text has two documents or more (its negatives come from another one).
    """
    if os.path.isdir(os.path.join(model_dir, "generator")):
        model_dir = os.path.join(model_dir, "generator")
    config = read_config(model_dir)
    if isinstance(config, GPTConfig):
        raise BertforgeError(f"{model_dir}: a left-to-right language model (GPT-1); evaluate-lm scores masked-LM "
                             "checkpoints (its held-out next-token loss is in the pretraining run's metrics.jsonl)")
    names = set(read_weights(model_dir, config.model_type)[0])
    if dict(head_keys(config.model_type)["mlm"])["bias"] not in names:  # the family's MLM head
        raise BertforgeError(f"{model_dir}: no masked-LM head in this checkpoint ({config.architectures[0]}); "
                             "evaluate-lm needs a pretraining checkpoint (…ForPreTraining or …ForMaskedLM)")
    sentence = next((term for name, term in _SENTENCE_HEADS.items() if name in names), None)
    tokenizer = Tokenizer.from_pretrained(model_dir)
    max_seq_length = min(max_seq_length, config.max_length)
    shards = build_shards(files, tokenizer, cache_dir, layout, text_field, progress=False)
    if shards.num_documents < 2:
        sentence = None  # negatives come from another document: one alone can only score the MLM
    model = load_pretrained(model_dir, cls=BertPretraining, sentence=sentence).eval()
    terms = ("mlm", sentence) if sentence else ("mlm",)
    data = PretrainingData(shards, tokenizer, batch_size, max_seq_length, short_seq_prob=0.0,
                           masking=MaskingOptions(), seed=seed, eval_fraction=0.0, terms=terms)
    data.eval_documents = np.arange(shards.num_documents)  # all of the text is held out

    targets, labels = Counter(), Counter()
    for batch in data.eval_batches(max_batches):
        targets.update(batch["mlm_targets"].tolist())
        if sentence:
            labels.update(batch["sentence_labels"].tolist())
    if not targets:
        raise BertforgeError("no text to evaluate: the files hold no tokens")
    scores = evaluate(model, data, max_batches, contextlib.nullcontext(), torch.device("cpu"))  # fp32
    n = sum(targets.values())
    commonest, count = targets.most_common(1)[0]
    result = {
        "masked_tokens": n, "mlm_accuracy": scores["mlm_accuracy"], "mlm_loss": scores["mlm_loss"],
        "commonest_token": tokenizer.id_to_token(commonest), "commonest_token_accuracy": round(count / n, 5),
        # The loss of a model that knows the frequencies of the masked tokens and nothing else.
        "unigram_loss": round(-sum(c / n * math.log(c / n) for c in targets.values()), 5),
    }
    if sentence:
        result[f"{sentence}_accuracy"] = scores[f"{sentence}_accuracy"]
        result[f"{sentence}_majority"] = round(max(labels.values()) / sum(labels.values()), 5)
    return result


def report(result: dict) -> str:
    """The scores as a few lines, each beside its word-count baseline: accuracies in percent (the
    result itself holds fractions), losses plain."""
    gain = result["mlm_accuracy"] / max(result["commonest_token_accuracy"], 1e-9)
    lines = [f"masked tokens: {result['masked_tokens']:,} (15% of the text, seeded)",
             f"masked-token accuracy {result['mlm_accuracy']:.1%}, always guessing {result['commonest_token']!r} "
             f"{result['commonest_token_accuracy']:.1%} ({gain:.1f}x)",
             f"masked-token loss {result['mlm_loss']:.3f}, word frequencies alone {result['unigram_loss']:.3f}"]
    for term, name in (("nsp", "next-sentence"), ("sop", "sentence-order")):
        if f"{term}_accuracy" in result:
            lines.append(f"{name} accuracy {result[f'{term}_accuracy']:.1%}, majority label "
                         f"{result[f'{term}_majority']:.1%}")
    return "\n".join(lines)
