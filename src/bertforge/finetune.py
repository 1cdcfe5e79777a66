"""The fine-tuning recipe: a pretrained encoder, a small task head, the one training loop; and
`evaluate` / `predict` with a fine-tuned model."""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import sys

import torch

from .atomic import atomic_file
from .checkpoint import label_names_of, read_config
from .checks import check_options
from .errors import BertforgeError
from .families import FAMILIES, family_of, resolve
from .formats import native
from .formats.hf import load_into
from .load import load_finetuned, load_tokenizer
from .plan import GIVEN, Plan
from .paths import check_apart
from .progress import progress as progress_bar
from .quantize import for_inference
from .report import header, say
from .tasks.common import FinetuneData, lm_count, read_inputs
from .tasks.tagging import TAGGERS
from .data.tokenizer import Tokenizer
from .training.distributed import distributed_setup
from .replay import run_arguments
from .training.tracking import check_reporters
from .training.trainer import TrainOptions
from .training.budget import whole_command
from .training.trainer import train as train_model

GPT_LM_WEIGHT = 0.5  # lambda of GPT-1's auxiliary language-model loss while fine-tuning (section 3.2)


@whole_command
def finetune(task, train: str, dev: str, model: str, out: str, *, text_column: str | int | None = None,
             pair_column: str | int | None = None, label_column: str | int | None = None, no_header: bool = False,
             word_column: int | None = None, tag_column: int | None = None, scheme: str | None = None,
             crf: bool = False, tagger: str | None = None, max_seq_length: int | None = None,
             choice_columns: str | list[str] | None = None, prefix_column: str | None = None,
             doc_stride: int | None = None, max_query_length: int | None = None,
             max_answer_length: int | None = None, n_best: int | None = None, null_threshold: float | None = None,
             epochs: float = 3.0, steps: int | None = None, batch_size: int = 32, lr: float | None = None,
             warmup: float | None = None, schedule: str | None = None, layer_lr_decay: float | None = None,
             unfreeze_every: int | None = None, classifier_dropout: float | None = None,
             lm_weight: float | None = None, features: str | None = None, weight_decay: float = 0.01,
             accum: int = 1, clip: float = 1.0, precision: str = "auto", compile: bool = False,
             eval_every: int | None = None, max_train_samples: int | None = None,
             max_eval_samples: int | None = None, max_minutes: float | None = None, patience: int | None = None,
             log_every: int = 50, seed: int = 42, resume: bool = False, quiet: bool = False,
             report_to: list[str] | None = None, options: TrainOptions | None = None) -> dict:
    """`bertforge finetune` from Python: fine-tune the encoder in `model` (any HF BERT-family or
    GPT-1 directory, an AWD-LSTM for ULMFiT's classifier, an ELMo biLM whose frozen features feed a
    task biLSTM, or a CoVe model) for `task` on the file `train`, evaluating on `dev`, into `out`.
    Every keyword is the command's option of the same name (its argparse dest), with the command's
    default; None is "not given". What is not given follows the model's family (`finetuning_plan`:
    a peak rate by the encoder's width, ULMFiT's recipe for an AWD-LSTM, ...), as on the command line,
    and the settings are saved in run_config.json with their sources and the options as given (for
    `bertforge finetune --config` to replay).

    `task`: a name (`"sst2"`, `"ner"`, `"qa"`, ...; the column and length keywords then shape it, as
    `tasks.make_task`), or a task made by `tasks.make_task`. Evaluates on `dev` every epoch (or
    `eval_every` steps) and keeps the best model by the task's first metric in `out/model`. GPT-1 is
    fine-tuned through its input transforms with the auxiliary LM loss at `lm_weight` (GPT-1's 0.5
    unless given; 0 turns it off). `crf` (token tagging) puts a linear-chain CRF over the words' tag
    scores; `tagger` (tagging over an ELMo biLM): "taglm" or "taglm-baseline". `features`: over a
    Transformer, "pooler" or "scalar-mix"; over a CoVe model, what its task network reads ("glove",
    "cove", "glove+cove"). `options`, the Python API's own: a whole `TrainOptions`, every field taken
    as given (the rates, budget and logging then come from it alone). Returns the trainer's summary
    with the best dev scores (`best`) and the metric it was chosen by (`select`).
    """
    given = {name: value for name, value in locals().items() if name != "options"}
    check_options(given, "finetune")
    check_reporters(report_to)  # a tracker's missing package, before any work
    cove = features if features in model_features() else None  # the CoVe model's; the others are the task's
    _check_given_once(given, task, options, cove)
    replayable = isinstance(task, str) and options is None
    if isinstance(choice_columns, (list, tuple)):  # as the command line gives them
        given["choice_columns"] = choice_columns = ",".join(choice_columns)
    task = _task_options(_make_task(task, given, cove), crf, tagger)
    check_apart(os.path.join(out, "model"), model, train, dev)  # the best model goes to out/model
    base, family = _base_config(model, task, features, cove)
    if lm_weight and not family.input_transforms:
        raise BertforgeError(f"{model}: the auxiliary LM loss is GPT-1's; this is a {base.model_type} encoder")
    lm_weight = (GPT_LM_WEIGHT if lm_weight is None else lm_weight) if family.input_transforms else 0.0
    plan, options = (None, options) if options is not None else _finetuning_options(base, family, given)
    options.out = out
    rank, world, _ = distributed_setup()
    tokenizer = load_tokenizer(model, base, family)
    if family.input_transforms:
        tokenizer = tokenizer.with_input_transforms()
    show = options.progress and rank == 0
    train_examples, dev_examples, names, train_features, dev_features, cut, dev_cut = _read_data(
        task, base, tokenizer, train, dev, max_train_samples, max_eval_samples, rank, show)
    net, collate = _task_model(task, base, names, classifier_dropout, model, tokenizer, train_features, lm_weight,
                               options.seed)
    data = FinetuneData(train_features, collate, task.length, batch_size, options.seed, rank, world, options.accum)
    _schedule(options, data.steps_per_epoch, epochs, eval_every, family, task)

    def evaluator(m):
        return task.score(predict_features(task, m, dev_features, None, "evaluating dev", show), dev_features, names,
                          dev_examples)

    run_config = {"task": task.name, "family": task.kind, "train": os.path.abspath(train),
                  "dev": os.path.abspath(dev), "model": os.path.abspath(model), "epochs": epochs,
                  "batch_size": batch_size, "labels": names, "train_examples": len(train_features),
                  "dev_examples": len(dev_features), "truncated": {"train": cut, "dev": dev_cut}, "lm_weight": lm_weight,
                  "sources": plan.sources() if plan else None, **task.recorded()}
    command_line = run_arguments("finetune", given) if replayable else {}
    summary = train_model(net, data, options, tokenizer, {**command_line, **run_config}, resume, evaluator)
    return {**summary, "select": options.select}


