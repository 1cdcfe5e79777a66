"""The pretraining recipe: corpus -> tokenizer -> shards -> instances -> masked batches -> the loop,
for BERT and its descendants, chosen by name from `OBJECTIVES`."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from .checks import check
from .config import PRESETS, GPTConfig, gpt_preset, modernbert_preset
from .config import preset as size_preset
from .data.batches import MaskingOptions, PretrainingData
from .data.corpus import corpus_sentences, find_files
from .data.shards import build_shards, shard_key
from .errors import BertforgeError
from .formats.hf import head_keys, load_into, parts, read_config, read_weights
from .models.bert import Dropout
from .objectives import BertPretraining, CausalLMPretraining, ElectraPretraining
from .pretrain_recurrent import RECURRENT_OBJECTIVES
from .recipe import default_preset, pretraining_recipe, vocabulary_size
from .tokenizer import KINDS, Tokenizer
from .training.atomic import atomic_directory
from .training.checkpoints import latest_checkpoint
from .training.trainer import TrainOptions, distributed_setup, train


@dataclass(frozen=True)
class Objective:
    """One pretraining objective: the encoder family, the loss terms (which also decide the inputs:
    sentence pairs for nsp/sop, packed full sentences otherwise), the default masking scheme and
    model settings, and its batch size. Optimisation defaults come from `recipe`."""

    model_type: str
    terms: tuple[str, ...]
    masking: dict = field(default_factory=dict)  # MaskingOptions fields
    model: dict = field(default_factory=dict)
    batch_size: int = 32


OBJECTIVES = {
    # BERT: masked LM + next-sentence prediction on sentence pairs.
    "bert": Objective("bert", ("mlm", "nsp")),
    # RoBERTa: masked LM alone on full sentences packed across documents, dynamic masking; twice
    # BERT's batch (the paper's 8k batches are out of a CPU's reach; its beta2 is in `recipe`).
    "roberta": Objective("roberta", ("mlm",), model={"type_vocab_size": 1}, batch_size=64),
    # SpanBERT: masked whole-word spans + span-boundary objective, single segments, no NSP.
    "span": Objective("bert", ("mlm", "sbo"), masking={"scheme": "span"}),
    # ALBERT: factorised embeddings (E=128), one set of layer weights shared by all layers, n-gram
    # masking + sentence-order prediction.
    "albert": Objective("albert", ("mlm", "sop"), masking={"scheme": "ngram"},
                        model={"embedding_size": 128, "num_hidden_groups": 1}),
    # ELECTRA: a 1/4-width generator fills the masks, the discriminator spots replaced tokens. The
    # generator's input: [MASK] at 85% of the chosen positions, the rest left unchanged and no
    # random tokens (its pretrain_helpers.mask); the discriminator sees samples at all of them.
    "electra": Objective("electra", ("mlm", "rtd"), masking={"replace_prob": 0.85, "random_prob": 0.0}),
    # ModernBERT: masked LM alone (30% in its recipe) on packed full sentences, over its own encoder
    # (pre-LayerNorm, rotary, GeGLU, no biases, local/global attention).
    "modernbert": Objective("modernbert", ("mlm",)),
    # GPT-1: a left-to-right LM over the same packed rows, every next token predicted, nothing masked.
    "gpt": Objective("openai-gpt", ("lm",)),
}


def build_objective(name: str, config, generator_fraction: float = 0.25, terms: tuple[str, ...] | None = None):
    """The objective module for `name` over an encoder of `config` (whose model_type is the objective's),
    with the objective's loss terms or the given subset of them."""
    terms = terms or OBJECTIVES[name].terms
    if name == "electra":
        return ElectraPretraining(config, generator_fraction)
    if name == "gpt":
        return CausalLMPretraining(config)
    sentence = next((t for t in terms if t in ("nsp", "sop")), None)
    return BertPretraining(config, sentence=sentence, span_boundary="sbo" in terms)


def masking_options(name: str, **given) -> MaskingOptions:
    """The objective's masking, with any option the user gave (None: not given) taking precedence."""
    return MaskingOptions(**{**OBJECTIVES[name].masking, **{k: v for k, v in given.items() if v is not None}})


def pretrain(corpus, out: str, preset: str | None = None, tokenizer: str | None = None, vocab_size: int | None = None,
             lowercase: bool = True, max_seq_length: int = 128, batch_size: int | None = None,
             short_seq_prob: float = 0.1, masking: MaskingOptions | None = None, layout: str = "auto",
             text_field: str = "text", cache_dir: str | None = None, eval_fraction: float = 0.02,
             resume: bool = False, options: TrainOptions | None = None, model_overrides: dict | None = None,
             objective: str = "bert", generator_fraction: float = 0.25, vocab_kind: str | None = None,
             recipe: str = "small-budget", positions: str | None = None, dropout: float | None = None,
             init: str | None = None, command_line: dict | None = None, layer_norm: str | None = None) -> dict:
    """Pretrain an encoder with `objective` (a key of `OBJECTIVES`: bert, roberta, span, albert,
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
    to replay the run. Returns the trainer's summary.
    """
    if objective in RECURRENT_OBJECTIVES:
        raise BertforgeError(f"{objective} is a word-level recurrent language model: call "
                             "bertforge.pretrain_recurrent (the CLI's pretrain --objective takes both)")
    if objective not in OBJECTIVES:
        raise BertforgeError(f"unknown objective {objective!r}; choose one of {', '.join(OBJECTIVES)}, "
                             f"or {', '.join(RECURRENT_OBJECTIVES)} (pretrain_recurrent)")
    for name, value in (("vocab_size", vocab_size), ("max_seq_length", max_seq_length), ("batch_size", batch_size),
                        ("short_seq_prob", short_seq_prob), ("eval_fraction", eval_fraction),
                        ("generator_fraction", generator_fraction), ("dropout", dropout)):
        check(name, value)
    terms = OBJECTIVES[objective].terms
    if init:
        start, terms = continued(init, objective, tokenizer, positions)
        positions, preset = start["positions"], None  # the checkpoint's
    else:
        preset = preset or default_preset(options.max_minutes if options else None)
    chosen = pretraining_recipe(recipe, objective, preset, OBJECTIVES[objective].model_type,
                                continued_width=start["config"].hidden_size if init else None)
    recipe = OBJECTIVES[objective]
    positions = positions or chosen.positions
    dropout = chosen.dropout if dropout is None else dropout
    if positions not in ("absolute", "rotary"):
        raise BertforgeError(f"unknown positions {positions!r}; choose absolute or rotary")
    if init and isinstance(start["config"], GPTConfig):  # the checkpoint's order
        own = "pre" if start["config"].pre_norm else "post"
        if layer_norm not in (None, own):
            raise BertforgeError(f"{init}: its layer order is {own}; drop --layer-norm {layer_norm}")
        layer_norm = own
    saved = _saved_run_config(out) if resume else None
    if resume and layer_norm is None and recipe.model_type == "openai-gpt":
        # the run's own order; a run saved before the order was a choice had GPT-1's
        layer_norm = saved.get("layer_norm", "post")
    layer_norm = layer_norm or chosen.layer_norm
    if layer_norm not in ("pre", "post"):
        raise BertforgeError(f"unknown layer norm order {layer_norm!r}; choose pre or post")
    if layer_norm == "pre" and recipe.model_type != "openai-gpt":
        raise BertforgeError("--layer-norm pre is GPT-2's order, for --objective gpt (ModernBERT's is pre by design)")
    if positions == "rotary" and recipe.model_type == "openai-gpt":
        raise BertforgeError("GPT-1's positions are learned (absolute): drop --positions rotary")
    if positions == "rotary" and recipe.model_type not in ("bert", "modernbert"):
        raise BertforgeError(f"rotary positions need --objective bert, span or modernbert (transformers has no "
                             f"rotary {recipe.model_type}); use --positions absolute")
    if positions == "absolute" and recipe.model_type == "modernbert":
        raise BertforgeError("ModernBERT's positions are rotary: drop --positions absolute")
    if vocab_kind is not None and (tokenizer or init or resume):
        raise BertforgeError("a vocabulary kind applies only to a vocabulary learned on the corpus: drop it, or drop "
                             "--tokenizer/--init/--resume")
    vocab_kind = vocab_kind or ("bpe" if objective == "gpt" else "wordpiece")
    if vocab_kind not in KINDS:
        raise BertforgeError(f"unknown vocabulary kind {vocab_kind!r}; choose one of {', '.join(KINDS)}")
    options = options or TrainOptions(out=out, lr=chosen.lr, warmup=chosen.warmup, betas=chosen.betas,
                                      schedule=chosen.schedule)
    options.out = out
    masking = masking or masking_options(objective, mask_prob=chosen.mask_prob)
    batch_size = batch_size or recipe.batch_size
    rank, world, _ = distributed_setup()
    files = find_files(corpus)
    run_config = {
        "objective": objective, "corpus": [os.path.abspath(f) for f in files], "preset": preset,
        "generator_fraction": generator_fraction if objective == "electra" else None, "max_seq_length": max_seq_length,
        "batch_size": batch_size, "short_seq_prob": short_seq_prob, "masking": vars(masking),
        "layout": layout, "text_field": text_field, "eval_fraction": eval_fraction, "seed": options.seed,
        "recipe": chosen.name, "positions": positions, "pretraining_dropout": dropout,
        "layer_norm": layer_norm if recipe.model_type == "openai-gpt" else None,
        "init": os.path.abspath(init) if init else None, "terms": list(terms),
    }
    tokenizer_dir = os.path.join(out, "tokenizer")
    if resume:
        tok = _resume_tokenizer(out, tokenizer, run_config, saved)
    else:
        if latest_checkpoint(out):
            raise BertforgeError(f"{out} already holds checkpoints: pass --resume to continue, or choose another --out")
        if tokenizer or init:
            tok = Tokenizer.from_pretrained(tokenizer or init)
        elif rank == 0:
            if vocab_size is None:
                size = sum(os.path.getsize(f) * (4 if f.endswith(".gz") else 1) for f in files)
                vocab_size = vocabulary_size(size)
                _log_vocabulary(vocab_size, size, options.progress)
            tok = Tokenizer.train(texts=corpus_sentences(files, layout, text_field), vocab_size=vocab_size,
                                  lowercase=lowercase, show_progress=options.progress,
                                  kind=vocab_kind)
        if rank == 0:
            with atomic_directory(tokenizer_dir) as tmp:
                tok.save_pretrained(tmp)
        _barrier(world)
        tok = Tokenizer.from_pretrained(tokenizer_dir)

    if rank == 0:
        shards = build_shards(files, tok, cache_dir, layout, text_field, progress=options.progress)
    _barrier(world)
    if rank != 0:
        shards = build_shards(files, tok, cache_dir, layout, text_field, progress=False)

    if init:
        config = start["config"]
    elif recipe.model_type == "modernbert":
        ids = {f"{name}_token_id": tok_id for name, tok_id in (("cls", tok.cls_id), ("sep", tok.sep_id),
                                                               ("bos", tok.cls_id), ("eos", tok.sep_id))}
        config = modernbert_preset(preset, vocab_size=tok.vocab_size, pad_token_id=tok.pad_id, **ids,
                                   **(model_overrides or {}))
    elif recipe.model_type == "openai-gpt":  # rows start with [CLS] and documents end with [SEP]
        config = gpt_preset(preset, vocab_size=tok.vocab_size, pad_token_id=tok.pad_id, bos_token_id=tok.cls_id,
                            eos_token_id=tok.sep_id, model_type="gpt2" if layer_norm == "pre" else "openai-gpt",
                            **(model_overrides or {}))
    else:
        model_type = "roformer" if positions == "rotary" else recipe.model_type
        overrides = {"vocab_size": tok.vocab_size, "pad_token_id": tok.pad_id, "model_type": model_type,
                     **recipe.model, **(model_overrides or {})}
        if recipe.model_type == "roberta":  # room for RoBERTa's position offset (514 rows for 512 tokens)
            overrides.setdefault("max_position_embeddings", 512 + tok.pad_id + 1)
        config = size_preset(preset, **overrides)
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
    command's, under its names and with its defaults (None: not given). The recipe's defaults
    (`recipe.pretraining_recipe`, at the size `recipe.default_preset` picks for the budget) fill in
    what was not given; the settings chosen are printed (unless `quiet`), then `pretrain` runs, and
    how it ended is printed. Returns its summary. The CLI's pretrain command and the demo call it."""
    if preset and preset not in PRESETS:
        raise BertforgeError(f"--preset {preset} is a recurrent model's size; choose one of "
                             f"{', '.join(sorted(PRESETS))}")
    clip = 1.0 if clip is None else clip
    # The recipe's defaults, then every flag given on top of them.
    if init and preset:
        raise BertforgeError("--init continues a checkpoint of its own size: drop --preset")
    preset = None if init else preset or default_preset(max_minutes)
    width = read_config(init).hidden_size if init else None
    chosen = pretraining_recipe(recipe, objective, preset, OBJECTIVES[objective].model_type, continued_width=width)
    lr = chosen.lr if lr is None else lr
    warmup = chosen.warmup if warmup is None else warmup
    betas = chosen.betas if beta2 is None else (0.9, beta2)
    positions = positions or (None if init else chosen.positions)  # --init: the checkpoint's
    dropout = chosen.dropout if dropout is None else dropout
    schedule = schedule or chosen.schedule
    if layer_norm and objective != "gpt":
        raise BertforgeError(f"--layer-norm is GPT's choice: not for --objective {objective}")
    layer_norm = layer_norm or (None if init or resume else chosen.layer_norm)  # or the run's own
    given = [flag for flag, value in (("--mask-prob", mask_prob), ("--masking", masking),
                                      ("--whole-word", whole_word or None), ("--replace-prob", replace_prob),
                                      ("--random-prob", random_prob)) if value is not None]
    if objective == "gpt" and given:
        raise BertforgeError(f"GPT-1 predicts every next token and masks nothing: drop {', '.join(given)}")
    mask_prob = chosen.mask_prob if mask_prob is None else mask_prob
    if not quiet:
        masked = "left-to-right, nothing masked" if objective == "gpt" else f"masking {mask_prob:.0%}"
        order = {"pre": ", GPT-2's layer order", "post": ", GPT-1's layer order"}.get(layer_norm, "") \
            if objective == "gpt" else ""
        print(f"{init or preset}, objective {objective}, recipe {chosen.name}: "
              f"{positions or 'its own'} positions{order}, peak lr "
              f"{lr:g}, warm-up {warmup:g}, {schedule} decay, beta2 {betas[1]:g}, dropout {dropout:g} while "
              f"pretraining, {masked} (each has a flag; all saved in run_config.json)", flush=True)
    options = TrainOptions(
        lr=lr, betas=betas, out=out, steps=steps, max_minutes=max_minutes, warmup=warmup,
        schedule=schedule, weight_decay=weight_decay, accum=accum, clip=clip,
        precision=precision, log_every=log_every, eval_every=eval_every,
        eval_batches=eval_batches, save_every=save_every, keep=keep, seed=seed,
        progress=not quiet, compile=compile, report_to=report_to or (),
    )
    chosen_masking = masking_options(objective, mask_prob=mask_prob, replace_prob=replace_prob,
                                     random_prob=random_prob, whole_word=whole_word or None, scheme=masking)
    result = pretrain(
        corpus, out, objective=objective, generator_fraction=generator_fraction,
        preset=preset, tokenizer=tokenizer, vocab_size=vocab_size,
        lowercase=not cased, vocab_kind=vocab_kind, max_seq_length=max_seq_length,
        batch_size=batch_size,
        short_seq_prob=short_seq_prob, masking=chosen_masking, layout=layout, text_field=text_field,
        cache_dir=cache_dir, eval_fraction=eval_fraction, resume=resume, options=options,
        recipe=recipe, positions=positions, dropout=dropout, init=init, command_line=command_line,
        layer_norm=layer_norm,
    )
    print(f"{result['status']} at step {result['step']} after {result['elapsed_s']:.0f}s; model in "
          f"{out}/model, checkpoints in {out}/checkpoints")
    return result


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

# The objective that continues a checkpoint of each family (RoFormer: BERT's, with rotary positions).
FAMILY_OBJECTIVE = {"bert": "bert", "roformer": "bert", "roberta": "roberta", "albert": "albert",
                    "electra": "electra", "modernbert": "modernbert", "openai-gpt": "gpt", "gpt2": "gpt"}


def continued(init: str, objective: str, tokenizer: str | None, positions: str | None) -> tuple[dict, tuple]:
    """What continuing the checkpoint `init` with `objective` starts from: its config and positions,
    and the objective's terms less a sentence-pair term the checkpoint has no head for (printed)."""
    if tokenizer:
        raise BertforgeError("--init brings the checkpoint's own tokenizer: drop --tokenizer")
    config = read_config(init)
    family = FAMILY_OBJECTIVE.get(config.model_type)
    if family != objective and not (family == "bert" and objective == "span"):
        raise BertforgeError(f"{init}: a {config.model_type} checkpoint; continue it with --objective {family}")
    own = "rotary" if config.model_type in ("roformer", "modernbert") else "absolute"
    if positions not in (None, own):
        raise BertforgeError(f"{init}: its positions are {own}; drop --positions {positions}")
    terms = OBJECTIVES[objective].terms
    names = set(read_weights(init, config.model_type)[0])
    heads = head_keys(config.model_type)
    for term in ("nsp", "sop"):
        if term in terms and not {theirs for _, theirs in heads.get("nsp", [])} & names:
            print(f"{init} has no {term.upper()} head: continuing with masked LM alone", flush=True)
            terms = tuple(t for t in terms if t != term)
    return {"config": config, "positions": own}, terms


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
