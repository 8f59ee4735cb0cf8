"""L1 regularizer: mean over texts of Σ_v |w_v| (used on queries by Efficient SPLADE)."""

from __future__ import annotations

from torch import Tensor

from vtlab.regularizers.base import Regularizer


class L1(Regularizer):
    def penalty(self, reps: Tensor, group_size: int = 1) -> Tensor:  # a mean over rows: groups do not matter
        return reps.abs().sum(dim=1).mean()