def _schedule(options: TrainOptions, per_epoch: int, epochs: float, eval_every: int | None, family, task) -> None:
    """The run's length, evaluations and checkpoints in steps, from epochs unless given; ULMFiT's
    gradual unfreezing every half epoch; the best model chosen by the task's first metric."""
    options.steps = options.steps or max(1, round(epochs * per_epoch))
    options.eval_every = eval_every or per_epoch
    options.save_every = options.save_every or per_epoch
    if family.gradual_unfreezing and options.unfreeze_every is None and options.layer_decay != 1.0:
        options.unfreeze_every = max(1, per_epoch // 2)
    options.select = options.select or task.metrics[0]


def _base_config(model: str, task, features: str | None, cove: str | None):
    """The config of the model to fine-tune, with what fine-tuning changes in it (ULMFiT's classifier
    dropouts, the CoVe features its task network reads), and its family, checked against the task."""
    base = read_config(model)
    family = family_of(base)
    family.supports_task(task.kind, task.name, model)
    if family.finetuning_config:  # e.g. ULMFiT's classifier dropouts
        base = type(base)(**{**base.to_dict(), **family.finetuning_config})
    if features and cove is None and hasattr(base, "task_features"):  # pooler, scalar-mix: a Transformer's
        raise BertforgeError(f"{model}: --features {features} is for Transformer encoders; a CoVe model's task "
                             f"network reads {', '.join(model_features())}")
    if cove is not None:
        if not hasattr(base, "task_features"):
            raise BertforgeError(f"{model}: --features is for CoVe models (glove, cove, glove+cove), not {base.model_type}")
        base = type(base)(**{**base.to_dict(), "task_features": cove})
    return base, family


def _read_data(task, base, tokenizer, train: str, dev: str, max_train: int | None, max_dev: int | None, rank: int,
               show: bool):
    """The training and dev examples, their label names, and their features (with how many were cut
    to the length, said on stderr); the task's length capped at the model's positions."""
    positions = getattr(base, "max_length", None)  # a recurrent model reads any length
    if positions and task.max_seq_length > positions:
        if rank == 0:
            print(f"max_seq_length {task.max_seq_length} is more than the model's {positions} positions: "
                  f"using {positions}", file=sys.stderr)
        task.max_seq_length = positions
    train_examples = task.read(train)[:max_train]
    names = task.label_names(train_examples)
    dev_examples = task.read(dev)[:max_dev]
    task.check_labels(dev_examples, names)
    train_features, cut = featurize(task, train_examples, tokenizer, names, "featurising training", show)
    dev_features, dev_cut = featurize(task, dev_examples, tokenizer, names, "featurising dev", show)
    for name, n, total in (("training", cut, len(train_examples)), ("dev", dev_cut, len(dev_examples))):
        if n and rank == 0:
            print(f"{name}: {task.truncation_message(n, total)}", file=sys.stderr)
    return train_examples, dev_examples, names, train_features, dev_features, cut, dev_cut


def model_features() -> tuple:
    """What a family's own task network reads (finetune's --features over a CoVe model), where the
    others' features (pooler, scalar-mix) are the task head's."""
    return tuple(f for family in FAMILIES for f in family.task_features)


# The keywords that shape a task made from its name: a task object comes with its own.
TASK_OPTIONS = ("text_column", "pair_column", "label_column", "no_header", "word_column", "tag_column", "scheme",
                "max_seq_length", "choice_columns", "prefix_column", "doc_stride", "max_query_length",
                "max_answer_length", "n_best", "null_threshold")
# The keywords a TrainOptions carries: with `options`, they are its to say.
TRAINING = ("steps", "lr", "warmup", "schedule", "layer_lr_decay", "unfreeze_every", "weight_decay", "accum", "clip",
            "precision", "compile", "max_minutes", "patience", "log_every", "seed", "quiet", "report_to")


def _check_given_once(given: dict, task, options: TrainOptions | None, cove: str | None) -> None:
    """Nothing said twice: a task object's own settings, or a whole `options`', not given again as keywords."""
    defaults = {name: p.default for name, p in inspect.signature(finetune).parameters.items()}
    for whole, names, what in ((None if isinstance(task, str) else task, TASK_OPTIONS,
                                "a task object, which has its own: give them to tasks.make_task, or pass the task's name"),
                               (options, TRAINING, "options=TrainOptions(...), which says them already: put them in "
                                                   "it, or drop it")):
        if whole is None:
            continue
        twice = [name for name in names if given[name] != defaults[name]]
        if whole is task and given["features"] and not cove:
            twice.append("features")
        if twice:
            raise BertforgeError(f"{', '.join(twice)}: given with {what}")


def _make_task(task, g: dict, cove: str | None):
    """The task named `task`, shaped by the keywords that shape one (`TASK_OPTIONS`, and `features`
    unless it is a CoVe model's) as the command makes it; a task object as it is."""
    if not isinstance(task, str):
        return task
    from .tasks import make_task

    return make_task(task, text_column=_column(g["text_column"]), pair_column=_column(g["pair_column"]),
                     label_column=_column(g["label_column"]), max_seq_length=g["max_seq_length"],
                     header=False if g["no_header"] else None, tag_column=g["tag_column"],
                     word_column=g["word_column"], scheme=g["scheme"], doc_stride=g["doc_stride"],
                     max_query_length=g["max_query_length"], max_answer_length=g["max_answer_length"],
                     n_best=g["n_best"], null_threshold=g["null_threshold"],
                     choice_columns=g["choice_columns"].split(",") if g["choice_columns"] else None,
                     prefix_column=g["prefix_column"], features=None if cove else g["features"])


def _finetuning_options(base, family, g: dict) -> tuple[Plan, TrainOptions]:
    """The run's optimisation, as the command resolves it: the family's recipe (ULMFiT's for an
    AWD-LSTM, a rate by width for a Transformer) under every option given (`finetuning_plan`), said
    unless `quiet`, and the TrainOptions of it and the other options in `g` (finetune's keywords)."""
    plan = finetuning_plan(base, {"lr": g["lr"], "warmup": g["warmup"], "schedule": g["schedule"],
                                  "layer_decay": g["layer_lr_decay"]})
    # a recipe of several settings (ULMFiT's) is described whole; a rate alone, when it was not given
    if not g["quiet"] and (family.gradual_unfreezing or g["lr"] is None):
        print(family.finetuning_note.format(width=getattr(base, "hidden_size", None),
                                            **{"layer_decay": 1.0, "schedule": "linear", **plan.values()}), flush=True)
    options = TrainOptions(
        out=g["out"], steps=g["steps"], **plan.values(), weight_decay=g["weight_decay"], accum=g["accum"],
        clip=g["clip"], precision=g["precision"], log_every=g["log_every"], keep=1, seed=g["seed"],
        progress=not g["quiet"], patience=g["patience"], unfreeze_every=g["unfreeze_every"], compile=g["compile"],
        max_minutes=g["max_minutes"], report_to=g["report_to"] or ())
    return plan, options


def _column(value):
    """A column: its name, or its position (an int, or digits as the command line gives them)."""
    return int(value) if isinstance(value, str) and value.isdigit() else value


def _task_options(task, crf: bool, tagger: str | None):
    """The task with a CRF or TagLM's tagger when asked for."""
    if crf:
        if not task.taggers:
            raise BertforgeError(f"a CRF is for token tagging (task ner or tagging), not the {task.name} task")
        task.crf = True
    if tagger is not None:
        if not task.taggers:
            raise BertforgeError(f"--tagger is for token tagging (task ner or tagging), not the {task.name} task")
        if tagger not in TAGGERS:
            raise BertforgeError(f"unknown tagger {tagger!r}; choose {' or '.join(TAGGERS)}")
        task.tagger, task.crf = tagger, True  # TagLM decodes with a CRF
    return task


def _task_model(task, base, names, classifier_dropout, model: str, tokenizer, train_features, lm_weight: float,
                seed: int):
    """The task's model with the encoder of `model` loaded and its head fresh, and the batch collator."""
    family = family_of(base)
    config = task.configure(base, names, classifier_dropout)
    torch.manual_seed(seed)
    net = family.build_task_model(task, config)
    if family.native:
        native.load_encoder(net, model, base)
    elif family.checkpoint:  # a layout of the family's own (CoVe's): its encoder into the task model
        resolve(family.checkpoint + ":load_backbone")(net, model)
    else:
        load_into(net, model, new_heads=True, config=base, family=family, heads=False)  # the encoder; the task head starts fresh
    if hasattr(net, "keep_frozen_outputs"):  # ELMo's biLM, CoVe's MT-LSTM: read each sentence once, not once per epoch
        net.keep_frozen_outputs()
    task.prepare(net, train_features)  # e.g. a CRF's transitions from the training data's tag bigrams
    pad_id = tokenizer.pad_id
    collate = lambda f: task.collate(f, pad_id)  # noqa: E731
    if family.input_transforms:
        add_transform_tokens(net.backbone, tokenizer)
        # HF's GPT sequence classifier finds the extract token as the last one that is not padding.
        net.backbone.config.pad_token_id = pad_id
        if lm_weight:
            net.loss_weights = {"lm": lm_weight}
            collate = lambda f: lm_count(task.collate(f, pad_id))  # noqa: E731
    return net, collate


def finetuning_plan(config, given: dict | None = None) -> Plan:
    """The optimisation of a fine-tuning run of a model of `config`: its family's recipe (ULMFiT's
    for an AWD-LSTM, Adam at 1e-3 for ELMo's task biLSTM, else a rate by width), under the options
    `given` (None: not given), each remembering its source."""
    family = family_of(config)
    return Plan().layer(f"recipe {family.name}", family.call("finetuning", config)).layer(GIVEN, given or {})


# Below this many examples, featurising and predicting take a few seconds at most: no progress is
# shown. Above it they run in pieces of PIECE examples, each piece a step of the progress.
PROGRESS_FROM = 1000
PIECE = 512


def featurize(task, examples: list[dict], tokenizer, names, desc: str = "featurising", show: bool = False):
    """`task.featurize(examples, tokenizer, names)`, with progress (`progress.progress`: a bar on a
    terminal, plain lines elsewhere) when `show` and there are many examples: then in pieces, the
    same features as in one call (a QA feature's `question` index is shifted by its piece's start)."""
    if not show or len(examples) < PROGRESS_FROM:
        return task.featurize(examples, tokenizer, names)
    bar = progress_bar(total=len(examples), desc=desc, unit="examples")
    features, cut = [], 0
    for start in range(0, len(examples), PIECE):
        piece = examples[start: start + PIECE]
        found, n = task.featurize(piece, tokenizer, names)
        for f in found:
            if "question" in f:  # QA: the index of its question in `examples`
                f["question"] += start
        features += found
        cut += n
        bar.update(len(piece))
    bar.close()
    return features, cut


def predict_features(task, model, features: list[dict], batch_size: int | None = None, desc: str = "predicting",
                     show: bool = False):
    """`task.predict(model, features, batch_size)` (the task's batch size when None), with progress
    when `show` and there are many features: then in pieces (each still sorted by length inside),
    their outputs joined as one call returns them (a tensor, or a list)."""
    def run(part):
        return task.predict(model, part) if batch_size is None else task.predict(model, part, batch_size)

    if not show or len(features) < PROGRESS_FROM:
        return run(features)
    bar = progress_bar(total=len(features), desc=desc, unit="examples")
    outputs = []
    for start in range(0, len(features), PIECE):
        piece = features[start: start + PIECE]
        outputs.append(run(piece))
        bar.update(len(piece))
    bar.close()
    return torch.cat(outputs) if isinstance(outputs[0], torch.Tensor) else [o for part in outputs for o in part]


def add_transform_tokens(decoder, tokenizer: Tokenizer) -> None:
    """Grow GPT-1's token embeddings to the tokenizer's vocabulary: new rows (the transform tokens)
    drawn as the pretrained ones were, N(0, initializer_range), as OpenAI's code does; every
    pretrained row kept. Nothing to do when the model already has the rows (a fine-tuned model
    fine-tuned again, or a vocabulary padded with spare rows)."""
    old = decoder.embeddings.word
    if tokenizer.vocab_size <= old.num_embeddings:
        return
    new = torch.nn.Embedding(tokenizer.vocab_size, old.embedding_dim, device=old.weight.device, dtype=old.weight.dtype)
    with torch.no_grad():
        new.weight.normal_(0.0, decoder.config.initializer_range)
        new.weight[: old.num_embeddings] = old.weight
    decoder.embeddings.word = new
    decoder.config.vocab_size = tokenizer.vocab_size


def _output_format(path: str | None, requested: str | None, task) -> str:
    """jsonl or conll, from the request and the output file's suffix, which must agree."""
    formats = set(task.suffixes.values())
    if requested == "conll" and requested not in formats:
        raise BertforgeError("CoNLL output is for tagging models")
    if not path:  # standard output
        return requested or "jsonl"
    suffix = os.path.splitext(path)[1].lower()
    if suffix == ".conll" and suffix not in task.suffixes:
        raise BertforgeError(f"{path}: CoNLL output is for tagging models; write .jsonl")
    if suffix not in task.suffixes:
        raise BertforgeError(f"{path}: predictions of a {task.kind} model are written as {task.written_as}")
    if requested and requested != task.suffixes[suffix]:
        raise BertforgeError(f"{path}: --format {requested} does not match the file's suffix {suffix}")
    return requested or task.suffixes[suffix]


def evaluate(directory: str | list[str], data_file: str, batch_size: int = 64,
             device: str | torch.device = "cpu", precision: str = "fp32", progress: bool = False) -> dict:
    """The task's metrics for a fine-tuned model on a labelled file; for several classifiers of one
    task (ULMFiT's forward and backward models), the metrics of their ensemble (see `ensemble`).
    `precision`: fp32, bf16 or int8 (see `bertforge.quantize`). With `progress`, a header (once the
    file is read and checked) and progress for many examples, on standard error."""
    members = load_ensemble([directory] if isinstance(directory, str) else directory, device, precision)
    task, names = members[0][1], label_names_of(members[0][0])
    examples = task.read(data_file)
    task.check_labels(examples, names)
    say(header(members[0][0], next(members[0][0].parameters()).device, precision,
               f"{len(examples):,} {task.name} examples in {data_file}",
               "the scores as JSON on standard output (fractions; in percent on standard error)", len(members)),
        progress)
    logits, features, cut = ensemble(members, examples, names, batch_size, precision, progress=progress)
    return {**task.score(logits, features, names, examples), "examples": len(features), "truncated": cut}


def load_ensemble(directories: list[str], device: str | torch.device = "cpu", precision: str = "fp32") -> list[tuple]:
    """Fine-tuned models (each with its task and tokenizer) whose outputs can be averaged: one
    model, or classifiers (and regressors) of one task with the same labels; int8 quantizes them."""
    members = [load_finetuned(d, device) for d in directories]
    for model, _, _ in members:
        for_inference(model, precision)
    first, task = members[0][0], members[0][1]
    if len(members) > 1 and not task.ensembles:
        raise BertforgeError(f"{directories[0]}: an ensemble averages class probabilities (or scores): "
                             f"classification and regression models only, not {task.name}")

    def reads(t, model) -> dict:  # what must agree for members to answer the same examples
        return {"task": t.name, "labels": label_names_of(model), "regression": t.regression,
                "columns": (t.text_column, t.pair_column, t.label_column), "symmetric": t.symmetric}

    for d, (model, other, _) in zip(directories[1:], members[1:]):
        mine, theirs = reads(task, first), reads(other, model)
        if mine != theirs:
            what = next(k for k in mine if mine[k] != theirs[k])
            raise BertforgeError(f"{d}: its {what} is {theirs[what]}, {directories[0]}'s {mine[what]}: "
                                 "not one ensemble")
    return members


def ensemble(members: list[tuple], examples: list[dict], names, batch_size: int = 64, precision: str = "fp32",
             progress: bool = False):
    """Outputs for `examples` of one model, or of an ensemble: each member reads them through its
    own tokenizer (a backward ULMFiT may have other words), and their class probabilities are
    averaged (ULMFiT's forward + backward ensemble), returned as the log of the mean so that they
    pass where logits do; regression scores are averaged. -> (logits, the first member's
    features, the most inputs any member cut). `progress`: for many examples (see `featurize`)."""
    outputs, first, most_cut = [], None, 0
    for model, task, tokenizer in members:
        features, cut = featurize(task, examples, tokenizer, names, "featurising", progress)
        device = next(model.parameters()).device
        with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
            outputs.append(predict_features(task, model, features, batch_size, "predicting", progress))  # fp32
        first, most_cut = first or features, max(most_cut, cut)
    if len(outputs) == 1:
        return outputs[0], first, most_cut
    if members[0][1].regression:
        return torch.stack(outputs).mean(0), first, most_cut
    return torch.stack([o.float().softmax(-1) for o in outputs]).mean(0).log(), first, most_cut


def predict(directory: str | list[str], input_file: str | None, output_file: str | None, batch_size: int = 64,
            output_format: str | None = None, device: str | torch.device = "cpu", precision: str = "fp32",
            progress: bool = False) -> int:
    """Predictions for every example of `input_file` (standard input, one example per line, when
    None; models of single texts also take a plain text file: see `tasks.common.read_inputs`),
    written to `output_file` (standard output when None) as JSON lines; for tagging models
    optionally as CoNLL columns; for question answering as SQuAD's official prediction JSON.
    The format follows `output_format` or else the output's suffix (.jsonl, .conll for tagging,
    .json for QA); a suffix that says otherwise is an error, never a file named .conll holding JSON.
    Several classifiers of one task predict as their ensemble (see `ensemble`). With `progress`, a
    header (once the input is read and checked) and progress for many examples, on standard error.
    Returns the number of examples."""
    directories = [directory] if isinstance(directory, str) else directory
    check_apart(output_file, input_file, *directories)  # before any work
    members = load_ensemble(directories, device, precision)
    task, names = members[0][1], label_names_of(members[0][0])
    output_format = _output_format(output_file, output_format, task)
    examples = read_inputs(task, input_file, names)  # the task's layout, or plain text (see read_inputs)
    if not examples:
        raise BertforgeError(f"{input_file or '<stdin>'}: no examples")
    where = output_file or "standard output"
    say(header(members[0][0], next(members[0][0].parameters()).device, precision,
               f"{len(examples):,} {task.name} examples from {input_file or 'standard input'}",
               f"{where} ({task.format_name(output_format)})",
               len(members)), progress)
    logits, features, cut = ensemble(members, examples, names, batch_size, precision, progress=progress)
    if cut:
        print(task.truncation_message(cut, len(examples)), file=sys.stderr)
    with torch.no_grad():
        outputs = task.outputs(logits, names, examples, features)
    with atomic_file(output_file) if output_file else contextlib.nullcontext(sys.stdout) as stream:
        if output_format == "conll":
            task.write_conll(stream, examples, outputs)
        elif isinstance(outputs, dict):  # SQuAD's official prediction file: {question id: answer}
            json.dump(outputs, stream, ensure_ascii=False, indent=1)
            stream.write("\n")
        else:
            for output in outputs:
                stream.write(json.dumps(output, ensure_ascii=False) + "\n")
    return len(examples)
