"""`bertforge finetune`: its options and one call, `bertforge.finetune` with them as keywords (the
fine-tuning recipe of the model's family under every option given is resolved there)."""

from __future__ import annotations

from .common import MAX_MINUTES_HELP, REPORT_TO, HelpFormatter, keywords


COVE_FEATURES = ("glove", "cove", "glove+cove")  # the CoVe record's task_features, named here so that --help needs no torch

def add_command(commands) -> None:
    fine = commands.add_parser("finetune", help="fine-tune a pretrained model of any family (BERT, GPT-1, ULMFiT, ELMo, CoVe) for a task",
                               formatter_class=HelpFormatter)
    _add_task(fine)
    _add_choice_and_qa(fine)
    _add_training(fine)
    fine.set_defaults(func=run)


def _add_task(fine) -> None:
    fine.add_argument("--task", required=True,
                      help="a GLUE task (sst2, mrpc, rte, cola, qqp, mnli, qnli, stsb, wnli) or a task kind "
                           "(classification, regression, ner or tagging, qa, multiple-choice, or a registered "
                           "kind's name)")
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


def _add_choice_and_qa(fine) -> None:
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


def _add_training(fine) -> None:
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
    fine.add_argument("--features", choices=["pooler", "scalar-mix", *COVE_FEATURES],
                      help="classification over a Transformer: fine-tune all and read the pooled [CLS] (pooler, "
                           "the default), or freeze the encoder and learn an ELMo-style mix of all layers "
                           "(scalar-mix); over a CoVe model (train-translation --arch lstm): what its task network "
                           "reads, the fixed word vectors (glove), CoVe (cove) or both (glove+cove, the default)")
    fine.add_argument("--weight-decay", type=float, default=0.01, help="AdamW weight decay")
    fine.add_argument("--accum", type=int, default=1, help="micro-batches per step")
    fine.add_argument("--clip", type=float, default=1.0, help="gradient-norm clipping (0: none)")
    fine.add_argument("--precision", choices=["auto", "bf16", "fp16", "fp32"], default="auto",
                      help="as pretrain's: bf16 where native, fp16 on older GPUs, else fp32")
    fine.add_argument("--compile", action="store_true", help="torch.compile the model (first step includes compiling)")
    fine.add_argument("--eval-every", type=int, help="steps between dev evaluations (default: every epoch)")
    fine.add_argument("--max-train-samples", type=int, help="use only the first N training examples")
    fine.add_argument("--max-eval-samples", type=int, help="use only the first N dev examples")
    fine.add_argument("--max-minutes", type=float, help=MAX_MINUTES_HELP + "; the best model so far is kept")
    fine.add_argument("--patience", type=int, help="stop after this many evaluations without improvement")
    fine.add_argument("--log-every", type=int, default=50, help="steps between metric records")
    fine.add_argument("--seed", type=int, default=42, help="seed for the head, shuffling and dropout")
    fine.add_argument("--resume", action="store_true", help="continue the run in --out")
    fine.add_argument("--quiet", action="store_true", help="no progress bars")
    fine.add_argument("--report-to", **REPORT_TO)


def run(args) -> None:
    from ..finetune import finetune
    from ..metrics import format_score, format_scores

    result = finetune(**keywords(args))  # the family's recipe resolved there, as for a call from Python
    best, select = result["best"], result["select"]
    kept = format_scores(best.get("metrics") or {}, skip=(select,))
    print(f"{result['status']} at step {result['step']}; best {select} "
          f"{format_score(select, best['score'])} at step {best['step']}" + (f" ({kept})" if kept else "")
          + f"; model in {args.out}/model")
