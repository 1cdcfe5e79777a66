"""The pretraining recipe: corpus -> tokenizer -> shards -> instances -> masked batches -> the loop,
for BERT, its descendants and GPT, by objective name (`families.objective_names()`)."""

from __future__ import annotations

import inspect
import json
import os
import warnings

import torch
import torch.distributed as dist

from .atomic import atomic_directory
from .checks import check_options
from .data.held_out import check_resumable
from .data.batches import MaskingOptions, PretrainingData
from .data.corpus import corpus_sentences, find_files
from .data.shards import build_shards, shard_key
from .errors import BertforgeError
from .checkpoint import read_config
from .formats.hf import head_keys, load_into, parts, read_weights
from .nn.layers import Dropout
from .paths import check_apart
from .families import FAMILIES, Family, Objective, resolve
from .families import objective as find_objective
from .plan import Plan
from .recipe import pretraining_plan, vocabulary_size
from .replay import run_arguments
from .data.tokenizer import KINDS, Tokenizer
from .training.checkpoints import latest_checkpoint
from .training.distributed import distributed_setup
from .training.tracking import check_reporters
from .training.trainer import TrainOptions, train
from .training.budget import whole_command


def build_objective(name: str, config, generator_fraction: float = 0.25, terms: tuple[str, ...] | None = None):
    """The objective module for `name` over a model of `config` (of the objective's family), with
    the objective's loss terms or the given subset of them."""
    _, chosen = find_objective(name)
    return resolve(chosen.build)(config, terms or chosen.terms, generator_fraction)


def masking_options(name: str, **given) -> MaskingOptions:
    """The objective's masking, with any option the user gave (None: not given) taking precedence."""
    return MaskingOptions(**{**find_objective(name)[1].masking, **{k: v for k, v in given.items() if v is not None}})


