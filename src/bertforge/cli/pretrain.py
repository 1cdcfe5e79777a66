"""`bertforge pretrain`: its options and one call, `bertforge.pretrain` with them as keywords (the
recipe's defaults under the flags given are resolved there, for the command line and Python alike;
the recurrent objectives, AWD-LSTM and ELMo, go on to `pretrain_recurrent`)."""

from __future__ import annotations

from ..families import FAMILIES, objective_names
from .common import MAX_MINUTES_HELP, REPORT_TO, VOCAB_KINDS, HelpFormatter, keywords, renamed


def add_command(commands) -> None:
    pre = commands.add_parser("pretrain", help="pretrain a BERT, RoBERTa, SpanBERT, ALBERT, ELECTRA, ModernBERT, "
                              "GPT-1, AWD-LSTM (ULMFiT) or ELMo on a corpus",
                              formatter_class=HelpFormatter)
    _add_model(pre)
    _add_budget(pre)
    _add_data(pre)
    _add_masking(pre)
    _add_optimization(pre)
    _add_recurrent(pre)
    _add_logging(pre)
    pre.set_defaults(func=run)


def _add_model(pre) -> None:
    pre.add_argument("--corpus", nargs="+", required=True,
                     help="text files, folders or globs (.txt, .jsonl, optionally .gz)")
    pre.add_argument("--out", required=True, help="run directory: checkpoints, final model, metrics")
    pre.add_argument("--objective", default="bert", choices=objective_names(),
                     help="bert: MLM + next-sentence prediction; roberta: MLM on packed full sentences; "
                          "span: SpanBERT span masking + span-boundary objective; albert: factorised embeddings, "
                          "shared layers, n-gram masking + sentence order; electra: replaced-token detection; "
                          "modernbert: MLM over a ModernBERT encoder (pre-LN, rotary, GeGLU, local/global attention); "
                          "gpt: GPT-1, a left-to-right language model; awd-lstm: ULMFiT's AWD-LSTM word-level "
                          "language model (stages 1 and, with --init, 2); elmo: ELMo's character-aware biLM "
                          "(see the recurrent options)")
    pre.add_argument("--preset", choices=preset_names(),
                     help="model size (default: by the budget: bert-tiny for --max-minutes 10 or less, else bert-mini; "
                          "awd-lstm-small for awd-lstm, whose ULMFiT size is awd-lstm-ulmfit; elmo-cpu for elmo, "
                          "whose paper sizes are elmo-small and elmo-original)")
    pre.add_argument("--recipe", default="small-budget", choices=["small-budget", "bert-2018"],
                     help="defaults of the settings below: small-budget (rotary positions for bert and span, "
                          "learning rate by size, 10%% warm-up, beta2 0.98, no dropout while pretraining: "
                          "measured best for CPU budgets) or bert-2018 (the BERT paper's, exactly)")
    pre.add_argument("--positions", choices=["rotary", "absolute"],
                     help="rotary: RoFormer (saved as RoFormerForMaskedLM; objectives bert and span; ModernBERT's "
                          "always), or for gpt GPT-2's layer order with rotary positions (saved as "
                          "GPTNeoXForCausalLM); absolute: the learned position table (default: the recipe's)")
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


def _add_budget(pre) -> None:
    budget = pre.add_argument_group("budget (at least one)")
    budget.add_argument("--steps", type=int, help="optimizer steps")
    budget.add_argument("--max-minutes", type=float, help=MAX_MINUTES_HELP)
    pre.add_argument("--resume", action="store_true", help="continue the run in --out from its latest checkpoint")


def _add_data(pre) -> None:
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
    data.add_argument("--eval-fraction", type=float, default=0.02,
                      help="share of the text held out for evaluation: whole documents where they are small, "
                           "else the last sentences of each document")


def _add_masking(pre) -> None:
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


def _add_optimization(pre) -> None:
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


def _add_recurrent(pre) -> None:
    rnn = pre.add_argument_group("recurrent (awd-lstm, elmo)")
    rnn.add_argument("--bptt", type=int, help="length of the chunks back-propagated through (default: 70 for "
                     "awd-lstm, with AWD-LSTM's variable lengths around it; elmo 20); the hidden state carries "
                     "across chunks")
    rnn.add_argument("--min-count", type=int, default=2, help="words seen fewer times read as "
                     "xxunk (--vocab-size caps the vocabulary: default 60,000, ULMFiT's)")
    renamed(pre, "--min-freq", "--min-count")
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


def _add_logging(pre) -> None:
    log = pre.add_argument_group("logging and checkpoints")
    log.add_argument("--log-every", type=int, default=10, help="steps between metric records")
    log.add_argument("--eval-every", type=int, default=200, help="steps between held-out evaluations (0: end only)")
    log.add_argument("--eval-batches", type=int, default=20, help="held-out batches per evaluation")
    log.add_argument("--save-every", type=int, default=500, help="steps between checkpoints")
    log.add_argument("--keep", type=int, default=2, help="checkpoints kept")
    log.add_argument("--quiet", action="store_true", help="no progress bars")
    log.add_argument("--report-to", **REPORT_TO)


def preset_names() -> list[str]:
    """Every family's sizes: the Transformers' (which they share) in order of name, then the others'."""
    pretrained = [f for f in FAMILIES if f.objectives]  # translation's sizes are train-translation's
    names = sorted({p for f in pretrained if f.pipeline == "subword" for p in f.presets})
    return names + [p for f in pretrained if f.pipeline != "subword" for p in f.presets if p not in names]


def run(args) -> None:
    from ..pretrain import pretrain

    result = pretrain(**keywords(args))  # the recipe resolved there, as for a call from Python
    print(f"{result['status']} at step {result['step']} after {result['elapsed_s']:.0f}s; model in "
          f"{args.out}/model, checkpoints in {args.out}/checkpoints")
    if result["status"] == "interrupted":
        raise KeyboardInterrupt
