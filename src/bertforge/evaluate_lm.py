"""How much a pretrained language model learned, on any text, each score beside what knowing only
word counts gives.

A masked LM (BERT's family, ModernBERT): masked-token accuracy and loss at 15% masking, and
next-sentence (or sentence-order) accuracy where the model has that head, beside always guessing
the commonest token, the loss of token frequencies alone and the majority label. The text is read,
split into documents and masked exactly as pretraining does, all of it held out, from a fixed seed,
so that two evaluations of the same files see the same masks.

A left-to-right LM (GPT-1, AWD-LSTM) or a bidirectional one (ELMo's biLM: the mean of its forward
and backward losses, as the ELMo paper reports perplexity): next-token (or next-word) accuracy,
loss and perplexity, beside the commonest token and the unigram model (the target frequencies of
the same text). The text goes through the data pipeline the family pretrains with: the packed rows
of sub-word tokens, or the word streams of BPTT chunks with the state carried between them.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections import Counter

import numpy as np
import torch

from .data.batches import MaskingOptions, PretrainingData
from .data.corpus import find_files
from .data.shards import build_shards
from .data.streams import LMStreams
from .data.tokenizer import Tokenizer
from .errors import BertforgeError
from .families import family_of, resolve
from .checkpoint import read_config
from .formats.hf import head_keys, load_pretrained, weight_names
from .load import Loaded, load
from .pretrain_recurrent import word_documents
from .training.trainer import evaluate

# The HF name of each family's MLM bias and of its sentence-pair head: which heads a checkpoint has.
_SENTENCE_HEADS = {"cls.seq_relationship.weight": "nsp", "bertforge_nsp.weight": "nsp",
                   "sop_classifier.classifier.weight": "sop"}


def evaluate_lm(model_dir: str, files, max_seq_length: int = 128, batch_size: int = 32,
                max_batches: int = 100, seed: int = 0, layout: str = "auto", text_field: str = "text",
                cache_dir: str | None = None) -> dict:
    """Scores of the checkpoint `model_dir` on `files` (files, folders, globs), with baselines: a
    masked LM's (`masked_lm_scores`), or a left-to-right or bidirectional LM's (`next_token_scores`),
    as the checkpoint's family record says (`Family.lm`).

    An ELECTRA discriminator is scored through its generator (`generator/`), the part with an MLM
    head. At most `max_batches` batches of `batch_size` instances (a recurrent model: streams) of
    `max_seq_length` tokens (a recurrent model: words per chunk) are read.
    """
    if os.path.isdir(os.path.join(model_dir, "generator")):
        model_dir = os.path.join(model_dir, "generator")
    config = read_config(model_dir)
    family = family_of(config)
    family.supports("evaluate-lm", model_dir)
    if family.lm == "masked":
        return masked_lm_scores(model_dir, config, family, files, max_seq_length, batch_size, max_batches, seed,
                                layout, text_field, cache_dir)
    if config.bertforge_task:  # a task model: its head answers the task, not the next word
        raise BertforgeError(f"{model_dir}: no language-model head in this checkpoint (fine-tuned for "
                             f"{config.bertforge_task['name']}); evaluate-lm needs a pretraining checkpoint")
    record = family.objectives[0]
    # The checkpoint's own objective: a native family's is what the loader builds by default.
    loaded = load(model_dir, model=None if family.native else lambda c: resolve(record.build)(c, record.terms),
                  config=config)
    if family.pipeline == "word":
        data = word_streams(loaded, files, max_seq_length, batch_size, seed, layout, text_field)
    else:
        data = token_rows(loaded, files, max_seq_length, batch_size, seed, layout, text_field, cache_dir)
    return next_token_scores(loaded, data, max_batches)


def token_rows(loaded: Loaded, files, max_seq_length: int, batch_size: int, seed: int, layout: str,
               text_field: str, cache_dir: str | None) -> PretrainingData:
    """A sub-word LM's text as its pretraining reads it: packed rows of whole sentences, all held out."""
    shards = build_shards(files, loaded.tokenizer, cache_dir, layout, text_field, progress=False)
    data = PretrainingData(shards, loaded.tokenizer, batch_size, min(max_seq_length, loaded.config.max_length),
                           short_seq_prob=0.0, seed=seed, eval_fraction=0.0, terms=loaded.family.objectives[0].terms)
    data.eval_documents = np.arange(shards.num_documents)  # all of the text is held out
    return data


