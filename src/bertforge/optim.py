"""Optimizer parameter groups and learning-rate schedules, each schedule a pure function of the step."""

from __future__ import annotations

import math

import torch
from torch import nn

SCHEDULES = ("linear", "one-cycle", "constant")


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """AdamW groups as BERT: weight decay on weight matrices and embeddings, none on biases and
    LayerNorm parameters (decaying a scale or shift towards zero only hurts)."""
    decay, no_decay = [], []
    for module in model.modules():
        for name, param in module.named_parameters(recurse=False):
            if not param.requires_grad:
                continue
            if isinstance(module, nn.LayerNorm) or name == "bias" or param.ndim < 2:
                no_decay.append(param)
            else:
                decay.append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def make_optimizer(model: nn.Module, lr: float, weight_decay: float = 0.01, betas=(0.9, 0.999),
                   eps: float = 1e-6) -> torch.optim.AdamW:
    """AdamW with BERT's settings (eps 1e-6 as in the original), multi-tensor ("foreach") updates."""
    return torch.optim.AdamW(parameter_groups(model, weight_decay), lr=lr, betas=betas, eps=eps, foreach=True)


def lr_at(step: int, total: int, warmup: int, peak: float, schedule: str = "linear") -> float:
    """The learning rate for optimizer step `step` (0-based) of `total`.

    linear: 0 -> peak over `warmup` steps, then linearly down to 0 at `total` (BERT).
    one-cycle: the same warm-up, then a cosine down to 0 (Smith's one-cycle policy, annealing half).
    constant: warm-up, then the peak.
    """
    if step < warmup:
        return peak * (step + 1) / warmup
    if schedule == "constant":
        return peak
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    if schedule == "linear":
        return peak * (1.0 - progress)
    if schedule == "one-cycle":
        return peak * 0.5 * (1.0 + math.cos(math.pi * progress))
    raise ValueError(f"unknown schedule {schedule!r}; choose one of {', '.join(SCHEDULES)}")
