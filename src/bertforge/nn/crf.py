"""A linear-chain conditional random field (Lafferty et al., 2001) over per-position tag scores, as
on top of neural taggers (Huang et al., 2015; Lample et al., 2016).

A tagger scores each tag at each position on its own (the emissions); the CRF adds a learned
score for every pair of neighbouring tags, so that a path's score is

    start[y_0] + sum_i emissions[i, y_i] + sum_i transitions[y_(i-1), y_i] + end[y_(n-1)]

and the model is trained on the log-likelihood of the gold path among all paths. Decoding finds
the best whole path (Viterbi): a transition the training data taught it to avoid (I-PER after
B-LOC, say) is taken only against strong evidence, where an argmax per position ignores the
neighbours altogether.

Batches are padded on the right: `mask` (B, L) is True at a sequence's positions and False after
its length. A sequence of length 0 has one path, the empty one, with score 0.
"""

from __future__ import annotations

import torch
from torch import nn


class CRF(nn.Module):
    """Transition scores between `num_tags` tags, with the forward algorithm, the gold-path
    score, the negative log-likelihood and Viterbi decoding, all vectorised over the batch."""

    def __init__(self, num_tags: int):
        super().__init__()
        self.num_tags = num_tags
        # Zeros: a fresh CRF changes nothing (its best path is the per-position argmax). A CRF
        # about to be trained starts from its data instead (`init_from_paths`).
        self.transitions = nn.Parameter(torch.zeros(num_tags, num_tags))  # (T, T): from tag i to tag j
        self.start = nn.Parameter(torch.zeros(num_tags))  # (T,): a sequence starting with each tag
        self.end = nn.Parameter(torch.zeros(num_tags))  # (T,): a sequence ending with each tag

    def init_from_paths(self, paths: list[list[int]]) -> None:
        """Set the scores to the log-probabilities of a bigram model of `paths` (the gold tag ids
        of the training sentences), add-one smoothed. Trained from zeros at a pretrained encoder's
        small learning rate, the scores barely move (Adam moves a parameter by about the rate per
        step) while the fresh emissions fit the training data and leave them nothing to learn;
        from the bigrams, transitions never seen are unlikely from the first step."""
        tags = self.num_tags
        firsts = [p[0] for p in paths if p]
        lasts = [p[-1] for p in paths if p]
        pairs = [a * tags + b for p in paths for a, b in zip(p, p[1:])]
        first = torch.bincount(torch.tensor(firsts, dtype=torch.long), minlength=tags) + 1.0  # (T,)
        last = torch.bincount(torch.tensor(lasts, dtype=torch.long), minlength=tags) + 1.0  # (T,)
        follow = torch.bincount(torch.tensor(pairs, dtype=torch.long), minlength=tags * tags) + 1.0  # (T * T,)
        follow = follow.view(tags, tags)  # (T, T)
        # After each tag comes another tag or the end of the sentence: one distribution over both.
        leaving = follow.sum(1) + last  # (T,)
        with torch.no_grad():
            self.transitions.copy_((follow / leaving.unsqueeze(1)).log())
            self.end.copy_((last / leaving).log())
            self.start.copy_((first / first.sum()).log())

    def log_partition(self, emissions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """log of the sum of exp(path score) over every tag path of each sequence (B,): the
        forward algorithm, in log space so that long sequences neither overflow nor underflow."""
        batch, length, _ = emissions.shape
        if length == 0:
            return emissions.new_zeros(batch)
        mask = mask.bool()
        # alpha[b, j]: log-sum of the scores of all paths over the positions so far ending in tag j.
        alpha = self.start + emissions[:, 0]  # (B, T)
        for i in range(1, length):
            step = alpha.unsqueeze(2) + self.transitions  # (B, T, T): previous tag i, next tag j
            following = torch.logsumexp(step, dim=1) + emissions[:, i]  # (B, T)
            # A sequence that has ended keeps its last alpha, so the end scores apply to it there.
            alpha = torch.where(mask[:, i].unsqueeze(1), following, alpha)  # (B, T)
        total = torch.logsumexp(alpha + self.end, dim=1)  # (B,)
        return torch.where(mask[:, 0], total, torch.zeros_like(total))  # (B,)

    def score(self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The score of the path `tags` (B, L) in each sequence (B,); tags after a sequence's
        length are ignored (they may be anything, even a padding label)."""
        batch, length, _ = emissions.shape
        if length == 0:
            return emissions.new_zeros(batch)
        mask = mask.bool()
        tags = tags.masked_fill(~mask, 0)  # (B, L): any valid index where the sequence has ended
        lengths = mask.sum(1)  # (B,)
        emitted = emissions.gather(2, tags.unsqueeze(2)).squeeze(2)  # (B, L)
        total = torch.where(mask, emitted, torch.zeros_like(emitted)).sum(1)  # (B,)
        moves = self.transitions[tags[:, :-1], tags[:, 1:]]  # (B, L-1): into positions 1 .. L-1
        total = total + torch.where(mask[:, 1:], moves, torch.zeros_like(moves)).sum(1)  # (B,)
        last = tags.gather(1, (lengths - 1).clamp(min=0).unsqueeze(1)).squeeze(1)  # (B,)
        total = total + self.start[tags[:, 0]] + self.end[last]  # (B,)
        return torch.where(lengths > 0, total, torch.zeros_like(total))  # (B,)

    def nll(self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The negative log-likelihood of the gold path of each sequence (B,): >= 0, up to rounding."""
        return self.log_partition(emissions, mask) - self.score(emissions, tags, mask)

    def decode(self, emissions: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
        """The best tag path of each sequence (Viterbi), as many tags as the sequence is long."""
        batch, length, _ = emissions.shape
        mask = mask.bool()
        lengths = mask.sum(1).tolist()
        if length == 0:
            return [[] for _ in range(batch)]
        # best[b, j]: the score of the best path over the positions so far ending in tag j;
        # came_from[i - 1][b, j]: the tag before j at position i on that path.
        best = self.start + emissions[:, 0]  # (B, T)
        came_from = []
        for i in range(1, length):
            step = best.unsqueeze(2) + self.transitions  # (B, T, T): previous tag i, next tag j
            top, previous = step.max(dim=1)  # (B, T) each
            best = torch.where(mask[:, i].unsqueeze(1), top + emissions[:, i], best)  # (B, T)
            came_from.append(previous)
        tag = (best + self.end).argmax(1)  # (B,): the last tag of each sequence
        # Walk back from the end; a sequence stays at its last tag until the walk reaches its length.
        path = [tag]
        for i in range(length - 1, 0, -1):
            before = came_from[i - 1].gather(1, tag.unsqueeze(1)).squeeze(1)  # (B,)
            tag = torch.where(mask[:, i], before, tag)  # (B,)
            path.append(tag)
        paths = torch.stack(path[::-1], dim=1).tolist()  # (B, L)
        return [row[:n] for row, n in zip(paths, lengths)]
