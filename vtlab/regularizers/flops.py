"""FLOPS regularizer (Paria et al. 2020): Σ_v (mean_d |w_dv|)², optionally only on texts over an ℓ0 threshold."""

from __future__ import annotations

from typing import get_args

from torch import Tensor

from vtlab.core.choices import FlopsNormalization
from vtlab.core.errors import ConfigError
from vtlab.regularizers.base import Regularizer

NORMALIZATIONS: tuple[str, ...] = get_args(FlopsNormalization)


class Flops(Regularizer):
    """FLOPS over the (gathered) batch.

    `threshold`: the ℓ0-mask variant — only rows whose number of active terms exceeds it are penalized (the others
    count as zero rows in the mean), so already-sparse documents are left alone.
    `normalize`: how document rows are averaged when each query brings a group (positive, negative 1, …):
    `global` (vtlab's default) averages over all B·group rows; `per_group` (the authors' trainer.py) views the rows
    as (B, group, V), averages over B for each group position and sums the squares over positions and terms — about
    `group` times the global value when the positions look alike, so λ_d keeps the authors' meaning.
    """

    def __init__(
        self,
        weight: float,
        warmup_steps: int = 0,
        delay_steps: int = 0,
        threshold: int | None = None,
        gather: bool = True,
        normalize: FlopsNormalization = "global",
    ) -> None:
        super().__init__(weight, warmup_steps, delay_steps, gather)
        if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 0):
            raise ConfigError(
                f"regularizer threshold (ℓ0: active terms before a text is penalized) must be an "
                f"integer >= 0 or null, got {threshold!r}"
            )
        if normalize not in NORMALIZATIONS:
            raise ConfigError(f"regularizer normalize must be one of {list(NORMALIZATIONS)}, got {normalize!r}")
        self.threshold = threshold
        self.normalize = normalize

    def penalty(self, reps: Tensor, group_size: int = 1) -> Tensor:
        if self.threshold is not None:
            over = (reps != 0).sum(dim=1) > self.threshold
            reps = reps * over.unsqueeze(1).to(reps.dtype)
        if self.normalize == "per_group" and group_size > 1:
            # rows b*group … b*group+group-1 belong to query b (also after gathering: each rank holds whole groups)
            return (reps.abs().view(-1, group_size, reps.shape[-1]).mean(dim=0) ** 2).sum()
        return (reps.abs().mean(dim=0) ** 2).sum()
