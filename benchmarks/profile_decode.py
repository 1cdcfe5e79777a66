"""Where decoding's time goes: torch.profiler over ours translating test sentences (beam 5 and
greedy, in the default batches of 128, in a precision), each operator's own time summed by kind,
and what is left of the wall-clock time outside every operator (Python: the search's bookkeeping,
the layers' glue).

    python benchmarks/profile_decode.py --model runs/mt-speed/model-for-speed/model [--sentences 200]
        [--precision fp32|bf16|int8] [--pair en-de]

Needs the shared data (Multi30k's test_2016_flickr). Run it alone: the profile is of wall-clock time.
"""

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import provenance, provenance_line  # noqa: E402
from translation import TEST, multi30k, pair_arg  # noqa: E402

# operator (its name after "aten::" or "quantized::") -> kind; the rest are "other operators"
KINDS = [("matrix products", {"addmm", "mm", "bmm", "linear_dynamic", "matmul", "linear", "_linear_pointwise"}),
         ("attention", {"_scaled_dot_product_flash_attention_for_cpu", "scaled_dot_product_attention", "baddbmm",
                        "_scaled_dot_product_attention_math"}),
         ("layer norm", {"layer_norm", "native_layer_norm"}),
         ("softmax, log-softmax, top-k", {"softmax", "_softmax", "log_softmax", "_log_softmax", "topk", "argmax"}),
         ("cache reorder and selection", {"index_select", "gather", "repeat_interleave", "cat", "index", "select",
                                          "slice", "narrow"}),
         ("copies and allocation", {"copy_", "empty", "empty_strided", "zeros", "full", "clone", "contiguous", "to",
                                    "_to_copy", "ones", "fill_", "zero_", "resize_"}),
         ("element-wise", {"add", "add_", "mul", "mul_", "relu", "gelu", "masked_fill", "masked_fill_", "div",
                           "div_", "sub", "where", "eq", "ne", "any", "all", "sum", "exp", "log", "neg", "lt", "le",
                           "gt", "ge", "bitwise_or", "bitwise_and", "bitwise_not", "clamp", "logical_not"})]


def kind_of(name: str) -> str:
    bare = name.split("::")[-1]
    return next((kind for kind, names in KINDS if bare in names), "other operators")


def profile(model, tokenizer, sentences, beam: int, precision: str) -> dict:
    from bertforge.quantize import for_inference
    from bertforge.translate import DecodeOptions, translate

    context = for_inference(model, precision)  # int8 quantizes the model on the first call (then a no-op)
    options = DecodeOptions(beam=beam)  # the default batch
    with context:
        translate(model, tokenizer, sentences[:64], options)  # warm-up
        start = time.perf_counter()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            translate(model, tokenizer, sentences, options)
        wall = time.perf_counter() - start
    spent: dict[str, float] = {}
    for event in prof.key_averages():
        spent[kind_of(event.key)] = spent.get(kind_of(event.key), 0.0) + event.self_cpu_time_total / 1e6
    # the profiler's own cost is in the wall time: timed again without it for sentences/s
    with context:
        start = time.perf_counter()
        translate(model, tokenizer, sentences, options)
        plain = time.perf_counter() - start
    return {"wall_s": wall, "plain_s": plain, "spent": spent}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a translation model directory")
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "int8"])
    parser.add_argument("--pair", type=pair_arg, default=("en", "de"))
    args = parser.parse_args()
    from bertforge.load import load

    info = provenance(sys.argv)
    loaded = load(args.model)
    sentences = [s for s, _ in multi30k(TEST, args.pair)[:args.sentences]]
    print(provenance_line(info) + "\n")
    print("| decoding | sentences/s | wall ms / sentence | " + " | ".join(k for k, _ in KINDS)
          + " | other operators | outside operators (Python) |")
    print("|---" * (len(KINDS) + 5) + "|")
    for beam in (5, 1):
        result = profile(loaded.model, loaded.tokenizer, sentences, beam, args.precision)
        wall, spent = result["wall_s"], result["spent"]
        outside = wall - sum(spent.values())
        shares = [spent.get(k, 0.0) / wall for k, _ in KINDS] + [spent.get("other operators", 0.0) / wall,
                                                                 outside / wall]
        name = "greedy" if beam == 1 else f"beam {beam}"
        print(f"| {name}, {args.precision} | {len(sentences) / result['plain_s']:.1f} | "
              f"{1000 * wall / len(sentences):.2f} | " + " | ".join(f"{100 * s:.0f}%" for s in shares) + " |")


if __name__ == "__main__":
    main()
