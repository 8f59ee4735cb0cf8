"""InfoNCE: softmax cross-entropy of the positive against hard (and optionally in-batch) negatives."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from vtlab.losses.base import RankingLoss, check_temperature, group_scores


class InfoNCE(RankingLoss):
    """in_batch_negatives: every document of the (gathered) batch competes with the query's positive.
    in_batch_positives: whether the other queries' positives count among those negatives — true as in
    sentence-transformers' MultipleNegativesRankingLoss (vtlab's default), false as in the authors' loss.py, whose
    candidates are the query's positive and every negative of the batch.
    """

    def __init__(
        self,
        temperature: float = 1.0,
        in_batch_negatives: bool = True,
        in_batch_positives: bool = True,
        gather: bool = True,
    ) -> None:
        super().__init__(gather)
        check_temperature(temperature)
        self.temperature = temperature
        self.in_batch_negatives = in_batch_negatives
        self.in_batch_positives = in_batch_positives

    def forward(self, q: Tensor, d: Tensor, teacher_scores: Tensor | None = None) -> Tensor:
        q, d, _ = self.gathered(q, d, None)
        B = q.shape[0]
        group = d.shape[0] // B
        if self.in_batch_negatives:
            # every document of the batch competes; query b's positive is row b*group
            scores = q @ d.t()
            target = torch.arange(B, device=q.device) * group
            if not self.in_batch_positives:
                is_positive = torch.zeros(d.shape[0], dtype=torch.bool, device=q.device)
                is_positive[target] = True
                others = is_positive.unsqueeze(0) & ~F.one_hot(target, d.shape[0]).bool()
                scores = scores.masked_fill(others, float("-inf"))
        else:
            scores = group_scores(q, d)
            target = torch.zeros(B, dtype=torch.long, device=q.device)
        return F.cross_entropy(scores / self.temperature, target)