@whole_command
def pretrain(corpus, out: str, *, objective: str = "bert", preset: str | None = None, recipe: str = "small-budget",
             positions: str | None = None, layer_norm: str | None = None, generator_fraction: float = 0.25,
             tokenizer: str | None = None, init: str | None = None, vocab_size: int | None = None,
             cased: bool = False, vocab_kind: str | None = None, steps: int | None = None,
             max_minutes: float | None = None, resume: bool = False, max_seq_length: int = 128,
             batch_size: int | None = None, short_seq_prob: float = 0.1, layout: str = "auto",
             text_field: str = "text", cache_dir: str | None = None, eval_fraction: float = 0.02,
             mask_prob: float | None = None, replace_prob: float | None = None, random_prob: float | None = None,
             whole_word: bool = False, masking: str | MaskingOptions | None = None, lr: float | None = None,
             beta2: float | None = None, warmup: float | None = None, dropout: float | None = None,
             schedule: str | None = None, weight_decay: float = 0.01, accum: int = 1, clip: float | None = None,
             precision: str = "auto", compile: bool = False, seed: int = 0, bptt: int | None = None,
             min_count: int = 2, no_rules: bool = False, backwards: bool = False, dropout_scale: float = 1.0,
             sampled_softmax: int | None = None, log_every: int = 10, eval_every: int = 200, eval_batches: int = 20,
             save_every: int = 500, keep: int = 2, quiet: bool = False, report_to: list[str] | None = None,
             options: TrainOptions | None = None, model_overrides: dict | None = None) -> dict:
    """`bertforge pretrain` from Python: pretrain `objective` (a name of `families.objective_names()`:
    bert, roberta, span, albert, electra, modernbert, gpt; or the recurrent awd-lstm and elmo, which
    go to `pretrain_recurrent`) on `corpus` (files, folders, globs) into `out`. Every keyword is the
    command's option of the same name (its argparse dest), with the command's default; None is "not
    given". What is not given is resolved as the command resolves it (`settings_plan`): the recipe's
    values at the size the budget (`steps`, `max_minutes`: at least one) picks, a continued
    checkpoint's (`init`), a resumed run's. The settings are printed with where they came from
    (unless `quiet`) and saved in run_config.json with their sources and the options as given (its
    "command" and "args", which `bertforge pretrain --config` replays). Returns the trainer's summary.

    The tokenizer is, in order: the one saved with the checkpoint being resumed, the HF directory
    `tokenizer`, or a new vocabulary of `vocab_size` (default: by the corpus's size, see
    `recipe.vocabulary_size`) learned on the corpus, of `vocab_kind` (`tokenizer.KINDS`; default
    GPT-1's `</w>` BPE for gpt, WordPiece for the others). `init` continues pretraining an existing
    HF checkpoint of the objective's family (domain adaptation): its tokenizer, config and weights,
    a fresh optimizer, and the heads it lacks started fresh; a sentence-pair term (NSP, SOP) is
    dropped when it has no head for it.

    Two keywords are the Python API's own: `options`, a whole `TrainOptions` whose every field is
    taken as given (the budget, rates and logging then come from it alone; the plan still fills
    preset, positions, dropout and masking), and `model_overrides`, config fields set on the new
    model. `masking` may also be a whole `MaskingOptions`, taken as given.
    """
    given = {name: value for name, value in locals().items() if name not in PYTHON_ONLY}
    corpus = [os.fspath(corpus)] if isinstance(corpus, (str, os.PathLike)) else [os.fspath(c) for c in corpus]
    given["corpus"] = corpus
    check_options(given, "pretrain")
    check_reporters(report_to)  # a tracker's missing package, before any work
    _check_budget_and_options(given, options, masking)
    if options is not None and (options.lr, options.warmup, tuple(options.betas)) == DEFAULT_RATES:
        warnings.warn("options=TrainOptions(...) is taken as given: its defaults lr 1e-4, 1% warm-up and beta2 0.999 "
                      "are BERT's 2018 settings, which learn little in a small budget; the command line's recipe "
                      "comes with keywords instead: pretrain(corpus, out, max_minutes=..., preset=...)", stacklevel=3)
    # The options as given, saved for `--config` to replay: when every setting is one an option can say.
    replayable = options is None and not isinstance(masking, MaskingOptions) and not model_overrides
    command_line = run_arguments("pretrain", given) if replayable else None
    family, record = find_objective(objective)
    if family.pipeline == "word":
        return _pretrain_recurrent(given, options, model_overrides, command_line)
    _check_subword_options(given, family, record)
    plan, options, masking = resolve_run(given, options, masking)
    if not quiet and options.progress:
        print(settings_line(plan, record, init), flush=True)
    return _pretrain(corpus, out, plan, options, masking, objective=objective, generator_fraction=generator_fraction,
                     tokenizer=tokenizer, init=init, vocab_size=vocab_size, lowercase=not cased, vocab_kind=vocab_kind,
                     max_seq_length=max_seq_length, short_seq_prob=short_seq_prob, layout=layout,
                     text_field=text_field, cache_dir=cache_dir, eval_fraction=eval_fraction, resume=resume,
                     model_overrides=model_overrides, command_line=command_line)


# TrainOptions' own rates, which a TrainOptions built without them keeps (see `pretrain`'s warning).
DEFAULT_RATES = (TrainOptions.lr, TrainOptions.warmup, TrainOptions.betas)
# The keywords of `pretrain` that are not options of the command.
PYTHON_ONLY = ("options", "model_overrides")
# The options of the recurrent objectives alone (see `_pretrain_recurrent`).
RECURRENT = ("bptt", "min_count", "no_rules", "backwards", "dropout_scale", "sampled_softmax")
# The options a TrainOptions carries: with `options`, they are its to say.
TRAINING = ("steps", "max_minutes", "lr", "beta2", "warmup", "schedule", "weight_decay", "accum", "clip",
            "precision", "compile", "seed", "log_every", "eval_every", "eval_batches", "save_every", "keep", "quiet",
            "report_to")
MASKING = ("mask_prob", "replace_prob", "random_prob", "whole_word")


