"""fp32 linear layers for inference on the kernel that is fastest for this CPU.

PyTorch runs an fp32 `F.linear` on a CPU through MKL's sgemm. MKL chooses its code by the
processor's vendor: on an AMD processor with AVX-512 it runs its AVX2 code, at half the speed of
oneDNN's AVX-512 kernels, which PyTorch also ships (on a 2-core AMD EPYC with AVX512-BF16, the
products of a MiniLM layer and of a translation decoder step: 190-200 against 375-430 GFLOP/s; the
fp32 peers, ONNX Runtime and CTranslate2, have their own AVX-512 kernels). On Intel processors
oneDNN was no faster, so MKL stays there. Only inference takes this path (no gradient, no
autocast): training keeps PyTorch's own kernels and their backward. The two differ by the order of
their sums, about 1e-6 relative in fp32. `BERTFORGE_FP32_LINEAR=onednn` or `mkl` decides instead.
"""

from __future__ import annotations

import functools
import os

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.weak import WeakIdKeyDictionary

from ..errors import BertforgeError

CHOICES = ("onednn", "mkl")


def choose_kernel(vendor: str, capability: str, setting: str | None) -> str:
    """"onednn" or "mkl" for fp32 inference: the setting if given, else oneDNN on an AMD processor
    with AVX-512 (`capability` as `torch.backends.cpu.get_cpu_capability()` names it)."""
    if setting:
        if setting not in CHOICES:
            raise BertforgeError(f"BERTFORGE_FP32_LINEAR must be one of {', '.join(CHOICES)}, got {setting!r}")
        return setting
    return "onednn" if vendor == "AuthenticAMD" and capability.startswith("AVX512") else "mkl"


def _vendor() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("vendor_id"):
                    return line.split(":", 1)[1].strip()
    except OSError:  # not Linux: MKL, as PyTorch does
        pass
    return ""


@functools.cache
def fp32_kernel() -> str:
    """The kernel of this process's fp32 inference products, chosen once."""
    usable = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    kernel = choose_kernel(_vendor(), torch.backends.cpu.get_cpu_capability(), os.environ.get("BERTFORGE_FP32_LINEAR"))
    return kernel if usable else "mkl"


def tracing() -> bool:
    """Whether the model is being compiled or exported (traced): only plain operators then, no
    branch on a tensor's values."""
    return torch.jit.is_tracing() or torch.compiler.is_compiling() or torch.compiler.is_exporting()


def _on_onednn(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether the product of `x` and `weight` runs on oneDNN: fp32 on the CPU outside autograd,
    autocast and export (ONNX has no oneDNN operator), where `fp32_kernel` says so."""
    return (x.dtype == torch.float32 and weight.dtype == torch.float32 and x.device.type == "cpu"
            and not torch.is_grad_enabled() and not torch.is_autocast_enabled("cpu") and fp32_kernel() == "onednn"
            and not tracing())


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`F.linear`, on oneDNN (with the weight `prepacked`) where `_on_onednn` says so."""
    if _on_onednn(x, weight):
        return torch.ops.mkldnn._linear_pointwise(x, prepacked(weight), bias, "none", [], "")
    return F.linear(x, weight, bias)


# The weights of the models `for_fp32_inference` prepared, each with None until it is packed, then
# with its place and version when packed and the packed copy. Kept beside the model, not in it, so
# that its state, copies and pickles are as before; weak, so that an entry goes with its weight.
_PREPACKED = WeakIdKeyDictionary()


def prepacked(weight: torch.Tensor) -> torch.Tensor:
    """`weight` reordered once into the layout oneDNN's kernel reads, if it belongs to a model
    prepared for inference (a model in training changes its weights in ways that need not show in
    their version, e.g. a fused optimizer step); packed again if changed in place or replaced. A
    plain weight is reordered inside every product: prepacked, a MiniLM layer's products run 2-8%
    faster, a decoding step's few rows up to a third (the cost: a second copy of the weights). Both
    give the same numbers to the bit."""
    if weight not in _PREPACKED:
        return weight
    key = (weight.data_ptr(), weight._version)
    entry = _PREPACKED[weight]
    if entry is None or entry[0] != key:
        # 512: the rows oneDNN is told to expect; the layout it picks served 10 to 2,000 rows alike
        entry = _PREPACKED[weight] = key, torch.ops.mkldnn._reorder_linear_weight(weight.detach(), 512)
    return entry[1]


def _fused(x: torch.Tensor, layer: nn.Module) -> bool:
    """Whether `layer(x)` runs on oneDNN, where an activation or an addition can be applied inside
    the product: only for an `InferenceLinear`, so that a model not made one by
    `for_fp32_inference` computes exactly as before."""
    return type(layer) is InferenceLinear and _on_onednn(x, layer.weight)


# oneDNN's names (and algorithms) for the activations it can apply to a product's output
POST_OPS = {F.relu: ("relu", ""), F.gelu: ("gelu", "none"), F.silu: ("swish", "")}


def _post_op(act) -> tuple[str, str] | None:
    """`act`'s oneDNN post-op: `act` a module (nn.GELU, nn.ReLU, nn.SiLU) or a function of POST_OPS."""
    if type(act) is nn.GELU:
        return "gelu", act.approximate  # "none" (erf) or "tanh"
    if type(act) in (nn.ReLU, nn.SiLU):
        return POST_OPS[F.relu if type(act) is nn.ReLU else F.silu]
    return POST_OPS.get(act)


def linear_act(layer: nn.Module, act, x: torch.Tensor) -> torch.Tensor:
    """act(layer(x)); on oneDNN the activation is applied inside the product, saving a pass over
    its output (the feed-forward block's widest tensor). oneDNN's erf differs from PyTorch's by
    about 1e-6 relative."""
    op = _post_op(act)
    if op is not None and _fused(x, layer):
        return torch.ops.mkldnn._linear_pointwise(x, prepacked(layer.weight), layer.bias, op[0], [], op[1])
    return act(layer(x))


def add_linear(residual: torch.Tensor | None, layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """residual + layer(x) (layer(x) where `residual` is None); on oneDNN the addition happens inside
    the product (no dropout between them: inference only)."""
    if residual is None:
        return layer(x)
    if (_fused(x, layer) and residual.dtype == torch.float32 and residual.is_contiguous()
            and residual.shape == (*x.shape[:-1], layer.weight.shape[0])):
        return torch.ops.mkldnn._linear_pointwise.binary(x, residual, prepacked(layer.weight), layer.bias, "add")
    return residual + layer(x)


class InferenceLinear(nn.Linear):
    """`nn.Linear` (the same parameters and state) whose product is `linear`'s."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)


def for_fp32_inference(model: nn.Module) -> nn.Module:
    """Each plain `nn.Linear` of `model` made an `InferenceLinear` in place (its parameters, their
    names and the state dict unchanged), and its matrices marked to be `prepacked`, where
    `fp32_kernel` is oneDNN."""
    if fp32_kernel() == "onednn":
        for module in model.modules():
            if type(module) is nn.Linear:
                module.__class__ = InferenceLinear
        if hasattr(torch.ops.mkldnn, "_reorder_linear_weight"):
            for weight in model.parameters():
                if weight.dim() == 2 and weight.dtype == torch.float32 and not weight.is_inference():
                    _PREPACKED.setdefault(weight, None)
    return model
