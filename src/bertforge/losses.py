"""Cross-entropy over a large vocabulary, computed in fp32 from logits kept in their own precision.

`F.cross_entropy(logits.float(), ...)` on bf16 logits makes an fp32 copy of the whole (M, V) matrix,
a log-softmax of it, and in the backward pass another fp32 matrix and a cast back: with a 30k
vocabulary that elementwise traffic costs as much as the decoder's matrix product. Here the
log-sum-exp is taken in fp32 a block of rows at a time, only the bf16 logits and one fp32 number
per row are kept, and the gradient softmax(logits) - onehot is formed block by block in fp32 and
written once in the logits' precision. The numbers are those of the usual path: fp32 arithmetic
on the same bf16 logits.

Also the task losses that the classifiers and taggers of every family share, and the loss of an
encoder-decoder on parallel text.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .data.masking import IGNORE

ROWS = 16  # rows per block on a CPU: 16 x 30k fp32 values stay within a core's L2 cache
# On a GPU, each block costs ~16 kernel launches whatever its size: 16 rows at a time made the loss
# 91 of a BERT-base step's 148 ms of host time on an H200 (2,458 masked tokens, 152 blocks; the GPU
# waited on the host). There a block is as many rows as fit this many bytes in fp32.
GPU_BLOCK_BYTES = 1 << 28


def rows_per_block(logits: torch.Tensor) -> int:
    if logits.device.type == "cpu":
        return ROWS
    return max(ROWS, GPU_BLOCK_BYTES // (4 * logits.shape[-1]))


class _VocabLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: torch.Tensor, targets: torch.Tensor, smoothing: float):
        lse = torch.empty(len(logits), dtype=torch.float32, device=logits.device)
        sums = torch.empty_like(lse) if smoothing else None  # each row's sum of logits, for the uniform part
        # argmax of the fp32 block: the same answer as on the logits themselves (bf16 widens exactly),
        # where the argmax of a whole bf16 matrix is slow on a CPU (10% of a bert-mini step)
        correct = torch.zeros((), dtype=torch.int64, device=logits.device)
        n = rows_per_block(logits)
        for start in range(0, len(logits), n):
            block = logits[start:start + n].float()
            lse[start:start + n] = torch.logsumexp(block, dim=-1)
            correct += (block.argmax(-1) == targets[start:start + n]).sum()
            if smoothing:
                sums[start:start + n] = block.sum(-1)
        picked = logits.gather(1, targets[:, None]).squeeze(1).float()
        ctx.save_for_backward(logits, targets, lse)
        ctx.smoothing = smoothing
        ctx.mark_non_differentiable(correct)
        if not smoothing:
            return (lse - picked).sum(), correct
        # (1 - e) x -log p(target) + e x the mean over the vocabulary of -log p (PyTorch's label_smoothing)
        return (lse - (1 - smoothing) * picked - smoothing / logits.shape[-1] * sums).sum(), correct

    @staticmethod
    def backward(ctx, grad: torch.Tensor, _):
        logits, targets, lse = ctx.saved_tensors
        smoothing = ctx.smoothing
        out = torch.empty_like(logits)
        n = rows_per_block(logits)
        for start in range(0, len(logits), n):
            block = (logits[start:start + n].float() - lse[start:start + n, None]).exp_()  # softmax
            if smoothing:
                block.sub_(smoothing / logits.shape[-1])
            rows = torch.arange(len(block), device=block.device)
            block[rows, targets[start:start + n]] -= 1.0 - smoothing
            out[start:start + n] = block.mul_(grad)
        return out, None, None


def vocab_loss(logits: torch.Tensor, targets: torch.Tensor, smoothing: float = 0.0):
    """(the SUM over rows of -log softmax(logits)[target] in fp32, how many rows' argmax is their
    target) for logits (M, V) of any float dtype. With `smoothing` e, PyTorch's label smoothing:
    (1 - e) of that loss plus e of the mean of -log softmax over the vocabulary."""
    if torch.compiler.is_compiling():  # the compiler fuses the plain form itself, without a Python loop
        return (F.cross_entropy(logits.float(), targets, reduction="sum", label_smoothing=smoothing),
                (logits.argmax(-1) == targets).sum())
    if len(logits) == 0:
        return logits.float().sum(), torch.zeros((), dtype=torch.int64, device=logits.device)
    return _VocabLoss.apply(logits, targets, smoothing)


def next_token_loss(hidden: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                    word_embeddings: torch.Tensor) -> torch.Tensor:
    """The SUM over real positions after the first of -log p(token | the tokens before it), through
    the LM head tied to `word_embeddings`: GPT-1's auxiliary objective while fine-tuning (its L1 on
    the task's own inputs, special tokens included, as OpenAI's code). `hidden` (B, T, H)."""
    keep = attention_mask[:, 1:].reshape(-1).bool()  # (B * (T - 1),)
    states = hidden[:, :-1].reshape(-1, hidden.shape[-1])[keep]  # (M, H)
    targets = input_ids[:, 1:].reshape(-1)[keep]  # (M,)
    return vocab_loss(F.linear(states, word_embeddings), targets)[0]


def log_uniform_probabilities(ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """P(id) under the log-uniform (Zipfian) distribution over ids sorted by falling frequency:
    (log(id + 2) - log(id + 1)) / log(V + 1), TensorFlow's log_uniform_candidate_sampler."""
    ids = ids.double()
    return ((ids + 2).log() - (ids + 1).log()) / math.log(vocab_size + 1)


