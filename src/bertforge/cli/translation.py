"""`bertforge train-translation` and `bertforge translate`: the Transformer for translation."""

from __future__ import annotations

import contextlib
import sys

from ..families import translation_archs
from .common import (INFERENCE_PRECISION, MAX_MINUTES_HELP, REPORT_TO, HelpFormatter, add_device, add_path, keywords,
                     renamed, resolve_device)


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
    archs = translation_archs()  # the records are torch-free: --help imports no torch
    p.add_argument("--arch", choices=list(archs), default="transformer",
                   help="transformer: Vaswani et al.'s; lstm: CoVe's attentional LSTM encoder-decoder over fixed "
                        "--word-vectors (McCann et al., 2017); or a registered translation family's arch")
    p.add_argument("--init", metavar="MODEL",
                   help="fine-tune this translation model (a MarianMT directory: ours, or a published OPUS-MT one; or "
                        "a Hugging Face Hub name such as Helsinki-NLP/opus-mt-en-de) with its own vocabulary and "
                        "size, instead of a new one (default --lr 5e-5, --warmup 100)")
    p.add_argument("--word-vectors", metavar="FILE",
                   help="--arch lstm: the fixed source word vectors (GloVe text, word2vec .vec/.bin; "
                        "bertforge word-vectors makes them)")
    p.add_argument("--min-vector-coverage", type=float, default=0.5,
                   help="--arch lstm: refuse to train when a smaller share of the training sources' words have a "
                        "word vector (the others all read one zero vector); 0 trains whatever the share")
    p.add_argument("--preset", choices=[name for family in archs.values() for name in family.presets],
                   help="the model's size (default: multi30k for the transformer, cove for the lstm)")
    p.add_argument("--vocab-size", type=int, default=8000, help="size of the joint sub-word vocabulary")
    p.add_argument("--vocab-kind", choices=["bpe", "unigram"], default="bpe", help="the sub-word model")
    p.add_argument("--batch-tokens", type=int, default=4096, help="padded tokens per batch (source and target each)")
    renamed(p, "--max-tokens", "--batch-tokens")
    p.add_argument("--max-seq-length", type=int, default=256, help="longer pairs are skipped (and counted in the log)")
    renamed(p, "--max-length", "--max-seq-length")
    p.add_argument("--steps", type=int, help="optimizer steps (with --max-minutes: whichever comes first)")
    p.add_argument("--max-minutes", type=float, help=MAX_MINUTES_HELP)
    p.add_argument("--lr", type=float, help="the peak learning rate, reached after --warmup (default: 1e-3 for the "
                                            "Transformer, 2e-3 for --arch lstm)")
    p.add_argument("--warmup", type=float, help="warm-up before the --schedule: steps, or a fraction "
                   "(< 1) of --steps (default: 1,000 steps for the Transformer, 200 for --arch lstm)")
    p.add_argument("--schedule", choices=["inverse-sqrt", "linear", "cosine"], default="inverse-sqrt",
                   help="after the warm-up: the paper's inverse square root, or a linear or cosine decay to 0 at "
                        "the end of --steps or of the --max-minutes budget")
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
    p.set_defaults(func=run_train, _hub_kind="translation")  # a Hub dataset given here is parallel text


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
    p.add_argument("--batch-size", type=int, default=128, help="sentences decoded together")
    p.add_argument("--scores", action="store_true",
                   help="write each translation's score after it, tab-separated: its summed log-probability over "
                        "the length penalty, what the search ranks by (transformers' sequences_scores)")
    p.add_argument("--n-best", type=int, metavar="K",
                   help="write the K best translations of each sentence (K at most --beam), a line each: the "
                        "sentence's line number (from 0), the translation and its score, tab-separated (as "
                        "fairseq's and Moses' n-best lists); --reference scores the best")
    p.add_argument("--max-tokens", type=int, default=32_768,
                   help="tokens one batch may have the model read: each source, and every token each hypothesis of "
                        "its beam may decode (bertforge serve's estimate); batches are cut to fit, and a sentence "
                        "over it alone is refused")
    p.add_argument("--precision", **INFERENCE_PRECISION)
    add_device(p)
    p.set_defaults(func=run_translate)


def run_train(args) -> None:
    from ..train_translation import train_translation

    summary = train_translation(**keywords(args))  # the arch's defaults resolved there, as for a call from Python
    print(closing_summary(summary, args.out))


def closing_summary(summary: dict, out: str) -> str:
    """The run's last lines: where the model is, and its validation scores on BLEU's 0-100 scale."""
    import os

    scores = summary.get("eval") or {}
    model = os.path.join(out, "model")
    lines = [f"{summary['status']} at step {summary['step']:,} after {summary.get('elapsed_s', 0) / 60:.1f} minutes; "
             f"the model is in {model}" + (f" (the mean of {len(summary['averaged'])} checkpoints)"
                                         if summary.get("averaged") else "")]
    if scores:
        text = f"validation: loss {scores['loss']:.3f}, token accuracy {100 * scores['accuracy']:.1f}%"
        if "bleu" in scores:
            text += (f", BLEU {scores['bleu']:.2f} ({scores.get('bleu_decoding', 'greedy')}, "
                     f"{scores.get('bleu_sentences', '?')} sentences; {scores.get('bleu_signature', 'sacreBLEU')})")
        lines.append(text)
    lines.append(f"translate with: bertforge translate --model {model} --input FILE")
    return "\n".join(lines)


def run_translate(args) -> None:
    from ..atomic import atomic_file
    from ..load import load
    from ..paths import check_apart
    from ..quantize import for_inference
    from ..scoring import corpus_scores, describe
    from ..translate import DecodeOptions, translate_scored

    check_apart(args.output, args.input, args.reference, args.model)
    sentences = _read_lines(args.input)  # bad input is said before the model is read
    references = _read_lines(args.reference) if args.reference else None
    loaded = load(args.model, resolve_device(args.device, args.precision), use="translate")
    source = args.input or "standard input"
    options = DecodeOptions(beam=args.beam, length_penalty=args.length_penalty, penalty=args.penalty,
                            max_len_a=args.max_len_a, max_len_b=args.max_len_b, batch_size=args.batch_size,
                            max_tokens=args.max_tokens)
    with for_inference(loaded.model, args.precision):  # int8 quantizes the linear layers here, once
        scored = translate_scored(loaded.model, loaded.tokenizer, sentences, options, args.n_best or 1, source=source,
                                  scores=bool(args.n_best or args.scores))
    out = [hyps[0][0] for hyps in scored]
    if args.n_best:
        lines = [f"{n}\t{text}\t{score:.4f}" for n, hyps in enumerate(scored) for text, score in hyps]
    elif args.scores:
        lines = [f"{hyps[0][0]}\t{hyps[0][1]:.4f}" for hyps in scored]
    else:
        lines = out
    if args.output:
        with atomic_file(args.output) as f:
            f.writelines(line + "\n" for line in lines)
    else:
        sys.stdout.writelines(line + "\n" for line in lines)
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
