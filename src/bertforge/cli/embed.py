"""`bertforge embed`: contextual vectors per sentence or per token."""

from __future__ import annotations

import sys

from ..errors import BertforgeError
from .common import INFERENCE_PRECISION, HelpFormatter, add_device, renamed, resolve_device


def add_command(commands) -> None:
    em = commands.add_parser("embed", help="contextual vectors per sentence or per token",
                             formatter_class=HelpFormatter)
    em.add_argument("--model", required=True,
                    help="any HF BERT directory, an ELMo biLM made by pretrain --objective elmo, or a CoVe model "
                         "made by train-translation --arch lstm")
    em.add_argument("--input", help="text file, one text per line (default: standard input)")
    em.add_argument("--output", help=".npy (sentence vectors) or .jsonl (default: standard output, as JSON lines)")
    em.add_argument("--layers",
                    help="a layer number (0: embeddings, -1: last), last, sum-last-4, concat-last-4 (all the "
                         "outputs of a model with fewer, as it then says), or all (mean) "
                         "(default: last; all for an ELMo model, its layers' average)")
    em.add_argument("--pooling", choices=["mean", "cls", "tokens"],
                    help="mean of the tokens, the [CLS] vector, or every token's vector (default: a "
                         "sentence-transformers model's own pooling and normalisation, else mean)")
    em.add_argument("--features", choices=["glove", "cove", "glove+cove"],
                    help="a CoVe model's vectors: its fixed word vectors, CoVe, or both concatenated (default)")
    em.add_argument("--batch-size", type=int, default=128, help="texts per forward pass (grouped by length)")
    em.add_argument("--max-seq-length", type=int, help="tokens per text (default: the model's maximum)")
    renamed(em, "--max-length", "--max-seq-length")
    em.add_argument("--precision", **INFERENCE_PRECISION)
    add_device(em)
    em.set_defaults(func=run)


def run(args) -> None:
    from ..embed import Embedder, check_layers, check_output, write_embeddings
    from ..paths import check_apart
    from ..tasks.common import read_text

    if args.output:
        check_output(args.output, args.pooling)  # before any work
    check_apart(args.output, args.input, args.model)
    if args.layers:
        check_layers(args.layers)
    texts = [line.rstrip("\r") for line in read_text(args.input).split("\n") if line.strip()]
    if not texts:
        raise BertforgeError(f"{args.input or '<stdin>'}: no text to embed")
    embedder = Embedder.from_pretrained(args.model, resolve_device(args.device, args.precision), args.precision)
    refused = getattr(embedder, "LAYERS_REFUSED", None)  # a model whose vectors come of no layer number
    if args.layers and refused:
        raise BertforgeError(f"{args.model}: {refused}")
    if args.features and args.features not in getattr(embedder, "FEATURES", ()):
        raise BertforgeError(f"{args.model}: --features is for CoVe models (glove, cove, glove+cove)")
    layers = args.layers or ("all" if hasattr(embedder, "vocab") else "last")  # ELMo: the average of its layers
    layers = int(layers) if layers.lstrip("-").isdigit() else layers
    note = check_layers(layers, embedder.states)  # before the header that says the work starts
    from ..report import header, say

    if note:
        say(note)
    say(header(embedder.model, next(embedder.model.parameters()).device, args.precision,
               f"{len(texts):,} texts from {args.input or 'standard input'}",
               f"{args.output or 'standard output'}: layers {layers}, pooling {args.pooling or 'its default'}"))
    vectors = embedder.encode(texts, layers, args.pooling, args.batch_size, args.max_seq_length,
                              progress=len(texts) >= 1000,  # a few seconds' work or more
                              **({"features": args.features} if args.features else {}))
    # cut exactly as encode() cuts, so tokens and vectors line up
    tokens = embedder.tokens(texts, args.max_seq_length) if args.pooling == "tokens" else None
    write_embeddings(args.output, vectors, texts, tokens)
    if args.output:
        shape = (vectors.shape if hasattr(vectors, "shape")
                 else f"{len(vectors)} texts x tokens x {vectors[0].shape[-1]}")
        print(f"wrote {shape} vectors to {args.output}", file=sys.stderr)
