"""Training the Transformer for translation: parallel text -> a joint sub-word vocabulary -> batches
by token count -> the encoder-decoder under label-smoothed cross-entropy -> the one trainer (exact
resume, precision, torchrun, progress, trackers, run_config.json), with validation loss and BLEU at
each evaluation, and the last checkpoints averaged into the model at the end.

The defaults are the paper's recipe (Vaswani et al., 2017, section 5): Adam with betas (0.9, 0.98)
and eps 1e-9, the inverse-square-root schedule after a linear warm-up, label smoothing 0.1,
dropout 0.1, batches of about 4,096 tokens; the size is the "multi30k" preset (families/marian/config.py).
"""

from __future__ import annotations

import dataclasses
import json
import os

import torch

from .card import write_card
from .checkpoint import read_config
from .checks import check_options
from .data.cove_vocab import CoveTokenizer, check_coverage, describe_coverage
from .data.parallel import TokenBatches, TranslationTokenizer, encode_pairs, parallel_files, read_parallel
from .errors import BertforgeError
from .families import family_of, resolve, translation_archs
from .formats.word_vectors import read_vectors
from .hub import model_path
from .losses import TranslationObjective
from .paths import check_apart, fingerprint
from .replay import run_arguments
from .scoring import corpus_scores
from .scoring import load_sacrebleu
from .training.checkpoints import check_same_settings, latest_checkpoint
from .training.distributed import distributed_setup
from .training.trainer import TrainOptions
from .training.budget import whole_command
from .training.trainer import train as train_model
from .translate import DecodeOptions, translate

TOKENIZER_DIR = "tokenizer"


# --arch -> the translation family it builds (`families.translation_archs`): each family's record has
# its config, presets, model and schedule. Runs of the default arch keep no "arch" in run_config.json.
DEFAULT_ARCH = "transformer"
# Fine-tuning a trained model (--init): a small rate, as Hugging Face's translation fine-tuning
# examples for OPUS-MT use (2e-5 to 5e-5), reached after a short warm-up.
INIT_SCHEDULE = (5e-5, 100)
# train_translation's keywords that are no option of the command (not saved as the command's)
PYTHON_ONLY = ("save_every", "progress")


