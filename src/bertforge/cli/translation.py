"""`bertforge train-translation` and `bertforge translate`: the Transformer for translation."""

from __future__ import annotations

import contextlib
import sys

from .common import REPORT_TO, HelpFormatter, add_device, add_path, renamed, resolve_device

# config/marian.py's and config/cove.py's, named here so that --help needs no torch
PRESETS = ["mt-tiny", "multi30k", "base", "big", "cove-tiny", "cove"]


def add_command(commands) -> None:
    _add_train(commands)
    _add_translate(commands)


def _add_train(commands) -> None:
    p = commands.add_parser("train-translation", formatter_class=HelpFormatter,
                            help="train a translation model on parallel text: the Transformer (Vaswani et al., 2017) or CoVe's attentional LSTM (--arch lstm)")
    p.add_argument("--source-lang", required=True, help="the source language's suffix, e.g. en")
    p.add_argument("--target-lang", required=True, help="the target language's suffix, e.g. de")
    p.add_argument("--train", required=True,
                   help="PREFIX of line-aligned files PREFIX.<source-lang> and PREFIX.<target-lang>, or a JSON-lines "
                        'file of {"translation": {"en": ..., "de": ...}}')
    p.add_argument("--dev", required=True, help="the validation pairs, given as --train")
    renamed(p, "--valid", "--dev")
    p.add_argument("--out", required=True, help="the run's folder: checkpoints, metrics.jsonl, model/")
    p.add_argument("--arch", choices=["transformer", "lstm"], default="transformer",
                   help="transformer: Vaswani et al.'s; lstm: CoVe's attentional LSTM encoder-decoder over fixed "
                        "--word-vectors (McCann et al., 2017)")
    p.add_argument("--word-vectors", metavar="FILE",
                   help="--arch lstm: the fixed source word vectors (GloVe text, word2vec .vec/.bin; "
                        "bertforge word-vectors makes them)")
    p.add_argument("--preset", choices=PRESETS,
                   help="the model's size (default: multi30k for the transformer, cove for the lstm)")
    p.add_argument("--vocab-size", type=int, default=8000, help="size of the joint sub-word vocabulary")
    p.add_argument("--vocab-kind", choices=["bpe", "unigram"], default="bpe", help="the sub-word model")
    p.add_argument("--batch-tokens", type=int, default=4096, help="padded tokens per batch (source and target each)")
    renamed(p, "--max-tokens", "--batch-tokens")
    p.add_argument("--max-seq-length", type=int, default=256, help="longer pairs are skipped (and counted in the log)")
    renamed(p, "--max-length", "--max-seq-length")
    p.add_argument("--steps", type=int, help="optimizer steps (with --max-minutes: whichever comes first)")
    p.add_argument("--max-minutes", type=float, help="a time budget in minutes")
    p.add_argument("--lr", type=float, help="the peak learning rate, reached after --warmup (default: 1e-3 for the "
                                            "Transformer, 2e-3 for --arch lstm)")
    p.add_argument("--warmup", type=float, help="warm-up of the inverse-square-root schedule: steps, or a fraction "
                   "(< 1) of --steps (default: 1,000 steps for the Transformer, 200 for --arch lstm)")
    p.add_argument("--label-smoothing", type=float, default=0.1, help="of the cross-entropy")
    p.add_argument("--dropout", type=float,
                   help="dropout of the model (default: the preset's: 0.1 to 0.3 for the Transformer, 0.2 for the lstm)")
    p.add_argument("--eval-every", type=int, default=500, help="steps between validation loss and BLEU")
    p.add_argument("--bleu-sentences", type=int, default=500, help="validation sentences translated for BLEU")
    p.add_argument("--average", type=int, default=5, help="the model is the mean of the last N checkpoints")
    p.add_argument("--pre-ln", action="store_true",
                   help="LayerNorm before each sublayer (not the paper's order; transformers cannot load it)")
    p.add_argument("--untie-output", action="store_true",
                   help="give the output projection its own matrix (the paper's is the shared embedding matrix)")
    p.add_argument("--precision", choices=["auto", "bf16", "fp16", "fp32"], default="auto",
                   help="auto: bf16 where the CPU or GPU has it, else fp32")
    p.add_argument("--seed", type=int, default=0, help="seed of the initialisation and batch order")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    p.add_argument("--report-to", **REPORT_TO)
    p.set_defaults(func=run_train)