def sampled_softmax_loss(hidden: torch.Tensor, targets: torch.Tensor, weight: torch.Tensor,
                         bias: torch.Tensor | None, num_samples: int, generator: torch.Generator | None = None):
    """The SUM over rows of a sampled-softmax loss (Jean et al., 2015), the estimate of the full
    softmax's cross-entropy that ELMo's biLM trains with: each row's logit of its target against
    `num_samples` words drawn once for the whole batch from the log-uniform distribution (word ids
    must be sorted by falling frequency, as `data.words` sorts them), every logit corrected by
    -log(expected count of its word among the draws), a draw equal to a row's target ignored in
    that row. `hidden` (N, H), `targets` (N,), `weight` (V, H), `bias` (V,) or None."""
    vocab_size = weight.shape[0]
    u = torch.rand(num_samples, generator=generator, device="cpu", dtype=torch.float64)
    samples = ((u * math.log(vocab_size + 1)).exp() - 1).long().clamp_(0, vocab_size - 1).to(targets.device)  # (S,)
    expected = lambda ids: (num_samples * log_uniform_probabilities(ids, vocab_size)).log().to(hidden.dtype)  # noqa: E731
    true_logits = (hidden * weight[targets]).sum(-1) - expected(targets)  # (N,)
    sampled_logits = hidden @ weight[samples].t() - expected(samples)  # (N, S)
    if bias is not None:
        true_logits = true_logits + bias[targets]
        sampled_logits = sampled_logits + bias[samples]
    sampled_logits = sampled_logits.masked_fill(targets[:, None] == samples[None, :], float("-inf"))
    logits = torch.cat([true_logits[:, None], sampled_logits], dim=1).float()  # (N, 1 + S): the target first
    return F.cross_entropy(logits, torch.zeros_like(targets), reduction="sum")


def classification_losses(logits: torch.Tensor, labels: torch.Tensor, regression: bool) -> tuple[dict, dict]:
    """Every classifier's loss terms (summed, in fp32) and correct counts: `mse` for regression, else `cls`."""
    logits = logits.float()
    if regression:
        return {"mse": F.mse_loss(logits, labels, reduction="sum")}, {}
    return {"cls": F.cross_entropy(logits, labels, reduction="sum")}, {"cls": (logits.argmax(-1) == labels).sum()}


def tagging_losses(logits: torch.Tensor, labels: torch.Tensor) -> tuple[dict, dict]:
    """A tagger's loss term `tag` (summed over the labelled positions, in fp32) and its correct count;
    `logits` (B, T, labels), `labels` (B, T) with IGNORE where no tag is due."""
    logits = logits.float()
    loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1), ignore_index=IGNORE, reduction="sum")
    return {"tag": loss}, {"tag": ((logits.argmax(-1) == labels) & (labels != IGNORE)).sum()}


class TranslationObjective(torch.nn.Module):
    """The loss of any encoder-decoder `backbone` (the Transformer, CoVe's LSTM: `encode`, `decode`,
    `logits` as the Transformer has them) on parallel text: label-smoothed cross-entropy of every
    target token (the paper's 0.1), summed; logits only at real target positions, so that padding
    costs no softmax. Returns the trainer's ({"mt": loss sum}, {"mt": correct tokens})."""

    def __init__(self, backbone: torch.nn.Module, label_smoothing: float = 0.1):
        super().__init__()
        self.backbone = backbone
        self.architecture = backbone.config.architectures[0]
        self.label_smoothing = label_smoothing

    def forward(self, batch: dict) -> tuple[dict, dict]:
        model = self.backbone
        memory = model.encode(batch["source"], batch["source_mask"])
        states = model.decode(batch["target_in"], memory, batch["source_mask"])
        keep = batch["target_out"] != IGNORE
        # the output layer's rows rounded up to a multiple of 64, so that the product's shapes
        # repeat (a kernel per shape is cached); the loss reads the real ones, in fp32 a block at a time
        rows = states[keep]
        logits = model.logits(F.pad(rows, (0, 0, 0, -len(rows) % 64)))[:len(rows)]  # (N, V)
        loss, correct = vocab_loss(logits, batch["target_out"][keep], self.label_smoothing)
        return {"mt": loss}, {"mt": correct}