@whole_command
def train_translation(source_lang: str, target_lang: str, train: str, dev: str, out: str, *,
                      arch: str = DEFAULT_ARCH, word_vectors: str | None = None, init: str | None = None,
                      min_vector_coverage: float = 0.5, preset: str | None = None,
                      vocab_size: int = 8000, vocab_kind: str = "bpe", batch_tokens: int = 4096,
                      max_seq_length: int = 256, steps: int | None = None, max_minutes: float | None = None,
                      lr: float | None = None, warmup: float | None = None, schedule: str = "inverse-sqrt",
                      label_smoothing: float = 0.1,
                      dropout: float | None = None, eval_every: int = 500, bleu_sentences: int = 500,
                      average: int = 5, pre_ln: bool = False, untie_output: bool = False, precision: str = "auto",
                      seed: int = 0, resume: bool = False, report_to: list[str] | None = None,
                      save_every: int | None = None, progress: bool = True, overrides: dict | None = None) -> dict:
    """`bertforge train-translation` from Python: train a translation model from `train` to `dev`
    (each a prefix of line-aligned files `PREFIX.<lang>`, or a JSON-lines file of {"translation":
    {...}}) into `out`; returns the trainer's summary with the final validation scores. Every keyword
    is the command's option of the same name (its argparse dest), with the command's default; None
    is "not given", and is resolved here, for the command line and Python alike: the peak rate and
    warm-up are the arch's (its family's `schedule`), the size its family's default. `arch`:
    "transformer" (the paper's, one joint sub-word vocabulary), "lstm" (CoVe's attentional LSTM over
    the fixed `word_vectors`, a GloVe or word2vec file; sub-words on the target side only), or a
    registered translation family's (`families.translation_archs`). `warmup`: steps,
    or a fraction (< 1) of `steps`. `schedule`: after the warm-up, the paper's "inverse-sqrt", or a
    "linear" or "cosine" decay to 0 at the end of `steps` or of the `max_minutes` budget. `average`: the model written to `out/model` is the mean of the
    last that many checkpoints of the run's last quarter (1: the last alone). `init`: a translation
    Transformer to fine-tune (a MarianMT directory, ours or a published OPUS-MT one, or a Hugging Face
    Hub name), whose vocabulary and size the run keeps (no `preset`), with `INIT_SCHEDULE`'s rate.
    The Python API's own: `save_every` (default: `eval_every`), `progress`, and `overrides`, fields of
    the model's config."""
    given = {name: value for name, value in locals().items() if name != "overrides"}
    check_options(given, "train-translation")
    plan = _plan(given, overrides)
    if bleu_sentences:
        load_sacrebleu()  # before any work, not at the first evaluation
    # oneDNN caches a bf16 kernel per shape with its scratch memory (MBs each), 1,024 of them by
    # default; batches of varying shapes filled 15 GB in an hour. Read once, at the process's
    # first kernel, so this bounds the command line's runs (and any process that sets it itself).
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "128")
    # the run's files never replace, nor land among, what it reads (a prefix stands for its two files)
    check_apart(out, word_vectors,
                *[[p, f"{p}.{source_lang}", f"{p}.{target_lang}"] for p in (train, dev)])
    vectors = read_vectors(word_vectors) if word_vectors else None
    train_pairs = read_parallel(train, source_lang, target_lang)
    valid_pairs = read_parallel(dev, source_lang, target_lang)
    run_config = _run_config(given, plan)
    rank, world, _ = distributed_setup()
    tokenizer = _tokenizer(out, plan.family, rank, world, resume, run_config,
                           lambda: resolve(plan.family.tokenizer).from_pretrained(plan.init) if plan.init is not None
                           else _new_tokenizer(train_pairs, vocab_size, vocab_kind, vectors))
    if vectors is not None:  # words without a vector all read the one zero vector: how many are they?
        run_config["vector_coverage"] = tokenizer.coverage(s for s, _ in train_pairs)
        check_coverage(run_config["vector_coverage"], min_vector_coverage, word_vectors)
    data = TokenBatches(encode_pairs(train_pairs, tokenizer), batch_tokens, tokenizer.pad_id, seed=seed,
                        valid=encode_pairs(valid_pairs, tokenizer), max_length=max_seq_length, rank=rank, world=world)
    if progress and rank == 0:
        print(f"data: {data.describe()}", flush=True)
        if vectors is not None:
            print(f"word vectors: {describe_coverage(run_config['vector_coverage'])}", flush=True)
    torch.manual_seed(seed)
    model = TranslationObjective(_backbone(plan, tokenizer, vectors, given), label_smoothing)
    options = TrainOptions(out=out, steps=steps, max_minutes=max_minutes, lr=plan.lr, warmup=plan.warmup,
                           schedule=schedule, weight_decay=0.0, betas=(0.9, 0.98), eps=1e-9,
                           precision=precision, eval_every=eval_every, save_every=save_every or eval_every,
                           keep=max(average, 2), seed=seed, progress=progress, report_to=tuple(report_to or ()))
    evaluator = Validation(data, tokenizer, _fitting(valid_pairs, tokenizer, max_seq_length)[:bleu_sentences])
    # the options as given go beside the settings (not compared on resume): the model card's command
    saved = {**run_config, "kept_pairs": len(data.pairs), "skipped_pairs": data.skipped,
             **run_arguments("train-translation", {k: v for k, v in given.items() if k not in PYTHON_ONLY})}
    summary = train_model(model, data, options, tokenizer, saved, resume, evaluator)
    if summary["status"] != "interrupted" and rank == 0:
        _finish(summary, model, tokenizer, evaluator, out, average)
    return summary


@dataclasses.dataclass
class _Plan:
    """What the options resolve to before any data is read."""
    family: object
    init: str | None
    init_config: object
    preset: str
    lr: float
    warmup: int
    overrides: dict


