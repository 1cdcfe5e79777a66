"""Training the Transformer for translation: parallel text -> a joint sub-word vocabulary -> batches
by token count -> the encoder-decoder under label-smoothed cross-entropy -> the one trainer (exact
resume, precision, torchrun, progress, trackers, run_config.json), with validation loss and BLEU at
each evaluation, and the last checkpoints averaged into the model at the end.

The defaults are the paper's recipe (Vaswani et al., 2017, section 5): Adam with betas (0.9, 0.98)
and eps 1e-9, the inverse-square-root schedule after a linear warm-up, label smoothing 0.1,
dropout 0.1, batches of about 4,096 tokens; the size is the "multi30k" preset (config/marian.py).
"""

from __future__ import annotations

import dataclasses
import json
import os

import torch

from .card import write_card
from .data.cove_vocab import CoveTokenizer, describe_coverage
from .data.parallel import TokenBatches, TranslationTokenizer, encode_pairs, read_parallel
from .errors import BertforgeError
from .families import family_of, resolve
from .formats.word_vectors import read_vectors
from .models.translation import TranslationObjective
from .scoring import corpus_scores
from .scoring import load_sacrebleu
from .training.checkpoints import check_same_settings, latest_checkpoint
from .training.distributed import distributed_setup
from .training.trainer import TrainOptions, train
from .translate import DecodeOptions, translate

TOKENIZER_DIR = "tokenizer"


# --arch -> the model type it builds; each family's record has its config, presets and model.
ARCHITECTURES = {"transformer": "marian", "lstm": "cove"}
# Peak learning rate and warm-up steps of each arch's inverse-square-root schedule. The paper's
# warm-up is 4,000 steps of 25k-token batches; 1,000 of 4k suit Multi30k's hour. An LSTM needs
# little warm-up (OpenNMT's Adam recipe has none): measured on Multi30k en-de, lr 2e-3 with 200
# steps gave validation BLEU 22.0 at step 1,000 where the Transformer's 1e-3 and 1,000 gave 13.4.
SCHEDULES = {"transformer": (1e-3, 1000), "lstm": (2e-3, 200)}


