"""InfoNCE: softmax cross-entropy of the positive against hard (and optionally in-batch) negatives."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from vtlab.losses.base import RankingLoss, check_temperature, group_scores


class InfoNCE(RankingLoss):
    def __init__(self, temperature: float = 1.0, in_batch_negatives: bool = True) -> None:
        super().__init__()
        check_temperature(temperature)
        self.temperature = temperature
        self.in_batch_negatives = in_batch_negatives

    def forward(self, q: Tensor, d: Tensor, teacher_scores: Tensor | None = None) -> Tensor:
        B = q.shape[0]
        group = d.shape[0] // B
        if self.in_batch_negatives:
            # every document of the batch competes; query b's positive is row b*group
            scores = q @ d.t()
            target = torch.arange(B, device=q.device) * group
        else:
            scores = group_scores(q, d)
            target = torch.zeros(B, dtype=torch.long, device=q.device)
        return F.cross_entropy(scores / self.temperature, target)