def _plan(o: dict, overrides: dict | None) -> _Plan:
    """The arch's family and size, the schedule (the arch's, or `INIT_SCHEDULE` from --init) and the
    model's overrides, each checked against the others."""
    archs = translation_archs()
    if o["arch"] not in archs:
        raise BertforgeError(f"unknown arch {o['arch']!r}; choose one of {', '.join(archs)}")
    family = archs[o["arch"]]
    layout = {"normalize_before": o["pre_ln"], "tie_word_embeddings": o["untie_output"]}  # --pre-ln, --untie-output
    if any(layout.values()) and not set(layout) <= {f.name for f in dataclasses.fields(family.config)}:
        raise BertforgeError(f"--pre-ln and --untie-output are not for --arch {o['arch']}")
    overrides = {**(overrides or {}), **({"normalize_before": True} if o["pre_ln"] else {}),
                 **({"dropout": o["dropout"]} if o["dropout"] is not None else {}),
                 **({"tie_word_embeddings": False} if o["untie_output"] else {})}
    init = model_path(o["init"]) if o["init"] is not None else None  # a Hub name: its folder in the cache
    init_config = _init_config(init, family, o["preset"], o["pre_ln"] or o["untie_output"]) if init else None
    schedule = INIT_SCHEDULE if init is not None else family.schedule
    warmup = o["warmup"]
    if warmup is not None and warmup < 1:  # a fraction, as pretrain's and finetune's --warmup
        if o["steps"] is None:
            raise BertforgeError(f"--warmup {warmup}: a fraction of the steps needs --steps (or give steps)")
        warmup = max(1, round(warmup * o["steps"]))
    preset = o["preset"] or family.default_preset
    if preset not in family.presets:
        raise BertforgeError(f"unknown preset {preset!r} for --arch {o['arch']}; choose one of "
                             f"{', '.join(family.presets)}")
    if o["source_lang"] == o["target_lang"]:
        raise BertforgeError(f"the source and target languages are both {o['source_lang']!r}")
    if family.word_vectors != (o["word_vectors"] is not None):
        readers = " or ".join(a for a, f in archs.items() if f.word_vectors)
        raise BertforgeError(f"--word-vectors goes with --arch {readers}, which reads them (bertforge word-vectors "
                             "makes some)" if o["word_vectors"] else
                             f"--arch {o['arch']} reads fixed word vectors: give --word-vectors FILE")
    return _Plan(family, init, init_config, preset, schedule[0] if o["lr"] is None else o["lr"],
                 schedule[1] if warmup is None else int(warmup), overrides)


def _run_config(o: dict, plan: _Plan) -> dict:
    """The settings a resume must share (check_same_settings), under the names runs have always saved."""
    run_config = {"task": "translation", "source_lang": o["source_lang"], "target_lang": o["target_lang"],
                  "train": os.path.abspath(o["train"]), "valid": os.path.abspath(o["dev"]), "preset": plan.preset,
                  "vocab_size": o["vocab_size"], "vocab_kind": o["vocab_kind"], "max_tokens": o["batch_tokens"],
                  "max_length": o["max_seq_length"], "label_smoothing": o["label_smoothing"],
                  "overrides": plan.overrides}
    if o["arch"] != DEFAULT_ARCH:  # (absent for the default, as in runs made before other archs, which still resume)
        run_config["arch"] = o["arch"]
    if o["schedule"] != "inverse-sqrt":  # likewise absent for the default
        run_config["schedule"] = o["schedule"]
    if o["word_vectors"]:
        run_config["word_vectors"] = os.path.abspath(o["word_vectors"])
    if plan.init is not None:  # (absent when not given, as in runs made before --init, which still resume)
        run_config.update(init=os.path.abspath(plan.init), preset=None, vocab_size=None, vocab_kind=None)
    # what the files held: resuming over other text at the same paths is refused (check_same_settings)
    files = [f for p in (o["train"], o["dev"]) for f in parallel_files(p, o["source_lang"], o["target_lang"])]
    run_config["data"] = fingerprint(files + ([o["word_vectors"]] if o["word_vectors"] else []))
    return run_config


def _backbone(plan: _Plan, tokenizer, vectors, o: dict):
    """The encoder-decoder (the --init model's weights, or the fixed word vectors, in place), its
    positions checked against the longest pairs kept."""
    config = _config(plan.family, plan.preset, tokenizer, vectors, plan.overrides) if plan.init_config is None \
        else _config_of_init(plan.init_config, plan.family, tokenizer, plan.overrides, plan.init)
    if o["max_seq_length"] > config.max_position_embeddings:  # a kept pair would not fit: said before any step
        raise BertforgeError(f"--max-seq-length {o['max_seq_length']} is more than the "
                             f"{config.max_position_embeddings:,} positions of preset {plan.preset} (its "
                             f"max_position_embeddings): give --max-seq-length {config.max_position_embeddings} "
                             "or less")
    backbone = resolve(plan.family.encoder)(config)
    if plan.init is not None and not o["resume"]:  # a resumed run's checkpoint holds the weights
        resolve(plan.family.checkpoint + ":load")(backbone, plan.init)
    if vectors is not None and not o["resume"]:  # a resumed run's checkpoint holds them
        with torch.no_grad():
            backbone.encoder.vectors.weight.copy_(torch.from_numpy(tokenizer.vector_matrix(*vectors)))
    return backbone