def train_translation(source_lang: str, target_lang: str, train_path: str, valid_path: str, out: str,
                      preset: str | None = None, vocab_size: int = 8000, vocab_kind: str = "bpe",
                      max_tokens: int = 4096, max_length: int = 256, steps: int | None = None,
                      max_minutes: float | None = None, lr: float | None = None, warmup: int | None = None,
                      label_smoothing: float = 0.1, eval_every: int = 500, bleu_sentences: int = 500,
                      average: int = 5, save_every: int | None = None, precision: str = "auto", seed: int = 0,
                      resume: bool = False, progress: bool = True, report_to: tuple = (),
                      overrides: dict | None = None, command_line: dict | None = None, arch: str = "transformer",
                      word_vectors: str | None = None) -> dict:
    """Train a translation model from `train_path` to `valid_path` (each a prefix of line-aligned
    files `PREFIX.<lang>`, or a JSON-lines file of {"translation": {...}}) into `out`; returns the
    trainer's summary with the final validation scores. `arch`: "transformer" (the paper's, one
    joint sub-word vocabulary) or "lstm" (CoVe's attentional LSTM over the fixed `word_vectors`,
    a GloVe or word2vec file; sub-words on the target side only). `preset`: a size of the arch's
    family (default: its default). `average`: the model written to `out/model` is the mean of the
    last that many checkpoints of the run's last quarter (1: the last alone)."""
    if arch not in ARCHITECTURES:
        raise BertforgeError(f"unknown arch {arch!r}; choose one of {', '.join(ARCHITECTURES)}")
    family = family_of(ARCHITECTURES[arch])
    lr = SCHEDULES[arch][0] if lr is None else lr
    warmup = SCHEDULES[arch][1] if warmup is None else warmup
    preset = preset or family.default_preset
    if preset not in family.presets:
        raise BertforgeError(f"unknown preset {preset!r} for --arch {arch}; choose one of {', '.join(family.presets)}")
    if source_lang == target_lang:
        raise BertforgeError(f"the source and target languages are both {source_lang!r}")
    if (arch == "lstm") != (word_vectors is not None):
        raise BertforgeError("--word-vectors goes with --arch lstm, which reads them (bertforge word-vectors makes some)"
                             if word_vectors else "--arch lstm reads fixed word vectors: give --word-vectors FILE")
    if bleu_sentences:
        load_sacrebleu()  # before any work, not at the first evaluation
    # oneDNN caches a bf16 kernel per shape with its scratch memory (MBs each), 1,024 of them by
    # default; batches of varying shapes filled 15 GB in an hour. Read once, at the process's
    # first kernel, so this bounds the command line's runs (and any process that sets it itself).
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "128")
    vectors = read_vectors(word_vectors) if word_vectors else None
    train_pairs = read_parallel(train_path, source_lang, target_lang)
    valid_pairs = read_parallel(valid_path, source_lang, target_lang)
    run_config = {"task": "translation", "source_lang": source_lang, "target_lang": target_lang,
                  "train": os.path.abspath(train_path), "valid": os.path.abspath(valid_path), "preset": preset,
                  "vocab_size": vocab_size, "vocab_kind": vocab_kind, "max_tokens": max_tokens,
                  "max_length": max_length, "label_smoothing": label_smoothing, "overrides": overrides or {}}
    if word_vectors:  # (absent for the Transformer, as in runs made before the LSTM, which still resume)
        run_config.update(arch=arch, word_vectors=os.path.abspath(word_vectors))
    rank, world, _ = distributed_setup()
    tokenizer = _tokenizer(out, family, rank, world, resume, run_config,
                           lambda: _new_tokenizer(train_pairs, vocab_size, vocab_kind, vectors))
    if vectors is not None:  # words without a vector all read the one zero vector: how many are they?
        run_config["vector_coverage"] = tokenizer.coverage(s for s, _ in train_pairs)
    data = TokenBatches(encode_pairs(train_pairs, tokenizer), max_tokens, tokenizer.pad_id, seed=seed,
                        valid=encode_pairs(valid_pairs, tokenizer), max_length=max_length, rank=rank, world=world)
    if progress and rank == 0:
        print(f"data: {data.describe()}", flush=True)
        if vectors is not None:
            print(f"word vectors: {describe_coverage(run_config['vector_coverage'])}", flush=True)
    torch.manual_seed(seed)
    config = _config(family, preset, tokenizer, vectors, overrides or {})
    backbone = resolve(family.encoder)(config)
    if vectors is not None and not resume:  # a resumed run's checkpoint holds them
        with torch.no_grad():
            backbone.encoder.vectors.weight.copy_(torch.from_numpy(tokenizer.vector_matrix(*vectors)))
    model = TranslationObjective(config, label_smoothing, backbone)
    options = TrainOptions(out=out, steps=steps, max_minutes=max_minutes, lr=lr, warmup=warmup,
                           schedule="inverse-sqrt", weight_decay=0.0, betas=(0.9, 0.98), eps=1e-9,
                           precision=precision, eval_every=eval_every, save_every=save_every or eval_every,
                           keep=max(average, 2), seed=seed, progress=progress, report_to=tuple(report_to))
    evaluator = Validation(data, tokenizer, valid_pairs[:bleu_sentences])
    summary = train(model, data, options, tokenizer, {**(command_line or {}), **run_config,
                                                      "kept_pairs": len(data.pairs), "skipped_pairs": data.skipped},
                    resume, evaluator)
    if average > 1 and summary["status"] != "interrupted" and rank == 0:
        summary["averaged"] = average_into_model(model, tokenizer, out, average)
        summary["eval"] = evaluator(model)
        with open(os.path.join(out, "run_config.json"), encoding="utf-8") as f:
            write_card(os.path.join(out, "model"), {**json.load(f), "averaged": summary["averaged"]}, summary["eval"],
                       summary["step"])
    return summary


def _new_tokenizer(pairs, vocab_size: int, kind: str, vectors):
    """The joint sub-word vocabulary of both sides (the Transformer's), or with word vectors CoVe's:
    their words on the source side, sub-words learned on the target side."""
    if vectors is None:
        return TranslationTokenizer.train((text for pair in pairs for text in pair), vocab_size, kind)
    return CoveTokenizer.build(vectors[0], (s for s, _ in pairs), (t for _, t in pairs), vocab_size, kind)


