"""KL-divergence distillation: KL(softmax(teacher/τ) ‖ softmax(student/τ)) over each query's document group."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from vtlab.losses.base import RankingLoss, check_temperature, group_scores


class KLDivergence(RankingLoss):
    requires_teacher = True

    def __init__(self, temperature: float = 1.0, gather: bool = True) -> None:
        super().__init__(gather)
        check_temperature(temperature)
        self.temperature = temperature

    def forward(self, q: Tensor, d: Tensor, teacher_scores: Tensor | None = None) -> Tensor:
        q, d, teacher_scores = self.gathered(q, d, teacher_scores)
        t = self._teacher(teacher_scores)
        s = group_scores(q, d)
        log_p_student = F.log_softmax(s / self.temperature, dim=-1)
        p_teacher = F.softmax(t.to(s.dtype) / self.temperature, dim=-1)
        # summed over the group, averaged over queries
        return F.kl_div(log_p_student, p_teacher, reduction="batchmean")
