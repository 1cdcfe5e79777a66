"""The `bertforge` command: a thin table of subcommands over the Python API.

Each entry parses its flags and calls one function; everything it does can be done from Python.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from .checks import check_options
from .config import AWD_LSTM_PRESETS, ELMO_PRESETS, PRESETS
from .errors import BertforgeError
from .replay import REPLAYABLE, config_defaults, run_arguments
from .training.tracking import REPORTERS, check_reporters

# The keys of `pretrain.OBJECTIVES`, named here so that `--help` needs no torch import (a test
# checks the two agree).
OBJECTIVE_NAMES = ["bert", "roberta", "span", "albert", "electra", "modernbert", "gpt", "awd-lstm", "elmo"]
RECURRENT_NAMES = ["awd-lstm", "elmo"]  # pretrain_recurrent.RECURRENT_OBJECTIVES
VOCAB_KINDS = ["wordpiece", "byte-bpe", "bpe"]  # tokenizer.KINDS
# The trackers fed metrics.jsonl's records; with --config, the command line's list replaces the file's.
REPORT_TO = dict(nargs="+", choices=REPORTERS, metavar="TRACKER",
                 help="also send every record of metrics.jsonl to: csv (OUT/metrics.csv), tensorboard "
                      "(OUT/tensorboard), wandb (Weights & Biases; its WANDB_* variables apply); several may "
                      "be named (default: none)")


def cmd_tokenizer_train(args) -> None:
    from .data.corpus import find_files
    from .report import header, say
    from .tokenizer import Tokenizer

    files = find_files(args.files)  # every file there, before the header (their text is checked as it is read)
    size = sum(os.path.getsize(f) for f in files)
    packed = " (gzip-compressed size)" if any(f.endswith(".gz") for f in files) else ""
    vocabulary = (f"vocabulary: {args.vocab_size:,} tokens, {args.kind}, {'cased' if args.cased else 'lowercased'}, "
                  f"min frequency {args.min_frequency}")
    say(header(data=f"{len(files):,} file(s), {size / 1e6:,.1f} MB{packed}", output=args.out, extra=(vocabulary,)))
    tokenizer = Tokenizer.train(
        files=files, vocab_size=args.vocab_size, min_frequency=args.min_frequency,
        lowercase=not args.cased, strip_accents=args.strip_accents, split_cjk=not args.no_cjk_split,
        limit_alphabet=args.limit_alphabet, show_progress=True, kind=args.kind,
    )
    tokenizer.save_pretrained(args.out)
    kind = {"wordpiece": "WordPiece", "byte-bpe": "byte-level BPE", "bpe": "BPE (</w>)"}[args.kind]
    print(f"wrote a {tokenizer.vocab_size}-token {kind} vocabulary to {args.out}")


def cmd_info(args) -> None:
    from .formats import native
    from .formats.hf import load_pretrained, read_config

    config = read_config(args.model)
    if config.model_type in native.NATIVE_TYPES:  # no model to build: the stored tensors say the size
        params = native.parameter_count(args.model)
    else:
        model = load_pretrained(args.model)
        config, params = model.config, sum(p.numel() for p in model.parameters())
    print(f"{args.model}: {config.architectures[0]}, {params / 1e6:.1f}M parameters")
    for key, value in config.to_dict().items():
        print(f"  {key}: {value}")


def cmd_pretrain(args) -> None:
    from .pretrain import pretrain_with_recipe

    if args.steps is None and args.max_minutes is None:
        raise BertforgeError("give a budget: --steps, --max-minutes, or both")
    check_reporters(args.report_to)  # a tracker's missing package, before any work
    if args.objective in RECURRENT_NAMES:
        return cmd_pretrain_recurrent(args)
    result = pretrain_with_recipe(
        args.corpus, args.out, objective=args.objective, preset=args.preset, recipe=args.recipe,
        positions=args.positions, layer_norm=args.layer_norm, generator_fraction=args.generator_fraction,
        tokenizer=args.tokenizer, init=args.init, vocab_size=args.vocab_size, cased=args.cased,
        vocab_kind=args.vocab_kind, steps=args.steps, max_minutes=args.max_minutes, resume=args.resume,
        max_seq_length=args.max_seq_length, batch_size=args.batch_size, short_seq_prob=args.short_seq_prob,
        layout=args.layout, text_field=args.text_field, cache_dir=args.cache_dir, eval_fraction=args.eval_fraction,
        mask_prob=args.mask_prob, replace_prob=args.replace_prob, random_prob=args.random_prob,
        whole_word=args.whole_word, masking=args.masking, lr=args.lr, beta2=args.beta2, warmup=args.warmup,
        dropout=args.dropout, schedule=args.schedule, weight_decay=args.weight_decay, accum=args.accum,
        clip=args.clip, precision=args.precision, compile=args.compile, seed=args.seed, log_every=args.log_every,
        eval_every=args.eval_every, eval_batches=args.eval_batches, save_every=args.save_every, keep=args.keep,
        quiet=args.quiet, report_to=args.report_to,
        command_line=run_arguments(args.command, vars(args)))  # as given, before the recipe fills in the rest
    if result["status"] == "interrupted":
        raise KeyboardInterrupt


def cmd_pretrain_recurrent(args) -> None:
    from .pretrain_recurrent import default_options, pretrain_recurrent

    bert_only = [flag for flag, value in (
        ("--mask-prob", args.mask_prob), ("--masking", args.masking), ("--whole-word", args.whole_word or None),
        ("--replace-prob", args.replace_prob), ("--random-prob", args.random_prob), ("--positions", args.positions),
        ("--layer-norm", args.layer_norm), ("--tokenizer", args.tokenizer), ("--vocab-kind", args.vocab_kind),
        ("--dropout", args.dropout),
        ("--cased", args.cased or None)) if value is not None]
    if bert_only:
        raise BertforgeError(f"{', '.join(bert_only)}: not for --objective {args.objective} (a word-level LSTM "
                             "language model; see the recurrent options)")
    sizes = ELMO_PRESETS if args.objective == "elmo" else AWD_LSTM_PRESETS
    if args.preset and args.preset not in sizes:
        raise BertforgeError(f"--preset {args.preset} is not a size for --objective {args.objective}; choose one of "
                             f"{', '.join(sizes)}")
    options = default_options(
        args.out, args.init, args.objective, lr=args.lr, warmup=args.warmup, schedule=args.schedule, clip=args.clip,
        betas=None if args.beta2 is None else (0.8, args.beta2), steps=args.steps, max_minutes=args.max_minutes,
        weight_decay=args.weight_decay, accum=args.accum, precision=args.precision, log_every=args.log_every,
        eval_every=args.eval_every, eval_batches=args.eval_batches, save_every=args.save_every, keep=args.keep,
        seed=args.seed, progress=not args.quiet, compile=args.compile, report_to=args.report_to)
    result = pretrain_recurrent(
        args.corpus, args.out, args.objective, preset=args.preset, init=args.init,
        vocab_size=args.vocab_size or 60000, min_freq=args.min_freq, rules=not args.no_rules, bptt=args.bptt,
        batch_size=args.batch_size, layout=args.layout, text_field=args.text_field,
        eval_fraction=args.eval_fraction, resume=args.resume, options=options, backwards=args.backwards,
        dropout_scale=args.dropout_scale, sampled_softmax=args.sampled_softmax,
        command_line=run_arguments(args.command, vars(args)))
    print(f"{result['status']} at step {result['step']} after {result['elapsed_s']:.0f}s; model in "
          f"{args.out}/model, checkpoints in {args.out}/checkpoints")
    if result["status"] == "interrupted":
        raise KeyboardInterrupt


def cmd_fill_mask(args) -> None:
    from .fill_mask import FillMask

    fill = FillMask(args.model, resolve_device(args.device))
    masks = fill.fill([args.text], args.top_k)[0]
    if args.json:  # pipeline("fill-mask")'s records: score, token, token_str, sequence
        print(json.dumps(masks, ensure_ascii=False))
        return
    for number, candidates in enumerate(masks, start=1):
        print(f"[MASK] {number}: " + "  ".join(f"{c['token_str']} ({c['score']:.3g})" for c in candidates))


def resolve_device(name: str):
    from .training.device import resolve_device as resolve  # torch is imported only by commands that use it

    return resolve(name)


def cmd_serve(args) -> None:
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        raise BertforgeError("bertforge serve needs starlette and uvicorn: pip install 'bertforge[serve]'") from None
    from .serve.app import serve

    serve(args.model, args.host, args.port, resolve_device(args.device), args.max_batch, args.max_wait_ms)


def cmd_export(args) -> None:
    if args.format == "allennlp":
        from .formats.allennlp import export_allennlp

        report = export_allennlp(args.model, args.out)
        print(f"wrote {args.out}: options.json, weights.hdf5 ({report['datasets']} datasets, the softmax included) "
              f"and vocab.txt ({report['words']:,} words)")
        return
    from .formats.onnx import export_onnx

    report = export_onnx(args.model, args.out, opset=args.opset, check=not args.no_check)
    print(f"wrote {args.out}: inputs {', '.join(report['inputs'])}; outputs {', '.join(report['outputs'])}"
          + (f"; onnxruntime agrees to {report['max_difference']:.1e}" if "max_difference" in report else ""))


def cmd_import_allennlp(args) -> None:
    from .formats.allennlp import import_allennlp

    report = import_allennlp(args.options, args.weights, args.out, args.vocab)
    c = report["config"]
    print(f"wrote {args.out}: ELMo, {c.n_layers} x {c.cell_size} cells projected to {c.projection_dim}, "
          + (f"its softmax over {c.vocab_size - 2:,} words" if report["softmax"] else
             "no softmax in the file (features and embeddings only; its language-model loss means nothing "
             "until trained)"))


def cmd_generate(args) -> None:
    from .generate import Generator

    generator = Generator(args.model, resolve_device(args.device))
    ids = generator(args.prompt, max_new_tokens=args.max_new_tokens, do_sample=args.do_sample,
                    temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed)
    print(args.prompt + " " + generator.text(ids))


def cmd_evaluate_lm(args) -> None:
    from .evaluate_lm import evaluate_lm, report

    result = evaluate_lm(args.model, args.files, max_seq_length=args.max_seq_length, batch_size=args.batch_size,
                         max_batches=args.max_batches, seed=args.seed, layout=args.layout,
                         text_field=args.text_field, cache_dir=args.cache_dir)
    print(json.dumps(result) if args.json else report(result))


def cmd_finetune(args) -> None:
    from .finetune import finetune
    from .tasks import make_task
    from .training.trainer import TrainOptions

    check_reporters(args.report_to)  # a tracker's missing package, before any work
    task = make_task(args.task, text_column=_column(args.text_column), pair_column=_column(args.pair_column),
                     label_column=_column(args.label_column), max_seq_length=args.max_seq_length,
                     header=False if args.no_header else None, tag_column=args.tag_column,
                     word_column=args.word_column, scheme=args.scheme, doc_stride=args.doc_stride,
                     max_query_length=args.max_query_length, max_answer_length=args.max_answer_length,
                     n_best=args.n_best, null_threshold=args.null_threshold,
                     choice_columns=args.choice_columns.split(",") if args.choice_columns else None,
                     prefix_column=args.prefix_column, features=args.features)
    from .finetune import default_finetuning
    from .formats.hf import read_config

    base = read_config(args.model)
    # the family's recipe (ULMFiT's for an AWD-LSTM) under every flag given
    given = {"lr": args.lr, "warmup": args.warmup, "schedule": args.schedule, "layer_decay": args.layer_lr_decay}
    recipe = {**default_finetuning(base), **{k: v for k, v in given.items() if v is not None}}
    if not args.quiet and base.model_type == "awd-lstm":
        print(f"ULMFiT's classifier recipe: peak lr {recipe['lr']:g} at the head, x {recipe['layer_decay']:.3g} "
              f"per layer down, {recipe['schedule']} schedule, gradual unfreezing (each has a flag)", flush=True)
    elif not args.quiet and args.lr is None:
        what = "the task model over ELMo" if base.model_type == "elmo" else f"an encoder of width {base.hidden_size}"
        print(f"peak learning rate {recipe['lr']:g} for {what} (--lr to change)", flush=True)
    options = TrainOptions(
        out=args.out, steps=args.steps, **recipe,
        weight_decay=args.weight_decay, accum=args.accum, clip=args.clip, precision=args.precision,
        log_every=args.log_every, keep=1, seed=args.seed, progress=not args.quiet, patience=args.patience,
        unfreeze_every=args.unfreeze_every, compile=args.compile, max_minutes=args.max_minutes,
        report_to=args.report_to or (),
    )
    result = finetune(task, args.train, args.dev, args.model, args.out, epochs=args.epochs,
                      batch_size=args.batch_size, classifier_dropout=args.classifier_dropout,
                      eval_every=args.eval_every, options=options, resume=args.resume, lm_weight=args.lm_weight,
                      max_train_samples=args.max_train_samples, max_eval_samples=args.max_eval_samples,
                      crf=args.crf, tagger=args.tagger, command_line=run_arguments(args.command, vars(args)))
    best = result["best"]
    from .metrics import format_score, format_scores

    kept = format_scores(best.get("metrics") or {}, skip=(options.select,))
    print(f"{result['status']} at step {result['step']}; best {options.select} "
          f"{format_score(options.select, best['score'])} at step {best['step']}" + (f" ({kept})" if kept else "")
          + f"; model in {args.out}/model")


def cmd_evaluate(args) -> None:
    from .finetune import evaluate
    from .metrics import format_scores

    result = evaluate(args.model, args.data, args.batch_size, resolve_device(args.device), args.precision,
                      progress=True)
    print(json.dumps(result))  # fractions, for programs; for people, in percent on standard error:
    print(format_scores(result), file=sys.stderr)


def cmd_predict(args) -> None:
    from .finetune import predict

    n = predict(args.model, args.input, args.output, args.batch_size, args.format, resolve_device(args.device),
                args.precision, progress=True)  # a header and progress on standard error; predictions may go to standard output
    if args.output:
        print(f"wrote {n} predictions to {args.output}", file=sys.stderr)


def cmd_embed(args) -> None:
    from .embed import Embedder, check_output, write_embeddings
    from .tasks.common import read_text

    check_output(args.output)  # before any work
    texts = [line.rstrip("\r") for line in read_text(args.input).split("\n") if line.strip()]
    if not texts:
        raise BertforgeError(f"{args.input or '<stdin>'}: no text to embed")
    embedder = Embedder.from_pretrained(args.model, resolve_device(args.device), args.precision)
    layers = args.layers or ("all" if hasattr(embedder, "vocab") else "last")  # ELMo: the average of its layers
    layers = int(layers) if layers.lstrip("-").isdigit() else layers
    from .report import header, say

    say(header(embedder.model, next(embedder.model.parameters()).device, args.precision,
               f"{len(texts):,} texts from {args.input or 'standard input'}",
               f"{args.output}: layers {layers}, pooling {args.pooling or 'its default'}"))
    vectors = embedder.encode(texts, layers, args.pooling, args.batch_size, args.max_length,
                              progress=len(texts) >= 1000)  # a few seconds' work or more
    # cut exactly as encode() cuts, so tokens and vectors line up
    tokens = embedder.tokens(texts, args.max_length) if args.pooling == "tokens" else None
    write_embeddings(args.output, vectors, texts, tokens)
    shape = vectors.shape if hasattr(vectors, "shape") else f"{len(vectors)} texts x tokens x {vectors[0].shape[-1]}"
    print(f"wrote {shape} vectors to {args.output}", file=sys.stderr)


def _column(value):
    """Column names from the command line; a number means a position (files without a header)."""
    return int(value) if value is not None and value.isdigit() else value


def cmd_demo(args) -> None:
    from .demo import run_demo

    run_demo(args.out, args.minutes, args.preset)


def _bool(text: str) -> bool:
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Each flag's default after its help, unless it has none (None, a switch that is off) or the
    help already says what it is."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.default in (None, False, argparse.SUPPRESS) or "default" in text or action.required:
            return text
        return super()._get_help_string(action)


# --precision of the commands that only run a model (evaluate, predict, embed).
INFERENCE_PRECISION = dict(
    choices=["fp32", "bf16", "int8"], default="fp32",
    help="bf16: the matrix products in bf16 (fast where the CPU or GPU has it; outputs within ~1e-2 of fp32's); "
         "int8: the linear layers quantized, CPU only (see the README's speed section for its speed and accuracy)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bertforge", description="BERT end to end.")
    parser.add_argument("--debug", action="store_true", help="show the Python traceback of an error")
    parser.add_argument("--version", action="version", version=f"bertforge {_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = commands.add_parser("demo", help="pretrain a small BERT on Shakespeare and try it (no arguments needed)",
                               formatter_class=HelpFormatter)
    demo.add_argument("--out", default="runs/demo", help="where to write the demo's outputs")
    demo.add_argument("--minutes", type=float, default=3.0, help="pretraining budget")
    demo.add_argument("--preset", choices=sorted(PRESETS), help="model size (default: bertforge pretrain's)")
    demo.set_defaults(func=cmd_demo)

    info = commands.add_parser("info", help="show the configuration and size of a checkpoint")
    info.add_argument("model", help="an HF BERT-family checkpoint directory, or an AWD-LSTM or ELMo one")
    info.set_defaults(func=cmd_info)

    pre = commands.add_parser("pretrain", help="pretrain a BERT, RoBERTa, SpanBERT, ALBERT, ELECTRA, ModernBERT or "
                              "GPT-1 on a corpus",
                              formatter_class=HelpFormatter)
    pre.add_argument("--corpus", nargs="+", required=True,
                     help="text files, folders or globs (.txt, .jsonl, optionally .gz)")
    pre.add_argument("--out", required=True, help="run directory: checkpoints, final model, metrics")
    pre.add_argument("--objective", default="bert", choices=OBJECTIVE_NAMES,
                     help="bert: MLM + next-sentence prediction; roberta: MLM on packed full sentences; "
                          "span: SpanBERT span masking + span-boundary objective; albert: factorised embeddings, "
                          "shared layers, n-gram masking + sentence order; electra: replaced-token detection; "
                          "modernbert: MLM over a ModernBERT encoder (pre-LN, rotary, GeGLU, local/global attention); "
                          "gpt: GPT-1, a left-to-right language model; awd-lstm: ULMFiT's AWD-LSTM word-level "
                          "language model (stages 1 and, with --init, 2); elmo: ELMo's character-aware biLM "
                          "(see the recurrent options)")
    pre.add_argument("--preset", choices=sorted(PRESETS) + list(AWD_LSTM_PRESETS) + list(ELMO_PRESETS),
                     help="model size (default: by the budget: bert-tiny for --max-minutes 10 or less, else bert-mini; "
                          "awd-lstm-small for awd-lstm, whose ULMFiT size is awd-lstm-ulmfit; elmo-cpu for elmo, "
                          "whose paper sizes are elmo-small and elmo-original)")
    pre.add_argument("--recipe", default="small-budget", choices=["small-budget", "bert-2018"],
                     help="defaults of the settings below: small-budget (rotary positions for bert and span, "
                          "learning rate by size, 10%% warm-up, beta2 0.98, no dropout while pretraining: "
                          "measured best for CPU budgets) or bert-2018 (the BERT paper's, exactly)")
    pre.add_argument("--positions", choices=["rotary", "absolute"],
                     help="rotary: RoFormer (saved as RoFormerForMaskedLM; objectives bert and span; ModernBERT's "
                          "always); absolute: BERT's learned position table (default: the recipe's)")
    pre.add_argument("--layer-norm", choices=["pre", "post"],
                     help="gpt: where each block's LayerNorms sit: post (GPT-1's, saved as openai-gpt) or pre "
                          "(GPT-2's, with one after the last block, saved as gpt2), which trains in minutes where "
                          "post lingers at the unigram loss (default: the recipe's: pre; bert-2018: post)")
    pre.add_argument("--generator-fraction", type=float, default=0.25,
                     help="ELECTRA: the generator's width as a fraction of the discriminator's")
    pre.add_argument("--tokenizer", help="an existing tokenizer (HF directory); default: learn one on the corpus")
    pre.add_argument("--init", help="continue pretraining this HF checkpoint (ours, or e.g. a downloaded BERT or "
                     "MiniLM): its tokenizer, size and weights, a fresh optimizer, heads it lacks started fresh, "
                     "the learning rate that fine-tunes its width")
    pre.add_argument("--vocab-size", type=int, help="size of a vocabulary learned on the corpus (default: by its "
                     "size: 8,192 below 10 MB, 16,384 below 100 MB, else 30,522)")
    pre.add_argument("--cased", action="store_true", help="keep case when learning the vocabulary")
    pre.add_argument("--vocab-kind", choices=VOCAB_KINDS,
                     help="the vocabulary learned on the corpus: wordpiece (BERT's), byte-bpe (RoBERTa's), bpe "
                          "(GPT-1's, with </w>); default bpe for --objective gpt, else wordpiece")
    budget = pre.add_argument_group("budget (at least one)")
    budget.add_argument("--steps", type=int, help="optimizer steps")
    budget.add_argument("--max-minutes", type=float, help="wall-clock minutes of training")
    pre.add_argument("--resume", action="store_true", help="continue the run in --out from its latest checkpoint")
    data = pre.add_argument_group("data")
    data.add_argument("--max-seq-length", type=int, default=128, help="tokens per instance, with [CLS] and [SEP]s")
    data.add_argument("--batch-size", type=int,
                      help="instances (recurrent models: streams) per optimizer step, all processes (default: 64 for "
                           "roberta and awd-lstm, else 32)")
    data.add_argument("--short-seq-prob", type=float, default=0.1, help="share of documents given a shorter target")
    data.add_argument("--layout", choices=["auto", "lines", "prose"], default="auto",
                      help="lines: one sentence per line, blank line between documents; prose: paragraphs")
    data.add_argument("--text-field", default="text", help="field holding the text in .jsonl files")
    data.add_argument("--cache-dir", help="where shards are cached (default: $BERTFORGE_CACHE or ~/.cache/bertforge)")
    data.add_argument("--eval-fraction", type=float, default=0.02, help="share of documents held out")
    mask = pre.add_argument_group("masking")
    mask.add_argument("--mask-prob", type=float, help="share of tokens predicted (default: the recipe's, 0.15); "
                      "held-out accuracy is always measured at 0.15")
    mask.add_argument("--replace-prob", type=float,
                      help="share of those replaced by [MASK] (default 0.8; electra 0.85, as its paper's code)")
    mask.add_argument("--random-prob", type=float,
                      help="share of those replaced by a random token (default 0.1; electra 0)")
    mask.add_argument("--whole-word", action="store_true", help="mask all pieces of a word together (token scheme)")
    mask.add_argument("--masking", choices=["token", "span", "ngram"],
                      help="token: BERT; span: SpanBERT's geometric whole-word spans; ngram: ALBERT's n-grams "
                           "(default: the objective's: span for span, ngram for albert, else token)")
    opt = pre.add_argument_group("optimization")
    opt.add_argument("--lr", type=float, help="peak learning rate (default: the recipe's, by preset: small-budget "
                     "2e-3 for bert-tiny, 1e-3 for bert-mini, ...; bert-2018 1e-4, 2e-4 for roberta)")
    opt.add_argument("--beta2", type=float, help="Adam beta2 (default: the recipe's: 0.98; bert-2018 0.999)")
    opt.add_argument("--warmup", type=float,
                     help="warm-up: a fraction of the steps (<1) or steps (default: the recipe's: 0.1; bert-2018 0.01)")
    opt.add_argument("--dropout", type=float, help="dropout while pretraining; the saved config keeps the "
                     "preset's 0.1 for fine-tuning (default: the recipe's: 0; bert-2018 0.1)")
    opt.add_argument("--schedule", choices=["linear", "cosine", "one-cycle", "constant", "slanted"],
                     help="decay after warm-up: linear, or a cosine (cosine and one-cycle are the same), or "
                          "ULMFiT's slanted triangular rates (default: the recipe's: cosine for gpt, one-cycle for "
                          "awd-lstm, slanted for awd-lstm --init, else linear)")
    opt.add_argument("--weight-decay", type=float, default=0.01, help="AdamW weight decay (not on biases, LayerNorm)")
    opt.add_argument("--accum", type=int, default=1, help="micro-batches per step (gradient accumulation)")
    opt.add_argument("--clip", type=float, help="gradient-norm clipping (0: none; default 1, 0.25 for awd-lstm)")
    opt.add_argument("--precision", choices=["auto", "bf16", "fp16", "fp32"], default="auto",
                     help="auto: bf16 where it is native (Ampere+ GPUs, CPUs with AVX512-BF16/AMX), fp16 with a "
                          "gradient scaler on older GPUs, else fp32")
    opt.add_argument("--compile", action="store_true",
                     help="torch.compile the model (needs a C++ compiler on CPU; the first step includes compiling)")
    opt.add_argument("--seed", type=int, default=0, help="seed for initialisation, data and masking")
    rnn = pre.add_argument_group("recurrent (awd-lstm, elmo)")
    rnn.add_argument("--bptt", type=int, help="length of the chunks back-propagated through (default: 70 for "
                     "awd-lstm, with AWD-LSTM's variable lengths around it; elmo 20); the hidden state carries "
                     "across chunks")
    rnn.add_argument("--min-freq", type=int, default=2, help="words seen fewer times read as xxunk (--vocab-size "
                     "caps the vocabulary: default 60,000, ULMFiT's)")
    rnn.add_argument("--no-rules", action="store_true", help="lowercase only, without ULMFiT's xxmaj, xxup, xxrep, "
                     "xxwrep tokens")
    rnn.add_argument("--backwards", action="store_true", help="awd-lstm: train on reversed text (ULMFiT's backward "
                     "model)")
    rnn.add_argument("--dropout-scale", type=float, default=1.0,
                     help="awd-lstm: multiplies its five dropouts (fastai's drop_mult)")
    rnn.add_argument("--sampled-softmax", type=int, help="train with a sampled softmax of this many words drawn "
                     "per batch (the held-out loss stays the full softmax's); 0: the full softmax; default: 2048 "
                     "for awd-lstm over a vocabulary of more than 8,192 words (3x faster learning, measured), else "
                     "the full softmax")
    log = pre.add_argument_group("logging and checkpoints")
    log.add_argument("--log-every", type=int, default=10, help="steps between metric records")
    log.add_argument("--eval-every", type=int, default=200, help="steps between held-out evaluations (0: end only)")
    log.add_argument("--eval-batches", type=int, default=20, help="held-out batches per evaluation")
    log.add_argument("--save-every", type=int, default=500, help="steps between checkpoints")
    log.add_argument("--keep", type=int, default=2, help="checkpoints kept")
    log.add_argument("--quiet", action="store_true", help="no progress bars")
    log.add_argument("--report-to", **REPORT_TO)
    pre.set_defaults(func=cmd_pretrain)

    fine = commands.add_parser("finetune", help="fine-tune a pretrained BERT (or GPT-1) for a task",
                               formatter_class=HelpFormatter)
    fine.add_argument("--task", required=True,
                      help="a GLUE task (sst2, mrpc, rte, cola, qqp, mnli, qnli, stsb, wnli) or a family "
                           "(classification, regression, ner, qa, multiple-choice)")
    fine.add_argument("--train", required=True, help="training file (.tsv, .csv, .jsonl)")
    fine.add_argument("--dev", required=True, help="dev file, evaluated every epoch")
    fine.add_argument("--model", required=True, help="a pretrained BERT-family or GPT-1 model (an HF directory)")
    fine.add_argument("--out", required=True, help="run directory; the best model goes to OUT/model")
    fine.add_argument("--text-column", help="column of the text (name, or position without a header)")
    fine.add_argument("--pair-column", help="column of the second text, for sentence pairs")
    fine.add_argument("--label-column", help="column of the label")
    fine.add_argument("--no-header", action="store_true", help="the files have no header line")
    fine.add_argument("--word-column", type=int, help="tagging: column of the words in CoNLL files (default 0)")
    fine.add_argument("--tag-column", type=int, help="tagging: column of the tags (default -1, the last)")
    fine.add_argument("--scheme", choices=["IOB1", "IOB2", "BIOES"],
                      help="tagging: convert the tags to this scheme (default: keep the file's)")
    fine.add_argument("--crf", action="store_true",
                      help="tagging: a linear-chain CRF over the words' tag scores, trained on whole tag paths "
                           "and decoded by Viterbi")
    fine.add_argument("--tagger", choices=["taglm", "taglm-baseline"],
                      help="tagging over an ELMo biLM: TagLM (its LM states joined after the first of two biLSTM "
                           "layers, with a CRF), or the same tagger without LM states (default: ELMo's recipe, the "
                           "frozen biLM mixed into a task biLSTM)")
    fine.add_argument("--max-seq-length", type=int,
                      help="tokens per example, longer ones are cut (default: 128; 256 for tagging; 384 for qa)")
    mc = fine.add_argument_group("multiple choice")
    mc.add_argument("--choice-columns", help="columns of the endings, comma-separated (default: a JSONL list "
                                             "field 'choices'); SWAG: ending0,ending1,ending2,ending3")
    mc.add_argument("--prefix-column", help="a column put before every ending (SWAG: sent2)")
    qa = fine.add_argument_group("question answering (SQuAD JSON; FILE@A-B reads articles A to B)")
    qa.add_argument("--doc-stride", type=int, help="tokens between context windows (default 128)")
    qa.add_argument("--max-query-length", type=int, help="question tokens kept (default 64)")
    qa.add_argument("--max-answer-length", type=int, help="longest answer in tokens (default 30)")
    qa.add_argument("--n-best", type=int, help="start and end candidates per window (default 20)")
    qa.add_argument("--null-threshold", type=float,
                    help="SQuAD 2.0: answer nothing when the null score beats the best span by more (default 0)")
    fine.add_argument("--epochs", type=float, default=3.0, help="passes over the training data")
    fine.add_argument("--steps", type=int, help="optimizer steps (instead of --epochs)")
    fine.add_argument("--batch-size", type=int, default=32, help="examples per optimizer step")
    fine.add_argument("--lr", type=float, help="peak learning rate of the top layer (default: by the encoder's "
                      "width: 3e-4 up to 128, 2e-4 up to 256, 1e-4 up to 512, 5e-5 up to 768, else 2e-5)")
    fine.add_argument("--warmup", type=float, help="warm-up: a fraction of the steps (<1) or steps (default 0.1)")
    fine.add_argument("--schedule", choices=["linear", "cosine", "one-cycle", "constant", "slanted"],
                      help="decay after warm-up; cosine and one-cycle are the same; slanted: ULMFiT's slanted "
                           "triangular rates (default: linear; slanted for an AWD-LSTM)")
    fine.add_argument("--layer-lr-decay", type=float,
                      help="learning-rate factor per layer going down (0.95: layer-wise decay; "
                           "0.385 = 1/2.6: ULMFiT's discriminative rates; default 1, 1/2.6 for an AWD-LSTM)")
    fine.add_argument("--unfreeze-every", type=int,
                      help="gradual unfreezing: thaw one more layer (top down) every this many steps (default: "
                           "never; every half epoch for an AWD-LSTM)")
    fine.add_argument("--classifier-dropout", type=float, help="dropout before the head (default: the model's)")
    fine.add_argument("--lm-weight", type=float,
                      help="GPT-1: weight of the auxiliary language-model loss on the task inputs "
                           "(default 0.5, the paper's; 0: none)")
    fine.add_argument("--features", choices=["pooler", "scalar-mix"],
                      help="classification: fine-tune all and read the pooled [CLS] (default), or freeze the "
                           "encoder and learn an ELMo-style mix of all layers")
    fine.add_argument("--weight-decay", type=float, default=0.01, help="AdamW weight decay")
    fine.add_argument("--accum", type=int, default=1, help="micro-batches per step")
    fine.add_argument("--clip", type=float, default=1.0, help="gradient-norm clipping (0: none)")
    fine.add_argument("--precision", choices=["auto", "bf16", "fp16", "fp32"], default="auto",
                      help="as pretrain's: bf16 where native, fp16 on older GPUs, else fp32")
    fine.add_argument("--compile", action="store_true", help="torch.compile the model (first step includes compiling)")
    fine.add_argument("--eval-every", type=int, help="steps between dev evaluations (default: every epoch)")
    fine.add_argument("--max-train-samples", type=int, help="use only the first N training examples")
    fine.add_argument("--max-eval-samples", type=int, help="use only the first N dev examples")
    fine.add_argument("--max-minutes", type=float,
                      help="stop after this many minutes of training, keeping the best model so far")
    fine.add_argument("--patience", type=int, help="stop after this many evaluations without improvement")
    fine.add_argument("--log-every", type=int, default=50, help="steps between metric records")
    fine.add_argument("--seed", type=int, default=42, help="seed for the head, shuffling and dropout")
    fine.add_argument("--resume", action="store_true", help="continue the run in --out")
    fine.add_argument("--quiet", action="store_true", help="no progress bars")
    fine.add_argument("--report-to", **REPORT_TO)
    fine.set_defaults(func=cmd_finetune)

    ev = commands.add_parser("evaluate", help="score a fine-tuned model on a labelled file")
    ev.add_argument("--model", required=True, nargs="+",
                    help="a model written by `bertforge finetune`; several classifiers of one task (ULMFiT's "
                    "forward and backward models) are scored as their ensemble: the mean of their probabilities")
    ev.add_argument("--data", required=True, help="a labelled file in the task's layout")
    ev.add_argument("--batch-size", type=int, default=64, help="examples per forward pass")
    ev.add_argument("--precision", **INFERENCE_PRECISION)
    ev.set_defaults(func=cmd_evaluate)

    pr = commands.add_parser("predict", help="predict with a fine-tuned model (the task is read from its config)")
    pr.add_argument("--model", required=True, nargs="+",
                    help="a model written by `bertforge finetune`; several classifiers of one task predict as "
                    "their ensemble (the mean of their probabilities)")
    pr.add_argument("--input", help="a file in the task's layout (default: standard input, one text per line)")
    pr.add_argument("--output", help="output file: .jsonl, .conll (tagging) or .json (QA) (default: standard output)")
    pr.add_argument("--batch-size", type=int, default=64, help="examples per forward pass")
    pr.add_argument("--format", choices=["jsonl", "conll"],
                    help="jsonl, or conll: word, gold tag (if known), predicted tag per line (tagging models) "
                         "(default: from the --output suffix, .jsonl or .conll; jsonl on standard output)")
    pr.add_argument("--precision", **INFERENCE_PRECISION)
    pr.set_defaults(func=cmd_predict)

    em = commands.add_parser("embed", help="contextual vectors per sentence or per token",
                             formatter_class=HelpFormatter)
    em.add_argument("--model", required=True,
                    help="any HF BERT directory, or an ELMo biLM made by pretrain --objective elmo")
    em.add_argument("--input", help="text file, one text per line (default: standard input)")
    em.add_argument("--output", required=True, help=".npy (sentence vectors) or .jsonl")
    em.add_argument("--layers",
                    help="a layer number (0: embeddings, -1: last), last, sum-last-4, concat-last-4, or all (mean) "
                         "(default: last; all for an ELMo model, its layers' average)")
    em.add_argument("--pooling", choices=["mean", "cls", "tokens"],
                    help="mean of the tokens, the [CLS] vector, or every token's vector (default: a "
                         "sentence-transformers model's own pooling and normalisation, else mean)")
    em.add_argument("--batch-size", type=int, default=128, help="texts per forward pass (grouped by length)")
    em.add_argument("--max-length", type=int, help="tokens per text (default: the model's maximum)")
    em.add_argument("--precision", **INFERENCE_PRECISION)
    em.set_defaults(func=cmd_embed)

    fill = commands.add_parser("fill-mask", help="predict the tokens hidden by [MASK]")
    fill.add_argument("model", help="a checkpoint with a masked-LM head")
    fill.add_argument("text", help='text with one or more [MASK], e.g. "the [MASK] sat on the mat"')
    fill.add_argument("--top-k", type=int, default=5, help="candidates shown per [MASK]")
    fill.add_argument("--json", action="store_true", help="print one JSON list per text: for each [MASK], records "
                      "{score, token, token_str, sequence} as transformers' pipeline('fill-mask')")
    fill.set_defaults(func=cmd_fill_mask)

    sv = commands.add_parser("serve", help="an HTTP service and a web page for a model (fill-mask, predict, "
                             "embed, attention)", formatter_class=HelpFormatter)
    sv.add_argument("model", help="a BERT-family directory: pretrained (with or without its masked-LM head) or "
                    "fine-tuned by bertforge finetune")
    sv.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    sv.add_argument("--port", type=int, default=8000, help="port to listen on")
    sv.add_argument("--max-batch", type=int, default=32, help="texts answered by one model call at most")
    sv.add_argument("--max-wait-ms", type=float, default=0.0,
                    help="how long a request waits for others to share its model call (0: requests that "
                         "arrive while a call runs share the next one; a lone request never waits)")
    sv.set_defaults(func=cmd_serve)

    ex = commands.add_parser("export", help="write a model as an ONNX file (every head; dynamic batch and length), "
                             "or an ELMo in AllenNLP's format", formatter_class=HelpFormatter)
    ex.add_argument("model", help="a BERT-family directory, pretrained or fine-tuned (onnx); an ELMo (allennlp)")
    ex.add_argument("out", help="the .onnx file to write; for allennlp, a directory for options.json, "
                    "weights.hdf5 and vocab.txt")
    ex.add_argument("--format", choices=["onnx", "allennlp"], default="onnx", help="the export format")
    ex.add_argument("--opset", type=int, default=18, help="ONNX opset version")
    ex.add_argument("--no-check", action="store_true",
                    help="skip running the file in onnxruntime and comparing it with the model")
    ex.set_defaults(func=cmd_export)

    imp = commands.add_parser("import-allennlp", help="read an ELMo in AllenNLP's format (options.json + "
                              "weights.hdf5) into a bertforge directory", formatter_class=HelpFormatter)
    imp.add_argument("options", help="the model's options.json")
    imp.add_argument("weights", help="its weights.hdf5")
    imp.add_argument("out", help="the directory to write")
    imp.add_argument("--vocab", help="bilm-tf's vocabulary file (<S>, </S>, <UNK>, then a word per line): needed "
                     "when the weights hold a softmax, and gives the words the language model predicts")
    imp.set_defaults(func=cmd_import_allennlp)

    gen = commands.add_parser("generate", help="continue a prompt with a left-to-right language model (GPT-1)",
                              formatter_class=HelpFormatter)
    gen.add_argument("model", help="a GPT-1 checkpoint made by bertforge pretrain --objective gpt")
    gen.add_argument("prompt", help="the text to continue")
    gen.add_argument("--max-new-tokens", type=int, default=50, help="tokens to add at most (fewer at [SEP])")
    gen.add_argument("--do-sample", action="store_true", help="sample the next token (default: the most likely)")
    gen.add_argument("--temperature", type=float, default=1.0, help="sampling: divide the logits by this (> 0)")
    gen.add_argument("--top-k", type=int, default=0, help="sampling: only the k most likely tokens (0: all)")
    gen.add_argument("--top-p", type=float, default=1.0,
                     help="sampling: only the most likely tokens whose probability adds up to p, in (0, 1]")
    gen.add_argument("--seed", type=int, default=0, help="seed of the sampling")
    gen.set_defaults(func=cmd_generate)

    lm = commands.add_parser("evaluate-lm", help="masked-token and next-sentence accuracy on held-out text, "
                             "beside what word counts alone score", formatter_class=HelpFormatter)
    lm.add_argument("model", help="a pretraining checkpoint (with its masked-LM head)")
    lm.add_argument("files", nargs="+", help="text files, folders or globs the model has not seen")
    lm.add_argument("--max-seq-length", type=int, default=128, help="tokens per instance (at most the model's)")
    lm.add_argument("--batch-size", type=int, default=32, help="instances per batch")
    lm.add_argument("--max-batches", type=int, default=100, help="batches read at most")
    lm.add_argument("--seed", type=int, default=0, help="seed of the instances and masks")
    lm.add_argument("--layout", choices=["auto", "lines", "prose"], default="auto",
                    help="lines: one sentence per line, blank line between documents; prose: paragraphs")
    lm.add_argument("--text-field", default="text", help="field holding the text in .jsonl files")
    lm.add_argument("--cache-dir", help="where shards are cached (default: $BERTFORGE_CACHE or ~/.cache/bertforge)")
    lm.add_argument("--json", action="store_true", help="print the scores as one JSON object")
    lm.set_defaults(func=cmd_evaluate_lm)

    tokenizer = commands.add_parser("tokenizer", help="WordPiece vocabularies")
    tokenizer_commands = tokenizer.add_subparsers(dest="tokenizer_command", required=True, metavar="COMMAND")
    train = tokenizer_commands.add_parser("train", help="learn a WordPiece vocabulary from text files")
    train.add_argument("files", nargs="+", help="UTF-8 text files to learn from")
    train.add_argument("--out", required=True, help="directory to write vocab.txt and tokenizer files to")
    train.add_argument("--vocab-size", type=int, default=30522, help="number of tokens (default: 30522, as BERT)")
    train.add_argument("--min-frequency", type=int, default=2,
                       help="how often a pair must occur to be merged (default: 2)")
    train.add_argument("--cased", action="store_true", help="keep case (default: lowercase, as BERT-uncased)")
    train.add_argument("--strip-accents", type=_bool, default=None,
                       help="true/false; default: strip when lowercasing, as BERT")
    train.add_argument("--no-cjk-split", action="store_true",
                       help="do not put spaces around CJK ideographs (default: split, as BERT)")
    train.add_argument("--limit-alphabet", type=int, default=None,
                       help="keep at most this many distinct characters (default: all)")
    train.add_argument("--kind", choices=VOCAB_KINDS, default="wordpiece",
                       help="wordpiece (BERT's, the default), byte-bpe (RoBERTa's; case kept unless lowercased), "
                            "bpe (GPT-1's, marking word ends with </w>)")
    train.set_defaults(func=cmd_tokenizer_train)
    # --debug after the command too; SUPPRESS so that a command's default does not undo one given before it
    for name in ("evaluate", "predict", "embed", "fill-mask", "generate", "serve"):
        commands.choices[name].add_argument("--device", default="auto",
                                            help="auto (a GPU when there is one, else the CPU), cpu, cuda or cuda:N")
    for name in REPLAYABLE:
        commands.choices[name].add_argument(
            "--config", metavar="RUN_CONFIG.json",
            help="replay a run: the options saved in its run_config.json become the defaults, and options given "
                 "here override them (--out OTHER to replay it elsewhere)")
    for command in [*commands.choices.values(), *tokenizer_commands.choices.values()]:
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        command.formatter_class = HelpFormatter
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = argparse.Namespace(debug="--debug" in argv)  # what the error boundary reads until the parse
    try:
        parser = build_parser()
        config_defaults(parser, argv)
        args = parser.parse_args(argv)
        check_options(vars(args), args.command)
        for name in ("model", "init"):  # a run directory stands for the model it wrote
            value = getattr(args, name, None)
            if isinstance(value, list):  # an ensemble
                setattr(args, name, [model_directory(v) for v in value])
            elif value:
                setattr(args, name, model_directory(value))
        args.func(args)
    except KeyboardInterrupt:
        print("bertforge: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `bertforge predict ... | head`: the reader left; nothing to say
        sys.stderr.close()
        return 0
    except Exception as e:  # the one error boundary: one line and exit 2, a traceback only with --debug
        if getattr(args, "debug", False):
            raise
        print(f"bertforge: error: {describe(e)}", file=sys.stderr)
        return 2
    return 0


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:  # the installed package's, without importing torch as `bertforge.__version__` would
        return version("bertforge")
    except PackageNotFoundError:
        return "(not installed)"


def model_directory(path: str) -> str:
    """`path`, or `path/model` when `path` is the output folder of `pretrain` or `finetune`."""
    if not os.path.exists(os.path.join(path, "config.json")) and os.path.exists(os.path.join(path, "model",
                                                                                             "config.json")):
        return os.path.join(path, "model")
    return path


def describe(e: Exception) -> str:
    """One line for any exception: ours as written; a file system error with its file; anything
    else (a native library, a bug) with its type and the hint to see more."""
    if isinstance(e, BertforgeError):
        return str(e)
    if isinstance(e, OSError) and e.filename:
        return f"{e.filename}: {e.strerror or e}"
    message = " ".join(str(e).split()) or "no message"
    return f"{type(e).__name__}: {message} (--debug shows where)"


if __name__ == "__main__":
    sys.exit(main())