PRETRAIN_DEFAULTS = {name: p.default for name, p in inspect.signature(pretrain).parameters.items()
                     if p.default is not inspect.Parameter.empty}


def _check_budget_and_options(given: dict, options: TrainOptions | None, masking) -> None:
    """A budget is given, and nothing twice: with a whole `options` (or `masking`), the keywords
    that it carries are left at their defaults."""
    if options is None and given["steps"] is None and given["max_minutes"] is None:
        raise BertforgeError("give a budget: --steps, --max-minutes, or both")
    for whole, names, what in ((options, TRAINING, "options"), (masking, MASKING, "masking")):
        if whole is None or what == "masking" and not isinstance(whole, MaskingOptions):
            continue
        twice = [name for name in names if given[name] != PRETRAIN_DEFAULTS[name]]
        if twice:
            raise BertforgeError(f"{', '.join(twice)}: given with {what}={type(whole).__name__}(...), which says "
                                 f"them already; put them in it, or drop it")


def _check_subword_options(given: dict, family: Family, record: Objective) -> None:
    """The options given are ones the objective of BERT's family (or GPT-1) takes."""
    objective, preset = record.name, given["preset"]
    wrong = [f"--{name.replace('_', '-')}" for name in RECURRENT if given[name] != PRETRAIN_DEFAULTS[name]]
    if wrong:
        raise BertforgeError(f"{', '.join(wrong)}: for the recurrent objectives (awd-lstm, elmo), not {objective}")
    if preset and preset not in family.presets:
        raise BertforgeError(f"--preset {preset} is not a size for --objective {objective}; choose one of "
                             f"{', '.join(sorted(family.presets))}")
    if given["layer_norm"] and len(family.layer_norms) < 2:
        raise BertforgeError(f"--layer-norm is GPT's choice: not for --objective {objective}")
    chosen = [f"--{name.replace('_', '-')}" for name in ("mask_prob", "masking", *MASKING[1:])
              if given[name] not in (None, False)]
    if not record.masks and chosen:
        raise BertforgeError(f"{family.describe} predicts every next token and masks nothing: drop {', '.join(chosen)}")


def resolve_run(given: dict, options: TrainOptions | None = None,
                masking: str | MaskingOptions | None = None) -> tuple[Plan, TrainOptions, MaskingOptions]:
    """What a pretraining run with the options `given` (`pretrain`'s keywords) does: its settings
    (`settings_plan`), its TrainOptions and its masking; a whole `options` or `masking` taken as given."""
    g = given
    settings = {"recipe": g["recipe"], "preset": g["preset"], "positions": g["positions"], "layer_norm": g["layer_norm"],
                "lr": g["lr"], "warmup": g["warmup"], "betas": None if g["beta2"] is None else (0.9, g["beta2"]),
                "dropout": g["dropout"], "schedule": g["schedule"], "mask_prob": g["mask_prob"],
                "batch_size": g["batch_size"], "clip": g["clip"]}
    if options is not None:  # every field of a TrainOptions counts as given
        settings.update(lr=options.lr, warmup=options.warmup, betas=options.betas, schedule=options.schedule,
                        clip=options.clip)
    if isinstance(masking, MaskingOptions):
        settings["mask_prob"] = masking.mask_prob
    plan = settings_plan(g["objective"], settings, init=g["init"], resume=g["resume"], out=g["out"],
                         max_minutes=options.max_minutes if options else g["max_minutes"])
    if options is None:
        options = TrainOptions(
            out=g["out"], steps=g["steps"], max_minutes=g["max_minutes"], lr=plan["lr"], betas=plan["betas"],
            warmup=plan["warmup"], schedule=plan["schedule"], weight_decay=g["weight_decay"], accum=g["accum"],
            clip=plan["clip"], precision=g["precision"], log_every=g["log_every"], eval_every=g["eval_every"],
            eval_batches=g["eval_batches"], save_every=g["save_every"], keep=g["keep"], seed=g["seed"],
            progress=not g["quiet"], compile=g["compile"], report_to=g["report_to"] or ())
    if not isinstance(masking, MaskingOptions):
        masking = masking_options(g["objective"], mask_prob=plan["mask_prob"], replace_prob=g["replace_prob"],
                                  random_prob=g["random_prob"], whole_word=g["whole_word"] or None, scheme=masking)
    return plan, options, masking


