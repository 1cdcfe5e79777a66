"""The pretraining recipe: corpus -> tokenizer -> shards -> instances -> masked batches -> the loop,
for BERT, its descendants and GPT, by objective name (`families.objective_names()`)."""

from __future__ import annotations

import json
import os

import torch
import torch.distributed as dist

from .atomic import atomic_directory
from .checks import check
from .data.batches import MaskingOptions, PretrainingData
from .data.corpus import corpus_sentences, find_files
from .data.shards import build_shards, shard_key
from .errors import BertforgeError
from .formats.hf import head_keys, load_into, parts, read_config, read_weights
from .models.bert import Dropout
from .paths import check_apart
from .families import FAMILIES, Family, Objective, resolve
from .families import objective as find_objective
from .plan import Plan
from .recipe import pretraining_plan, vocabulary_size
from .data.tokenizer import KINDS, Tokenizer
from .training.checkpoints import latest_checkpoint
from .training.distributed import distributed_setup
from .training.trainer import TrainOptions, train


def build_objective(name: str, config, generator_fraction: float = 0.25, terms: tuple[str, ...] | None = None):
    """The objective module for `name` over a model of `config` (of the objective's family), with
    the objective's loss terms or the given subset of them."""
    _, chosen = find_objective(name)
    return resolve(chosen.build)(config, terms or chosen.terms, generator_fraction)


def masking_options(name: str, **given) -> MaskingOptions:
    """The objective's masking, with any option the user gave (None: not given) taking precedence."""
    return MaskingOptions(**{**find_objective(name)[1].masking, **{k: v for k, v in given.items() if v is not None}})


def pretrain(corpus, out: str, preset: str | None = None, tokenizer: str | None = None, vocab_size: int | None = None,
             lowercase: bool = True, max_seq_length: int = 128, batch_size: int | None = None,
             short_seq_prob: float = 0.1, masking: MaskingOptions | None = None, layout: str = "auto",
             text_field: str = "text", cache_dir: str | None = None, eval_fraction: float = 0.02,
             resume: bool = False, options: TrainOptions | None = None, model_overrides: dict | None = None,
             objective: str = "bert", generator_fraction: float = 0.25, vocab_kind: str | None = None,
             recipe: str = "small-budget", positions: str | None = None, dropout: float | None = None,
             init: str | None = None, command_line: dict | None = None, layer_norm: str | None = None,
             plan: Plan | None = None) -> dict:
    """Pretrain an encoder with `objective` (a name of `families.objective_names()`: bert, roberta, span, albert,
    electra, modernbert; or GPT-1's decoder with gpt) on `corpus` (files, folders, globs) and write it under `out`.

    The tokenizer is, in order: the one saved with the checkpoint being resumed, the HF directory
    `tokenizer`, or a new vocabulary of `vocab_size` (default: by the corpus's size, see
    `recipe.vocabulary_size`) learned on the corpus, of `vocab_kind` (`tokenizer.KINDS`; default
    GPT-1's `</w>` BPE for gpt, WordPiece for the others).

    `init` continues pretraining an existing HF checkpoint of the objective's family (domain
    adaptation): its tokenizer, config and weights, a fresh optimizer, and the heads it lacks
    started fresh; a sentence-pair term (NSP, SOP) is dropped when it has no head for it. `preset`
    and `positions` are then the checkpoint's, and the learning rate defaults to the fine-tuning
    rate of its width (`recipe.finetuning_lr`).

    `preset` defaults to a size that suits the budget (`recipe.default_preset`). `recipe` (see
    `recipe.RECIPES`) gives every other default not passed: `positions` ("rotary" trains a
    RoFormer, BERT with rotary positions, for the objectives bert and span; "absolute" BERT's
    learned position table), `dropout` (while pretraining only: the saved config keeps the
    preset's, for fine-tuning), and without `options` or `masking` the learning rate, warm-up,
    betas and masking rate. `batch_size` defaults to the objective's. `command_line` (the CLI's
    command and options, `replay.run_arguments`) is saved at the top of run_config.json, for `--config`
    to replay the run. `plan` (`settings_plan`) replaces all the defaults above when the caller has
    resolved them already, as `pretrain_with_recipe` has. Returns the trainer's summary.
    """
    family, record = find_objective(objective)
    if family.pipeline != "subword":
        raise BertforgeError(f"{objective} is a word-level recurrent language model: call "
                             "bertforge.pretrain_recurrent (the CLI's pretrain --objective takes both)")
    for name, value in (("vocab_size", vocab_size), ("max_seq_length", max_seq_length), ("batch_size", batch_size),
                        ("short_seq_prob", short_seq_prob), ("eval_fraction", eval_fraction),
                        ("generator_fraction", generator_fraction), ("dropout", dropout)):
        check(name, value)
    check_apart(os.path.join(out, "model"), init)  # the model is written to out/model
    start, terms = continued(init, objective, tokenizer) if init else (None, record.terms)
    saved = _saved_run_config(out) if resume else None
    if plan is None:  # called from Python: the arguments given, on top of the recipe
        given = {"preset": preset, "recipe": recipe, "positions": positions, "dropout": dropout,
                 "layer_norm": layer_norm, "batch_size": batch_size}
        if options is not None:
            given.update(lr=options.lr, warmup=options.warmup, betas=options.betas, schedule=options.schedule,
                         clip=options.clip)
        if masking is not None:
            given["mask_prob"] = masking.mask_prob
        plan = settings_plan(objective, given, init=init, resume=resume, out=out,
                             max_minutes=options.max_minutes if options else None)
    preset, positions, dropout, batch_size = plan["preset"], plan["positions"], plan["dropout"], plan["batch_size"]
    layer_norm = plan.get("layer_norm") or family.layer_norms[0]
    if vocab_kind is not None and (tokenizer or init or resume):
        raise BertforgeError("a vocabulary kind applies only to a vocabulary learned on the corpus: drop it, or drop "
                             "--tokenizer/--init/--resume")
    vocab_kind = vocab_kind or family.vocab_kind
    if vocab_kind not in KINDS:
        raise BertforgeError(f"unknown vocabulary kind {vocab_kind!r}; choose one of {', '.join(KINDS)}")
    options = options or TrainOptions(out=out, lr=plan["lr"], warmup=plan["warmup"], betas=plan["betas"],
                                      schedule=plan["schedule"], clip=plan["clip"])
    options.out = out
    masking = masking or masking_options(objective, mask_prob=plan["mask_prob"])
    files = find_files(corpus)
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
    facts = {"model": config.to_dict(), "shards": shards.directory,
             "train_documents": len(data.train_documents), "eval_documents": len(data.eval_documents)}
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


