"""int8 inference on a CPU: every linear layer of a loaded model quantized dynamically.

The weights are stored as int8, one scale per output row (per channel: a row with large weights
does not coarsen the others); each batch's activations are quantized on the fly with their own
range, and the products run on PyTorch's int8 kernels (fbgemm/oneDNN: AVX2, AVX512-VNNI or AMX,
whichever the CPU has). Embeddings, LayerNorm, softmax and the outputs stay fp32. What it costs in
accuracy is measured in `benchmarks/` (SST-2 dev accuracy against fp32); there is no int8 training.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

from .errors import BertforgeError

PRECISIONS = ("fp32", "bf16", "int8")  # what the inference commands offer


def quantize_int8(model: nn.Module) -> nn.Module:
    """`model` (on the CPU, for inference) with each `nn.Linear` replaced by its dynamically
    quantized int8 counterpart, in place; returned in eval mode."""
    device = next(model.parameters()).device
    if device.type != "cpu":
        raise BertforgeError(f"int8 runs on the CPU, not {device}: use --precision bf16 or fp32 there")
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    with warnings.catch_warnings():  # torch.ao.quantization announces its move to torchao
        warnings.simplefilter("ignore")
        return quantize_dynamic(model.eval(), {nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8,
                                inplace=True)


def for_inference(model: nn.Module, precision: str):
    """Get `model` ready to run in `precision` (fp32, bf16 or int8): int8 quantizes it here, once;
    returns the context its forward passes run in (bf16's autocast, else nothing)."""
    if precision not in PRECISIONS:
        raise BertforgeError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if precision == "int8":
        quantize_int8(model)
    device = next(model.parameters()).device
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")