def _config(family, preset: str, tokenizer, vectors, overrides: dict):
    fields = {f.name for f in dataclasses.fields(family.config)}
    foreign = sorted(set(overrides) - fields)
    if foreign:  # --pre-ln, --untie-output: the Transformer's
        raise BertforgeError(f"{', '.join(foreign)}: not a setting of the {family.describe} model")
    sizes = {"vocab_size": tokenizer.vocab_size, "pad_token_id": tokenizer.pad_id, "eos_token_id": tokenizer.eos_id}
    if vectors is not None:
        sizes.update(source_vocab_size=tokenizer.source_vocab_size, word_dim=vectors[1].shape[1],
                     source_lowercase=tokenizer.lowercase)
    return family.config(**{**family.presets[preset], **sizes, **overrides})


class Validation:
    """What each evaluation reports: the validation loss and token accuracy (as in training, with
    label smoothing), and BLEU of greedy translations of the first validation sentences."""

    def __init__(self, data: TokenBatches, tokenizer, pairs: list[tuple[str, str]]):
        self.data, self.tokenizer, self.pairs = data, tokenizer, pairs

    def __call__(self, objective) -> dict:
        was = objective.training
        objective.eval()
        device = next(objective.parameters()).device
        loss = correct = count = 0.0
        with torch.no_grad():
            for batch in self.data.eval_batches(None):
                batch = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
                losses, right = objective(batch)
                loss, correct, count = loss + float(losses["mt"]), correct + float(right["mt"]), count + batch["counts"]["mt"]
        metrics = {"loss": round(loss / max(count, 1), 5), "accuracy": round(correct / max(count, 1), 5)}
        if self.pairs:
            hyps = translate(objective.backbone, self.tokenizer, [s for s, _ in self.pairs], DecodeOptions(beam=1))
            metrics["bleu"] = round(corpus_scores(hyps, [t for _, t in self.pairs])["bleu"] / 100, 5)
        objective.train(was)
        return metrics


def _tokenizer(out: str, family, rank: int, world: int, resume: bool, run_config: dict, make):
    """The run's vocabulary: made by `make()` and saved by process 0 (the others wait, then read it),
    or on resuming the one saved (after checking the data settings are the run's)."""
    path = os.path.join(out, TOKENIZER_DIR)
    cls = resolve(family.tokenizer)
    if rank == 0:
        if resume:
            if latest_checkpoint(out) is None:
                raise BertforgeError(f"{out}: no checkpoint to resume from")
            check_same_settings(out, run_config)
        elif latest_checkpoint(out):
            raise BertforgeError(f"{out} already holds checkpoints: pass --resume to continue, or choose another --out")
        else:
            make().save_pretrained(path)
    if world > 1:
        torch.distributed.barrier()
    return cls.from_pretrained(path)


def last_stretch(checkpoints: list[str], count: int) -> list[str]:
    """The newest `count` of `checkpoints` (oldest first) written in the last quarter of the run's
    steps. The paper averaged checkpoints 10 minutes apart at the end of 100k steps; the newest five
    of a short run can reach back to its first minutes (a resumed 1,500-step LSTM averaged steps
    483 and 500 in and scored 11.5 BLEU against its last checkpoint's 19.1)."""
    from .training.checkpoints import CHECKPOINT

    steps = [int(CHECKPOINT.match(os.path.basename(c)).group(1)) for c in checkpoints]
    return [c for c, step in zip(checkpoints[-count:], steps[-count:]) if step >= 0.75 * steps[-1]]


def average_into_model(objective, tokenizer, out: str, count: int) -> list[str]:
    """Load the mean of the weights of the newest `count` checkpoints of the last stretch
    (`last_stretch`) into `objective` and write it to `out/model` (checkpoint averaging, as the
    paper's base models). Returns the checkpoints used."""
    from .training.checkpoints import all_checkpoints, write_model

    load_weights = resolve(family_of(objective.backbone.config).checkpoint + ":load")
    chosen = last_stretch(all_checkpoints(out), count)
    total = None
    for directory in chosen:
        load_weights(objective, directory)
        state = {k: v.detach().clone().double() for k, v in objective.backbone.state_dict().items()}
        total = state if total is None else {k: total[k] + v for k, v in state.items()}
    averaged = {k: (v / len(chosen)).to(objective.backbone.state_dict()[k].dtype) for k, v in total.items()}
    objective.backbone.load_state_dict(averaged)
    write_model(objective, tokenizer, os.path.join(out, "model"), -1)
    return [os.path.basename(d) for d in chosen]
