"""What a frozen encoder gave each sentence, kept while fine-tuning a task model over it (ELMo's
biLM, CoVe's MT-LSTM). Frozen and without dropout, the encoder gives a sentence the same outputs
every epoch, and it is most of a step's time (85% for elmo-cpu under the task biLSTM; the MT-LSTM's
two 300-wide layers under the BCN, likewise): after the first epoch it reads only what it has not
read before."""

from __future__ import annotations

from collections.abc import Callable

import torch

BUDGET = 2**30  # bytes kept, keys included; sentences beyond it are read again each time


class FrozenOutputs:
    """Per-sentence outputs of `encode(inputs, mask)` -> [tensor (B, T, D), ...], zeros at padding,
    keyed by the sentence's inputs up to its length."""

    def __init__(self, budget: int = BUDGET):
        self.kept: dict[bytes, list[torch.Tensor]] = {}
        self.size, self.budget = 0, budget

    def __call__(self, inputs: torch.Tensor, mask: torch.Tensor,
                 encode: Callable[[torch.Tensor, torch.Tensor], list[torch.Tensor]]) -> list[torch.Tensor]:
        lengths = mask.sum(1).tolist()
        on_host = inputs.cpu().numpy()  # one copy from the device, not one per sentence
        keys = [on_host[i, :n].tobytes() for i, n in enumerate(lengths)]
        rows = {i: self.kept[k] for i, k in enumerate(keys) if k in self.kept}
        new = [i for i in range(len(keys)) if i not in rows]
        if new:
            longest = max(lengths[i] for i in new)
            with torch.no_grad():
                outputs = encode(inputs[new, :longest], mask[new, :longest])
            for j, i in enumerate(new):
                rows[i] = [output[j, :lengths[i]] for output in outputs]
                size = len(keys[i]) + sum(r.numel() * r.element_size() for r in rows[i])
                if self.size + size <= self.budget:
                    self.kept[keys[i]] = [r.clone() for r in rows[i]]  # not a view that holds the whole batch
                    self.size += size
        out = [rows[0][k].new_zeros((*mask.shape, r.shape[-1])) for k, r in enumerate(rows[0])]
        for i, outputs in rows.items():
            for whole, row in zip(out, outputs):
                whole[i, :lengths[i]] = row
        return out