def _pretrain_recurrent(given: dict, options: TrainOptions | None, model_overrides: dict | None,
                        command_line: dict | None) -> dict:
    """`pretrain` of a word-level recurrent language model (AWD-LSTM, ELMo): the options of BERT's
    family refused, the objective's and stage's optimisation (`pretrain_recurrent.default_options`)
    under those given, then `pretrain_recurrent`."""
    from .pretrain_recurrent import default_options, pretrain_recurrent

    objective = given["objective"]
    subword = [f"--{name.replace('_', '-')}" for name in (
        "mask_prob", "masking", "whole_word", "replace_prob", "random_prob", "positions", "layer_norm", "tokenizer",
        "vocab_kind", "dropout", "cased") if given[name] not in (None, False)]
    if model_overrides:
        subword.append("model_overrides")
    if subword:
        raise BertforgeError(f"{', '.join(subword)}: not for --objective {objective} (a word-level LSTM "
                             "language model; see the recurrent options)")
    sizes = find_objective(objective)[0].presets
    if given["preset"] and given["preset"] not in sizes:
        raise BertforgeError(f"--preset {given['preset']} is not a size for --objective {objective}; choose one of "
                             f"{', '.join(sizes)}")
    g = given
    options = options or default_options(
        g["out"], g["init"], objective, lr=g["lr"], warmup=g["warmup"], schedule=g["schedule"], clip=g["clip"],
        betas=None if g["beta2"] is None else (0.8, g["beta2"]), steps=g["steps"], max_minutes=g["max_minutes"],
        weight_decay=g["weight_decay"], accum=g["accum"], precision=g["precision"], log_every=g["log_every"],
        eval_every=g["eval_every"], eval_batches=g["eval_batches"], save_every=g["save_every"], keep=g["keep"],
        seed=g["seed"], progress=not g["quiet"], compile=g["compile"], report_to=g["report_to"] or ())
    return pretrain_recurrent(
        g["corpus"], g["out"], objective, preset=g["preset"], init=g["init"], vocab_size=g["vocab_size"] or 60000,
        min_freq=g["min_count"], rules=not g["no_rules"], bptt=g["bptt"], batch_size=g["batch_size"],
        layout=g["layout"], text_field=g["text_field"], eval_fraction=g["eval_fraction"], resume=g["resume"],
        options=options, backwards=g["backwards"], dropout_scale=g["dropout_scale"],
        sampled_softmax=g["sampled_softmax"], command_line=command_line)