def _finish(summary: dict, model, tokenizer, evaluator, out: str, average: int) -> None:
    """The last checkpoints averaged into out/model, scored again; BLEU's signature beside its score;
    the model card."""
    if average > 1:
        summary["averaged"] = average_into_model(model, tokenizer, out, average)
        summary["eval"] = evaluator(model)
    if evaluator.signature:  # what the BLEU figure is, beside it (greedy, the first validation pairs)
        summary["eval"] = {**summary["eval"], "bleu_sentences": len(evaluator.pairs), "bleu_decoding": "greedy",
                           "bleu_signature": evaluator.signature}
    with open(os.path.join(out, "run_config.json"), encoding="utf-8") as f:
        write_card(os.path.join(out, "model"), {**json.load(f), "averaged": summary.get("averaged")},
                   summary["eval"], summary["step"])


def _new_tokenizer(pairs, vocab_size: int, kind: str, vectors):
    """The joint sub-word vocabulary of both sides (the Transformer's), or with word vectors CoVe's:
    their words on the source side, sub-words learned on the target side."""
    if vectors is None:
        return TranslationTokenizer.train((text for pair in pairs for text in pair), vocab_size, kind)
    return CoveTokenizer.build(vectors[0], (s for s, _ in pairs), (t for _, t in pairs), vocab_size, kind)


def _fitting(pairs, tokenizer, max_length: int) -> list[tuple[str, str]]:
    """The pairs whose source fits `max_length` tokens: those BLEU translates (a longer one would
    stop the run at its first evaluation; the validation loss skips them too, and the log counts them)."""
    lengths = [len(ids) for ids in tokenizer.encode_source_batch([s for s, _ in pairs])]
    return [pair for pair, length in zip(pairs, lengths) if length <= max_length]


def _init_config(init: str, family, preset: str | None, new_layout: bool):
    """The config of the model directory `init` to fine-tune: a translation Transformer's, whose size
    and vocabulary the run keeps."""
    if preset is not None or new_layout:
        raise BertforgeError("--init fine-tunes a model as it is: --preset, --pre-ln and --untie-output do not go "
                             "with it")
    config = read_config(init)
    if family_of(config).name != family.name:
        raise BertforgeError(f"{init}: a {family_of(config).describe} model; --init reads a {family.describe} "
                             "(a MarianMT directory: ours, or a published OPUS-MT model)")
    return config


def _config_of_init(config, family, tokenizer, overrides: dict, init: str):
    """`config` with `overrides` (--dropout), and its vocabulary the tokenizer's."""
    fields = {f.name for f in dataclasses.fields(family.config)}
    foreign = sorted(set(overrides) - fields)
    if foreign:
        raise BertforgeError(f"{', '.join(foreign)}: not a setting of the {family.describe} model")
    if tokenizer.vocab_size != config.vocab_size:
        raise BertforgeError(f"{init}: its tokenizer has {tokenizer.vocab_size:,} ids where config.json's vocab_size "
                             f"is {config.vocab_size:,}")
    return dataclasses.replace(config, **overrides)


def _config(family, preset: str, tokenizer, vectors, overrides: dict):
    fields = {f.name for f in dataclasses.fields(family.config)}
    foreign = sorted(set(overrides) - fields)
    if foreign:  # --pre-ln, --untie-output: the Transformer's
        raise BertforgeError(f"{', '.join(foreign)}: not a setting of the {family.describe} model")
    sizes = {"vocab_size": tokenizer.vocab_size, "pad_token_id": tokenizer.pad_id, "eos_token_id": tokenizer.eos_id}
    if vectors is not None:
        sizes.update(source_vocab_size=tokenizer.source_vocab_size, word_dim=vectors[1].shape[1],
                     source_lowercase=tokenizer.lowercase)
    return family.preset_config(preset, **{**sizes, **overrides})


class Validation:
    """What each evaluation reports: the validation loss and token accuracy (as in training, with
    label smoothing), and BLEU of greedy translations of the first validation sentences."""

    def __init__(self, data: TokenBatches, tokenizer, pairs: list[tuple[str, str]]):
        self.data, self.tokenizer, self.pairs = data, tokenizer, pairs
        self.signature = None  # sacreBLEU's, once BLEU has been computed

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
            scores = corpus_scores(hyps, [t for _, t in self.pairs])
            metrics["bleu"] = round(scores["bleu"], 2)  # sacreBLEU's 0-100 scale, as the field reports it
            self.signature = scores["signatures"]["bleu"]
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
