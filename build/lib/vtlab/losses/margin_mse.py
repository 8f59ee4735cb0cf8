"""MarginMSE distillation: match the student's positive–negative margins to the teacher's."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from vtlab.losses.base import RankingLoss, group_scores


class MarginMSE(RankingLoss):
    requires_teacher = True

    def forward(self, q: Tensor, d: Tensor, teacher_scores: Tensor | None = None) -> Tensor:
        q, d, teacher_scores = self.gathered(q, d, teacher_scores)
        t = self._teacher(teacher_scores)
        s = group_scores(q, d)
        # margins of the positive over each negative, averaged over all (query, negative) pairs
        return F.mse_loss(s[:, :1] - s[:, 1:], (t[:, :1] - t[:, 1:]).to(s.dtype))
