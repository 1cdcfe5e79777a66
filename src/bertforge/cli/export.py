"""`bertforge export`: a model as an ONNX file, or an ELMo in AllenNLP's format."""

from __future__ import annotations

from .common import HelpFormatter, add_path


def add_command(commands) -> None:
    ex = commands.add_parser("export", help="write a model as an ONNX file (every head; dynamic batch and length), "
                             "or an ELMo in AllenNLP's format", formatter_class=HelpFormatter)
    add_path(ex, "--model", "a BERT-family directory, pretrained or fine-tuned (onnx); an ELMo (allennlp)")
    add_path(ex, "--out", "the .onnx file to write; for a translation model, a folder for encoder_model.onnx "
                    "and decoder_model.onnx; for allennlp, a folder for options.json, weights.hdf5 and vocab.txt")
    ex.add_argument("--format", choices=["onnx", "allennlp"], default="onnx", help="the export format")
    ex.add_argument("--opset", type=int, default=18, help="ONNX opset version")
    ex.add_argument("--no-check", action="store_true",
                    help="skip running the file in onnxruntime and comparing it with the model")
    ex.set_defaults(func=run)


def run(args) -> None:
    if args.format == "allennlp":
        from ..formats.allennlp import export_allennlp

        report = export_allennlp(args.model, args.out)
        print(f"wrote {args.out}: options.json, weights.hdf5 ({report['datasets']} datasets, the softmax included) "
              f"and vocab.txt ({report['words']:,} words)")
        return
    from ..onnx_export import export_onnx

    report = export_onnx(args.model, args.out, opset=args.opset, check=not args.no_check)
    print(f"wrote {args.out}: inputs {', '.join(report['inputs'])}; outputs {', '.join(report['outputs'])}"
          + (f"; onnxruntime agrees to {report['max_difference']:.1e}" if "max_difference" in report else ""))
