"""Regularizer base: λ schedule and cross-device gathering."""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
from torch import Tensor, nn

from vtlab.core.errors import ConfigError


def gather_with_grad(x: Tensor) -> Tensor:
    """Concatenate `x` from all processes (identity when not distributed).

    Uses the autograd-aware all_gather: its backward sums every rank's gradient for this rank's slice, and every rank
    computes the same penalty, so each rank receives world_size × the true gradient; DDP's gradient averaging then
    divides by world_size. The result equals a single process seeing the whole batch — no manual loss scaling.
    """
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return x
    from torch.distributed.nn.functional import all_gather

    return torch.cat(all_gather(x), dim=0)


class Regularizer(nn.Module):
    """λ(step) · penalty(reps), with λ(step) = weight · min(1, max(0, step − delay) / warmup)².

    The quadratic warm-up is SPLADE's: the sparsity pressure starts at 0 so the ranking loss shapes the vectors first.
    """

    def __init__(self, weight: float, warmup_steps: int = 0, delay_steps: int = 0, gather: bool = True) -> None:
        super().__init__()
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) or weight < 0:
            raise ConfigError(f"regularizer weight (λ) must be a finite number >= 0, got {weight!r}")
        for key, value in (("warmup_steps", warmup_steps), ("delay_steps", delay_steps)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"regularizer {key} must be an integer >= 0, got {value!r}")
        self.weight = float(weight)
        self.warmup_steps = int(warmup_steps)
        self.delay_steps = int(delay_steps)
        self.gather = gather

    def weight_at(self, step: int) -> float:
        t = step - self.delay_steps
        if t < 0:
            return 0.0
        if self.warmup_steps == 0:
            return self.weight
        return self.weight * min(1.0, t / self.warmup_steps) ** 2

    def penalty(self, reps: Tensor, group_size: int = 1) -> Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def forward(self, reps: Tensor, step: int, group_size: int = 1) -> tuple[Tensor, Tensor, float]:
        """Returns (λ·penalty, penalty, λ) for logging the parts separately.

        group_size: rows per query (documents: 1 positive + n negatives; queries: 1), for group-aware penalties."""
        value = self.penalty(gather_with_grad(reps) if self.gather else reps, group_size)
        lam = self.weight_at(step)
        return lam * value, value, lam