def word_streams(loaded: Loaded, files, bptt: int, batch_size: int, seed: int, layout: str,
                 text_field: str) -> LMStreams:
    """A recurrent LM's text as its pretraining reads it: `batch_size` contiguous streams of the
    documents in order (fewer for a short text), read in chunks of `bptt` words with the state
    carried, all held out. ELMo's biLM reads a second, reversed stream; a backward AWD-LSTM the
    text reversed."""
    bidirectional = loaded.family.lm == "bidirectional"
    paths = find_files(files)
    documents, encode = word_documents(paths, loaded.tokenizer,
                                       loaded.config.max_characters_per_token if bidirectional else None,
                                       layout, text_field)
    words = sum(len(d) for d in documents)
    if words < 2:
        named = ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
        raise BertforgeError(f"{named}: no text to evaluate ({words} words; a language model needs 2 at least)")
    rows = max(1, min(batch_size, words // (bptt + 1)))  # each stream one chunk long at least
    bptt = min(bptt, words // rows - 1)
    data = LMStreams(documents, rows, bptt, seed, eval_fraction=0.0, variable=False, bidirectional=bidirectional,
                     encode=encode, backwards=not bidirectional and loaded.config.backwards)
    data.eval_documents = data.train_documents  # all of the text, in order, is held out
    return data


def next_token_scores(loaded: Loaded, data, max_batches: int) -> dict:
    """A left-to-right or bidirectional LM's next-token accuracy, loss and perplexity on `data`'s
    held-out batches, beside the commonest target and the unigram model of the same targets."""
    targets = Counter()
    for batch in data.eval_batches(max_batches):
        for key in ("lm_targets", "labels", "backward_labels"):  # the sub-word rows'; the streams' directions
            if key in batch:
                targets.update(batch[key].reshape(-1).tolist())
    if not targets:
        raise BertforgeError("no text to evaluate: the files hold no tokens")
    scores = evaluate(loaded.model, data, max_batches, contextlib.nullcontext(), torch.device("cpu"))  # fp32
    directions = [k[:-len("_loss")] for k in scores if k.endswith("_loss")]  # lm, or forward and backward
    n = sum(targets.values())
    commonest, count = targets.most_common(1)[0]
    unigram = unigram_loss(targets)
    result = {
        "lm": loaded.family.lm, "unit": "word" if loaded.family.pipeline == "word" else "token",
        "predicted": n // len(directions),  # targets per direction
        # `loss` weighs each direction's loss as the objective does: ELMo's biLM the mean of its two.
        "lm_loss": scores["loss"], "lm_accuracy": round(sum(scores[f"{d}_accuracy"] for d in directions)
                                                        / len(directions), 5),
        "perplexity": round(math.exp(scores["loss"]), 3),
        "commonest_token": loaded.tokenizer.id_to_token(commonest), "commonest_token_accuracy": round(count / n, 5),
        # The loss of a model that knows the frequencies of the targets and nothing else (over both
        # directions of a biLM: the mean of its loss on each), and its perplexity.
        "unigram_loss": round(unigram, 5), "unigram_perplexity": round(math.exp(unigram), 3),
    }
    if len(directions) > 1:
        for d in directions:
            result.update({f"{d}_loss": scores[f"{d}_loss"], f"{d}_accuracy": scores[f"{d}_accuracy"],
                           f"{d}_perplexity": round(math.exp(scores[f"{d}_loss"]), 3)})
    return result


def masked_lm_scores(model_dir: str, config, family, files, max_seq_length: int, batch_size: int, max_batches: int,
                     seed: int, layout: str, text_field: str, cache_dir: str | None) -> dict:
    """A masked LM's masked-token accuracy and loss, and its sentence-pair accuracy: that head is
    scored only when the text has two documents or more (its negatives come from another one)."""
    names = weight_names(model_dir)  # the heads it has, before the weights are read (once, below)
    if dict(head_keys(config.model_type)["mlm"])["bias"] not in names:  # the family's MLM head
        raise BertforgeError(f"{model_dir}: no masked-LM head in this checkpoint ({config.architectures[0]}); "
                             "evaluate-lm needs a pretraining checkpoint (…ForPreTraining or …ForMaskedLM)")
    sentence = next((term for name, term in _SENTENCE_HEADS.items() if name in names), None)
    tokenizer = Tokenizer.from_pretrained(model_dir)
    max_seq_length = min(max_seq_length, config.max_length)
    shards = build_shards(files, tokenizer, cache_dir, layout, text_field, progress=False)
    if shards.num_documents < 2:
        sentence = None  # negatives come from another document: one alone can only score the MLM
    model = load_pretrained(model_dir, cls=family.build_masked_lm, config=config, family=family,
                            sentence=sentence).eval()
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
        "unigram_loss": round(unigram_loss(targets), 5),
    }
    if sentence:
        result[f"{sentence}_accuracy"] = scores[f"{sentence}_accuracy"]
        result[f"{sentence}_majority"] = round(max(labels.values()) / sum(labels.values()), 5)
    return result


def unigram_loss(targets: Counter) -> float:
    """The entropy of the targets' frequencies: the mean loss of a model that knows them and nothing else."""
    n = sum(targets.values())
    return -sum(c / n * math.log(c / n) for c in targets.values())


def report(result: dict) -> str:
    """The scores as a few lines, each beside its word-count baseline: accuracies in percent (the
    result itself holds fractions), losses plain."""
    if "perplexity" in result:
        return next_token_report(result)
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


def next_token_report(result: dict) -> str:
    """A left-to-right or bidirectional LM's scores (`next_token_scores`) as a few lines."""
    unit, bidirectional = result["unit"], result["lm"] == "bidirectional"
    ratio = result["unigram_perplexity"] / result["perplexity"]
    than = f"{ratio:.1f}x better" if ratio >= 1 else f"{1 / ratio:.1f}x worse"
    gain = result["lm_accuracy"] / max(result["commonest_token_accuracy"], 1e-9)
    each = ", in each direction: the scores are the mean of both" if bidirectional else ""
    lines = [f"predicted {unit}s: {result['predicted']:,} (every next {unit}{each})",
             f"perplexity {result['perplexity']:.1f}, {unit} frequencies alone {result['unigram_perplexity']:.1f} "
             f"({than})",
             f"next-{unit} accuracy {result['lm_accuracy']:.1%}, always guessing {result['commonest_token']!r} "
             f"{result['commonest_token_accuracy']:.1%} ({gain:.1f}x)",
             f"next-{unit} loss {result['lm_loss']:.3f}, {unit} frequencies alone {result['unigram_loss']:.3f}"]
    if bidirectional:
        lines.append(f"forward perplexity {result['forward_perplexity']:.1f}, backward "
                     f"{result['backward_perplexity']:.1f}")
    return "\n".join(lines)