def _pretrain(files, out: str, plan: Plan, options: TrainOptions, masking: MaskingOptions, *, objective: str,
              generator_fraction: float, tokenizer: str | None, init: str | None, vocab_size: int | None,
              lowercase: bool, vocab_kind: str | None, max_seq_length: int, short_seq_prob: float, layout: str,
              text_field: str, cache_dir: str | None, eval_fraction: float, resume: bool,
              model_overrides: dict | None, command_line: dict | None) -> dict:
    """The run `pretrain` resolved: its `plan` (`settings_plan`), training `options` and `masking`."""
    family, record = find_objective(objective)
    check_apart(os.path.join(out, "model"), init)  # the model is written to out/model
    start, terms = continued(init, objective, tokenizer) if init else (None, record.terms)
    saved = _saved_run_config(out) if resume else None
    preset, positions, dropout, batch_size = plan["preset"], plan["positions"], plan["dropout"], plan["batch_size"]
    layer_norm = plan.get("layer_norm") or family.layer_norms[0]
    if vocab_kind is not None and (tokenizer or init or resume):
        raise BertforgeError("a vocabulary kind applies only to a vocabulary learned on the corpus: drop it, or drop "
                             "--tokenizer/--init/--resume")
    vocab_kind = vocab_kind or family.vocab_kind
    if vocab_kind not in KINDS:
        raise BertforgeError(f"unknown vocabulary kind {vocab_kind!r}; choose one of {', '.join(KINDS)}")
    options.out = out
    files = find_files(files)
    run_config = {
        "objective": objective, "corpus": [os.path.abspath(f) for f in files], "preset": preset,
        "generator_fraction": generator_fraction if record.generator else None, "max_seq_length": max_seq_length,
        "batch_size": batch_size, "short_seq_prob": short_seq_prob, "masking": vars(masking),
        "layout": layout, "text_field": text_field, "eval_fraction": eval_fraction, "seed": options.seed,
        "recipe": plan["recipe"], "positions": positions, "pretraining_dropout": dropout,
        "layer_norm": layer_norm if len(family.layer_norms) > 1 else None,
        "init": os.path.abspath(init) if init else None, "terms": list(terms), "sources": plan.sources(),
    }
    rank, world, _ = distributed_setup()
    tok = _run_tokenizer(out, files, tokenizer or init, resume, run_config, saved, vocab_size, lowercase, vocab_kind,
                         options.progress, rank, world)
    if rank == 0:
        shards = build_shards(files, tok, cache_dir, layout, text_field, progress=options.progress)
    _barrier(world)
    if rank != 0:
        shards = build_shards(files, tok, cache_dir, layout, text_field, progress=False)

    config = start or family.call("new_config", preset, tok, record, positions, layer_norm, model_overrides)
    if max_seq_length > config.max_length:
        raise BertforgeError(f"max_seq_length {max_seq_length} exceeds the model's {config.max_length} positions")
    data = PretrainingData(shards, tok, batch_size, max_seq_length, short_seq_prob, masking, options.seed,
                           eval_fraction, rank, world, options.accum, terms=terms)
    torch.manual_seed(options.seed)  # the initial weights are part of what the seed fixes
    model = build_objective(objective, config, generator_fraction, terms)
    if init and not resume:
        for sub, part in parts(model).items():  # ELECTRA: the discriminator, and its generator/
            load_into(part, os.path.join(init, sub) if sub else init, new_heads=True)
    set_dropout(model, dropout)
    facts = {"model": config.to_dict(), "shards": shards.directory, **data.split_facts()}
    return train(model, data, options, tok, {**(command_line or {}), **run_config, **facts}, resume)


def settings_plan(objective: str, given: dict, *, init: str | None = None, resume: bool = False,
                  out: str | None = None, max_minutes: float | None = None) -> Plan:
    """The run's settings (`recipe.pretraining_plan`), with the checkpoint continued (`init`) or
    the run resumed in `out` read for their layers, checked against what the family can build."""
    family, record = find_objective(objective)
    if init and given.get("preset"):
        raise BertforgeError("--init continues a checkpoint of its own size: drop --preset")
    start = read_config(init) if init else None
    saved = _saved_run_config(out) if resume else None
    plan = pretraining_plan(objective, given, max_minutes=max_minutes, start=start, init=init, saved=saved)
    check_positions(family, record, plan["positions"])
    if start is not None and plan["positions"] != start.positions:
        raise BertforgeError(f"{init}: its positions are {start.positions}; drop --positions {plan['positions']}")
    _check_layer_order(family, plan.get("layer_norm"), start, init)
    if plan.get("layer_norm") == "post" and plan["positions"] == "rotary":  # checked here, before any work
        raise BertforgeError("rotary positions come in the pre-LayerNorm order only (saved as GPT-NeoX): drop "
                             "--layer-norm post, or add --positions absolute for GPT-1's learned table")
    return plan