def pretrain_with_recipe(corpus, out: str, *, objective: str = "bert", preset: str | None = None,
                         recipe: str = "small-budget", positions: str | None = None, layer_norm: str | None = None,
                         generator_fraction: float = 0.25, tokenizer: str | None = None, init: str | None = None,
                         vocab_size: int | None = None, cased: bool = False, vocab_kind: str | None = None,
                         steps: int | None = None, max_minutes: float | None = None, resume: bool = False,
                         max_seq_length: int = 128, batch_size: int | None = None, short_seq_prob: float = 0.1,
                         layout: str = "auto", text_field: str = "text", cache_dir: str | None = None,
                         eval_fraction: float = 0.02, mask_prob: float | None = None, replace_prob: float | None = None,
                         random_prob: float | None = None, whole_word: bool = False, masking: str | None = None,
                         lr: float | None = None, beta2: float | None = None, warmup: float | None = None,
                         dropout: float | None = None, schedule: str | None = None, weight_decay: float = 0.01,
                         accum: int = 1, clip: float | None = None, precision: str = "auto", compile: bool = False,
                         seed: int = 0, log_every: int = 10, eval_every: int = 200, eval_batches: int = 20,
                         save_every: int = 500, keep: int = 2, quiet: bool = False,
                         report_to: list[str] | None = None, command_line: dict | None = None) -> dict:
    """`bertforge pretrain` of a BERT-family objective or GPT-1, from Python: the options are the
    command's, under its names and with its defaults (None: not given). `settings_plan` fills in
    what was not given (the recipe's defaults at the size the budget picks, a continued checkpoint's,
    a resumed run's); the settings are printed with where they came from (unless `quiet`), then
    `pretrain` runs on them, and how it ended is printed. Returns its summary. The CLI's pretrain command and the demo call it."""
    family, record = find_objective(objective)
    if preset and preset not in family.presets:
        raise BertforgeError(f"--preset {preset} is not a size for --objective {objective}; choose one of "
                             f"{', '.join(sorted(family.presets))}")
    if layer_norm and len(family.layer_norms) < 2:
        raise BertforgeError(f"--layer-norm is GPT's choice: not for --objective {objective}")
    given = [flag for flag, value in (("--mask-prob", mask_prob), ("--masking", masking),
                                      ("--whole-word", whole_word or None), ("--replace-prob", replace_prob),
                                      ("--random-prob", random_prob)) if value is not None]
    if not record.masks and given:
        raise BertforgeError(f"{family.describe} predicts every next token and masks nothing: drop {', '.join(given)}")
    plan = settings_plan(objective, {
        "recipe": recipe, "preset": preset, "positions": positions, "layer_norm": layer_norm, "lr": lr,
        "warmup": warmup, "betas": None if beta2 is None else (0.9, beta2), "dropout": dropout, "schedule": schedule,
        "mask_prob": mask_prob, "batch_size": batch_size, "clip": clip}, init=init, resume=resume, out=out,
        max_minutes=max_minutes)
    if not quiet:
        print(settings_line(plan, record, init), flush=True)
    options = TrainOptions(
        lr=plan["lr"], betas=plan["betas"], out=out, steps=steps, max_minutes=max_minutes, warmup=plan["warmup"],
        schedule=plan["schedule"], weight_decay=weight_decay, accum=accum, clip=plan["clip"],
        precision=precision, log_every=log_every, eval_every=eval_every,
        eval_batches=eval_batches, save_every=save_every, keep=keep, seed=seed,
        progress=not quiet, compile=compile, report_to=report_to or (),
    )
    chosen_masking = masking_options(objective, mask_prob=plan["mask_prob"], replace_prob=replace_prob,
                                     random_prob=random_prob, whole_word=whole_word or None, scheme=masking)
    result = pretrain(
        corpus, out, objective=objective, generator_fraction=generator_fraction,
        preset=preset, tokenizer=tokenizer, vocab_size=vocab_size,
        lowercase=not cased, vocab_kind=vocab_kind, max_seq_length=max_seq_length,
        batch_size=batch_size,
        short_seq_prob=short_seq_prob, masking=chosen_masking, layout=layout, text_field=text_field,
        cache_dir=cache_dir, eval_fraction=eval_fraction, resume=resume, options=options,
        recipe=recipe, positions=positions, dropout=dropout, init=init, command_line=command_line,
        layer_norm=layer_norm, plan=plan,
    )
    print(f"{result['status']} at step {result['step']} after {result['elapsed_s']:.0f}s; model in "
          f"{out}/model, checkpoints in {out}/checkpoints")
    return result


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
