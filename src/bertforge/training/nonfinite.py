"""A step whose loss or gradients are not finite: noticed without waiting for the device, its update
skipped on the device, and the run stopped with the last good checkpoint named."""

from __future__ import annotations

import torch

from ..errors import TrainingStopped
from .checkpoints import latest_checkpoint


class NonFinite:
    """The first step whose loss (or, without the fp16 gradient scaler, whose gradients) was not
    finite, kept on the device, so that watching every step costs no wait; `check` reads it."""

    def __init__(self, device):
        self.at = torch.zeros((), dtype=torch.int64, device=device)  # that step; 0 while all is well
        self.loss = torch.zeros((), dtype=torch.float32, device=device)  # its loss
        self.gradients = torch.zeros((), dtype=torch.bool, device=device)  # its gradients, the loss being finite

    @property
    def seen(self) -> torch.Tensor:
        return self.at > 0

    def record(self, step: int, loss: torch.Tensor, grad_norm: torch.Tensor | None = None) -> None:
        loss_ok = torch.isfinite(loss)
        bad = ~loss_ok if grad_norm is None else ~(loss_ok & torch.isfinite(grad_norm))
        first = bad & (self.at == 0)
        self.at = torch.where(first, step, self.at)
        self.loss = torch.where(first, loss, self.loss)
        self.gradients = torch.where(first, loss_ok, self.gradients)

    def check(self, step: int, out: str) -> None:
        """Raise TrainingStopped if a step up to `step` went wrong: the one read of the interval."""
        at = int(self.at)
        if not at:
            return
        what = "the gradients became non-finite" if bool(self.gradients) else f"the loss became {float(self.loss)}"
        latest = latest_checkpoint(out)
        raise TrainingStopped(
            f"{what} at step {at}; stopped without updating the weights"
            + (f" from that step on (seen at step {step}: it is checked at log, evaluation and checkpoint steps)"
               if at != step else "") + ". "
            + (f"The last good checkpoint is {latest}. " if latest else "No checkpoint was written yet. ")
            + "Lower the learning rate (--lr) or use --precision fp32.")


def poison_gradients(optimizer, bad: torch.Tensor) -> None:
    """Where `bad` (a device bool) holds, make one gradient element NaN, so that the fp16 gradient
    scaler, which skips any step whose gradients are not all finite, skips this one; on the device."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.grad is not None and p.grad.is_contiguous() and p.grad.numel():
                first = p.grad.view(-1)[:1]
                first.copy_(torch.where(bad, torch.full_like(first, float("nan")), first))
                return


def update(optimizer, scaler, skip: torch.Tensor) -> None:
    """optimizer.step(), unless `skip` (a device bool) holds or fp16 gradients overflowed."""
    if scaler.is_enabled():
        scaler.step(optimizer)  # skips the update itself when the gradients are not finite (or poisoned)
        scaler.update()
    elif getattr(optimizer, "_step_supports_amp_scaling", False):
        # torch's fused AdamW (optim.make_optimizer, on CPU and CUDA) leaves the weights, its moments
        # and its step count as they were when given a non-zero `found_inf`, decided on the device:
        # the contract GradScaler uses with it. No wait for the device.
        optimizer.found_inf = skip.float()
        try:
            optimizer.step()
        finally:
            del optimizer.found_inf
    elif not skip.item():  # other optimizers (foreach AdamW off CPU and CUDA) need this one wait a step
        optimizer.step()
