"""`bertforge import-allennlp`: an ELMo in AllenNLP's format read into a bertforge directory."""

from __future__ import annotations

from .common import HelpFormatter, add_path


def add_command(commands) -> None:
    imp = commands.add_parser("import-allennlp", help="read an ELMo in AllenNLP's format (options.json + "
                              "weights.hdf5) into a bertforge directory", formatter_class=HelpFormatter)
    imp.add_argument("options", help="the model's options.json")
    imp.add_argument("weights", help="its weights.hdf5")
    add_path(imp, "--out", "the directory to write")
    imp.add_argument("--vocab", help="bilm-tf's vocabulary file (<S>, </S>, <UNK>, then a word per line): needed "
                     "when the weights hold a softmax, and gives the words the language model predicts")
    imp.set_defaults(func=run)


def run(args) -> None:
    from ..formats.allennlp import import_allennlp

    report = import_allennlp(args.options, args.weights, args.out, args.vocab)
    c = report["config"]
    print(f"wrote {args.out}: ELMo, {c.n_layers} x {c.cell_size} cells projected to {c.projection_dim}, "
          + (f"its softmax over {c.vocab_size - 2:,} words" if report["softmax"] else
             "no softmax in the file (features and embeddings only; its language-model loss means nothing "
             "until trained)"))