def check_positions(family: Family, record: Objective, positions: str) -> None:
    """The positions asked for are ones the objective's family can be saved with."""
    if positions not in ("absolute", "rotary"):
        raise BertforgeError(f"unknown positions {positions!r}; choose absolute or rotary")
    if positions in record.positions:
        return
    if positions == "rotary":
        rotary = [o.name for f in FAMILIES for o in f.objectives if "rotary" in o.positions]
        raise BertforgeError(f"rotary positions need --objective {', '.join(rotary[:-1])} or {rotary[-1]} "
                             f"(transformers has no rotary {record.model_type}); use --positions absolute")
    raise BertforgeError(f"{family.describe}'s positions are {record.positions[0]}: drop --positions {positions}")


def _check_layer_order(family: Family, order: str | None, start, init: str | None) -> None:
    """The layer order chosen is one the family builds, and a continued checkpoint's own."""
    if order is None:
        return
    if order not in ("pre", "post"):
        raise BertforgeError(f"unknown layer norm order {order!r}; choose pre or post")
    if order not in family.layer_norms:
        raise BertforgeError(f"--layer-norm {order}: {family.describe} models are built in one order "
                             f"({family.layer_norms[0]}-LayerNorm); drop it")
    if start is not None and order != start.layer_norm:
        raise BertforgeError(f"{init}: its layer order is {start.layer_norm}; drop --layer-norm {order}")


def _run_tokenizer(out: str, files: list[str], given: str | None, resume: bool, run_config: dict, saved: dict | None,
                   vocab_size: int | None, lowercase: bool, kind: str, show: bool, rank: int, world: int) -> Tokenizer:
    """The run's tokenizer: the resumed run's, the directory `given`, or a vocabulary learned on
    `files` (saved under `out/tokenizer` either way)."""
    if resume:
        return _resume_tokenizer(out, given, run_config, saved)
    if latest_checkpoint(out):
        raise BertforgeError(f"{out} already holds checkpoints: pass --resume to continue, or choose another --out")
    tokenizer_dir = os.path.join(out, "tokenizer")
    if given:
        tok = Tokenizer.from_pretrained(given)
    elif rank == 0:
        if vocab_size is None:
            size = sum(os.path.getsize(f) * (4 if f.endswith(".gz") else 1) for f in files)
            vocab_size = vocabulary_size(size)
            _log_vocabulary(vocab_size, size, show)
        tok = Tokenizer.train(texts=corpus_sentences(files, run_config["layout"], run_config["text_field"]),
                              vocab_size=vocab_size, lowercase=lowercase, show_progress=show, kind=kind)
    if rank == 0:
        with atomic_directory(tokenizer_dir) as tmp:
            tok.save_pretrained(tmp)
    _barrier(world)
    return Tokenizer.from_pretrained(tokenizer_dir)


# How the settings line names a decoder's layer order.
LAYER_ORDERS = {"pre": ", GPT-2's layer order", "post": ", GPT-1's layer order"}


def settings_line(plan: Plan, record: Objective, init: str | None) -> str:
    """What a run will do, printed at its start: the settings, then those that are not the recipe's."""
    masked = f"masking {plan['mask_prob']:.0%}" if record.masks else "left-to-right, nothing masked"
    order = LAYER_ORDERS.get(plan.get("layer_norm"), "")
    others = plan.not_from("default", f"recipe {plan['recipe']}")
    return (f"{init or plan['preset']}, objective {record.name}, recipe {plan['recipe']}: {plan['positions']} "
            f"positions{order}, peak lr {plan['lr']:g}, warm-up {plan['warmup']:g}, {plan['schedule']} decay, "
            f"beta2 {plan['betas'][1]:g}, dropout {plan['dropout']:g} while pretraining, {masked} (each has a flag; "
            f"all saved in run_config.json{'; ' + others if others else ''})")


def set_dropout(model: torch.nn.Module, p: float) -> None:
    """Every dropout of `model` (hidden, attention, heads) set to `p`, leaving the config alone, so
    that a model pretrained without dropout is still saved with the dropout fine-tuning wants."""
    for module in model.modules():
        if hasattr(module, "dropout_p"):  # attention probabilities
            module.dropout_p = p
        elif isinstance(module, (Dropout, torch.nn.Dropout)):
            module.p = p


