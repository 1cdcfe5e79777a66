"""int8 inference on a CPU: every linear layer of a loaded model quantized dynamically.

The weights are stored as int8, one scale per output row (per channel: a row with large weights
does not coarsen the others); each batch's activations are quantized on the fly to 8 bits with
their own range, and the products run on PyTorch's int8 kernels (fbgemm/oneDNN: AVX2, AVX512-VNNI
or AMX, whichever the CPU has). Embeddings, LayerNorm, softmax and the outputs stay fp32.

PyTorch's own `quantize_dynamic` keeps only 7 bits of each activation (`reduce_range`), which rules
out a rare int16 saturation in the multiply-add of AVX2 CPUs without VNNI; on SST-2 that 7th bit
costs 0.8 points of dev accuracy (84.40 against fp32's 85.21), and with 8 bits there is no loss
(85.21) at the same speed (`benchmarks/peers.py`). There is no int8 training.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

from .errors import BertforgeError
from .nn.linear import InferenceLinear, for_fp32_inference

PRECISIONS = ("fp32", "bf16", "int8")  # what the inference commands offer


class Int8Linear(nn.Module):
    """`nn.Linear` with int8 weights (per output row) and activations quantized per call."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        weight = linear.weight.detach().float()
        scales = (weight.abs().amax(1) / 127).clamp(min=1e-12).double()
        with warnings.catch_warnings():
            # PyTorch announces the quantized tensor types' removal on every run; the kernels this uses
            # are still those of its int8 path, and the warning says nothing the user can act on.
            warnings.filterwarnings("ignore", message=r"torch\.quantize_per_tensor, torch\.quantize_per_channel",
                                    category=UserWarning)
            quantized = torch.quantize_per_channel(weight, scales, torch.zeros_like(scales, dtype=torch.long), 0,
                                                   torch.qint8)
        bias = None if linear.bias is None else linear.bias.detach().float()
        self.packed = torch.ops.quantized.linear_prepack(quantized, bias)
        self.in_features, self.out_features = linear.in_features, linear.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.quantized.linear_dynamic(x.float(), self.packed, False).to(x.dtype)  # False: 8 bits

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8"


def quantize_int8(model: nn.Module) -> nn.Module:
    """`model` (on the CPU, for inference) with each `nn.Linear` replaced by an `Int8Linear`, in
    place; returned in eval mode."""
    device = next(model.parameters()).device
    if device.type != "cpu":
        raise BertforgeError(f"int8 runs on the CPU, not {device}: use --device cpu, or --precision bf16 or fp32")
    for module in list(model.modules()):
        for name, child in module.named_children():
            if type(child) in (nn.Linear, InferenceLinear):  # not nn.MultiheadAttention's own subclass
                setattr(module, name, Int8Linear(child))
    return model.eval()


def for_inference(model: nn.Module, precision: str):
    """Get `model` ready to run in `precision` (fp32, bf16 or int8): int8 quantizes it here, once, and
    fp32 on a CPU takes the faster of its products' kernels (`nn.linear`), and an encoder that can
    run on the real tokens alone does (`Bert.forward`'s `unpad`); returns the context
    its forward passes run in (bf16's autocast, else nothing)."""
    if precision not in PRECISIONS:
        raise BertforgeError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if precision == "int8":
        quantize_int8(model)
    device = next(model.parameters()).device
    if precision == "fp32" and device.type == "cpu":
        for_fp32_inference(model)
    for module in model.modules():  # encoders that can leave padding out of their products do so
        if hasattr(module, "skip_padding"):
            module.skip_padding = True
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")
