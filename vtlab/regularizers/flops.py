"""FLOPS regularizer (Paria et al. 2020): Σ_v (mean_d |w_dv|)², optionally only on texts over an ℓ0 threshold."""
from __future__ import annotations

from torch import Tensor

from vtlab.errors import ConfigError
from vtlab.regularizers.base import Regularizer


class Flops(Regularizer):
    """FLOPS over the (gathered) batch.

    `threshold`: the ℓ0-mask variant — only rows whose number of active terms exceeds it are penalized (the others
    count as zero rows in the mean), so already-sparse documents are left alone.
    """

    def __init__(self, weight: float, warmup_steps: int = 0, delay_steps: int = 0, threshold: int | None = None,
                 gather: bool = True) -> None:
        super().__init__(weight, warmup_steps, delay_steps, gather)
        if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 0):
            raise ConfigError(f"regularizer threshold (ℓ0: active terms before a text is penalized) must be an "
                              f"integer >= 0 or null, got {threshold!r}")
        self.threshold = threshold

    def penalty(self, reps: Tensor) -> Tensor:
        if self.threshold is not None:
            over = (reps != 0).sum(dim=1) > self.threshold
            reps = reps * over.unsqueeze(1).to(reps.dtype)
        return (reps.abs().mean(dim=0) ** 2).sum()