# What must not change between a run and its resumption: the data stream and the model depend on all of it.
RESUME_KEYS = ("objective", "generator_fraction", "corpus", "max_seq_length", "batch_size", "short_seq_prob", "masking",
               "layout", "text_field", "eval_fraction", "seed", "positions", "pretraining_dropout", "init", "terms",
               "layer_norm")


def continued(init: str, objective: str, tokenizer: str | None) -> tuple[object, tuple]:
    """What continuing the checkpoint `init` with `objective` starts from: its config, and the
    objective's terms less a sentence-pair term the checkpoint has no head for (printed)."""
    if tokenizer:
        raise BertforgeError("--init brings the checkpoint's own tokenizer: drop --tokenizer")
    config = read_config(init)
    _, record = find_objective(objective)
    if not record.can_continue(config.model_type):
        own = next((o.name for f in FAMILIES for o in f.objectives if o.can_continue(config.model_type)), None)
        raise BertforgeError(f"{init}: a {config.model_type} checkpoint; continue it with --objective {own}")
    terms = record.terms
    names = set(read_weights(init, config.model_type)[0])
    heads = head_keys(config.model_type)
    for term in ("nsp", "sop"):
        if term in terms and not {theirs for _, theirs in heads.get("nsp", [])} & names:
            print(f"{init} has no {term.upper()} head: continuing with masked LM alone", flush=True)
            terms = tuple(t for t in terms if t != term)
    return config, terms


def _saved_run_config(out: str) -> dict:
    """The run_config.json of the run in `out` that is being resumed (which must have a checkpoint)."""
    if not os.path.isdir(out):
        raise BertforgeError(f"{out}: no such directory to resume from")
    if latest_checkpoint(out) is None:
        raise BertforgeError(f"{out}: no checkpoint to resume from")
    saved_path = os.path.join(out, "run_config.json")
    try:
        with open(saved_path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise BertforgeError(f"{saved_path}: cannot be read ({e})") from None


def _resume_tokenizer(out: str, tokenizer: str | None, run_config: dict, saved: dict) -> Tokenizer:
    """The tokenizer saved with the latest checkpoint, after checking the run's data settings
    (`run_config`) against those it was saved with (`saved`)."""
    latest = latest_checkpoint(out)
    check_resumable(out, saved)
    # A key a run did not record (made by an older version) had the value of the old default.
    changed = [f"{k} ({saved.get(k)!r} then, {run_config[k]!r} now)" for k in RESUME_KEYS
               if k in saved and saved[k] != run_config[k]]
    if changed:
        raise BertforgeError(f"{out}: resuming needs the same data settings; changed: {'; '.join(changed)}")
    tok = Tokenizer.from_pretrained(latest)
    if tokenizer and Tokenizer.from_pretrained(tokenizer).backend.get_vocab() != tok.backend.get_vocab():
        raise BertforgeError(f"{tokenizer}: not the tokenizer the run in {out} was trained with; "
                             "drop --tokenizer to resume with the run's own")
    # The same paths may hold other text now: the shards' key (file sizes and modification times,
    # the tokenizer, the layout) must be the one the run was built from.
    key = shard_key(run_config["corpus"], tok, run_config["layout"], run_config["text_field"])
    if saved.get("shards") and os.path.basename(saved["shards"]) != key:
        raise BertforgeError(f"{out}: the corpus files changed since the run began (sizes or modification times "
                             "differ), so resuming would train on a different stream; restore them or start a new run")
    return tok


def _log_vocabulary(vocab_size: int, corpus_bytes: int, show: bool) -> None:
    if show:
        print(f"learning a {vocab_size:,}-piece vocabulary for a {corpus_bytes / 1e6:.1f} MB corpus (--vocab-size to "
              "change)", flush=True)


def _barrier(world: int) -> None:
    if world > 1:
        dist.barrier()