def _add_translate(commands) -> None:
    p = commands.add_parser("translate", formatter_class=HelpFormatter,
                            help="translate text with a model made by train-translation (or any MarianMT directory)")
    add_path(p, "--model", "a model directory (or the --out of train-translation)")
    p.add_argument("--input", help="a file of sentences, one per line (default: standard input)")
    p.add_argument("--output", help="where to write the translations (default: standard output)")
    p.add_argument("--reference", help="a file of reference translations: print sacreBLEU, chrF and lowercased BLEU")
    p.add_argument("--beam", type=int, default=5, help="beam width (1: greedy)")
    p.add_argument("--length-penalty", type=float, default=1.0, help="alpha of the length penalty")
    p.add_argument("--penalty", choices=["hf", "gnmt"], default="hf",
                   help="hf: score / length**alpha (transformers', fairseq's); gnmt: score / ((5+length)/6)**alpha")
    p.add_argument("--max-len-a", type=float, default=1.5, help="length limit: a x source length + b")
    p.add_argument("--max-len-b", type=int, default=10, help="length limit: a x source length + b")
    p.add_argument("--batch-size", type=int, default=64, help="sentences decoded together")
    add_device(p)
    p.set_defaults(func=run_translate)


def run_train(args) -> None:
    from ..errors import BertforgeError
    from ..train_translation import train_translation

    if args.arch != "transformer" and (args.pre_ln or args.untie_output):
        raise BertforgeError("--pre-ln and --untie-output are the Transformer's (--arch transformer)")
    if args.warmup is not None and args.warmup < 1:  # a fraction, as pretrain's and finetune's --warmup
        if args.steps is None:
            raise BertforgeError(f"--warmup {args.warmup}: a fraction of the steps needs --steps (or give steps)")
        args.warmup = max(1, round(args.warmup * args.steps))
    summary = train_translation(
        args.source_lang, args.target_lang, args.train, args.dev, args.out, preset=args.preset,
        vocab_size=args.vocab_size, vocab_kind=args.vocab_kind, max_tokens=args.batch_tokens, max_length=args.max_seq_length,
        steps=args.steps, max_minutes=args.max_minutes, lr=args.lr,
        warmup=None if args.warmup is None else int(args.warmup),
        label_smoothing=args.label_smoothing, eval_every=args.eval_every, bleu_sentences=args.bleu_sentences,
        average=args.average, precision=args.precision, seed=args.seed, resume=args.resume,
        report_to=tuple(args.report_to or ()), arch=args.arch, word_vectors=args.word_vectors,
        overrides={**({"normalize_before": True} if args.pre_ln else {}),
                   **({"dropout": args.dropout} if args.dropout is not None else {}),
                   **({"tie_word_embeddings": False} if args.untie_output else {})})
    print(f"{summary['status']} at step {summary['step']}; validation: {summary['eval']}")


def run_translate(args) -> None:
    from ..atomic import atomic_file
    from ..load import load
    from ..paths import check_apart
    from ..scoring import corpus_scores, describe
    from ..translate import DecodeOptions, translate

    check_apart(args.output, args.input, args.reference, args.model)
    sentences = _read_lines(args.input)  # bad input is said before the model is read
    references = _read_lines(args.reference) if args.reference else None
    loaded = load(args.model, resolve_device(args.device), use="translate")
    source = args.input or "standard input"
    options = DecodeOptions(beam=args.beam, length_penalty=args.length_penalty, penalty=args.penalty,
                            max_len_a=args.max_len_a, max_len_b=args.max_len_b, batch_size=args.batch_size)
    out = translate(loaded.model, loaded.tokenizer, sentences, options, source=source)
    if args.output:
        with atomic_file(args.output) as f:
            f.writelines(line + "\n" for line in out)
    else:
        sys.stdout.writelines(line + "\n" for line in out)
        sys.stdout.flush()
    if references is not None:
        print(describe(corpus_scores(out, references)), file=sys.stderr)


def _read_lines(path: str | None) -> list[str]:
    from ..errors import BertforgeError

    if path is None and not hasattr(sys.stdin, "buffer"):  # a text stream already (a notebook's, a test's)
        return [line.rstrip("\r\n") for line in sys.stdin]
    raw = sys.stdin.buffer if path is None else open(path, "rb")
    lines = []
    with raw if path is not None else contextlib.nullcontext(raw):
        for number, line in enumerate(raw, 1):
            try:
                lines.append(line.decode("utf-8").rstrip("\r\n"))
            except UnicodeDecodeError as e:
                raise BertforgeError(f"{path or 'standard input'}:{number}: not UTF-8 text ({e.reason})") from None
    return lines
