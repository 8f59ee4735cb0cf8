"""L1 regularizer: mean over texts of Σ_v |w_v| (used on queries by Efficient SPLADE)."""
from __future__ import annotations

from torch import Tensor

from vtlab.regularizers.base import Regularizer


class L1(Regularizer):
    def penalty(self, reps: Tensor) -> Tensor:
        return reps.abs().sum(dim=1).mean()
