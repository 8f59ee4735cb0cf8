"""Shared scoring for ranking losses."""

from __future__ import annotations

import math

from torch import Tensor, nn

from vtlab.core.errors import ConfigError
from vtlab.regularizers.base import gather_with_grad


def check_temperature(temperature: float) -> None:
    """loss.temperature divides the scores: a positive finite number (0 or NaN would make every step NaN)."""
    if (
        isinstance(temperature, bool)
        or not isinstance(temperature, (int, float))
        or not math.isfinite(temperature)
        or temperature <= 0
    ):
        raise ConfigError(f"loss.temperature must be a finite number > 0, got {temperature!r}")


def group_scores(q: Tensor, d: Tensor) -> Tensor:
    """Dot-product scores of each query with its own [positive, negatives...] group: [B, 1+n]."""
    B = q.shape[0]
    return (q.unsqueeze(1) * d.view(B, d.shape[0] // B, -1)).sum(-1)


class RankingLoss(nn.Module):
    """Base class: subclasses implement `forward(q, d, teacher_scores=None) -> scalar`.

    gather: compute the loss over the representations of every process (the authors' trainer gathers them too), so the
    loss — and in-batch negatives — mean the same whatever `trainer.devices` is. The gradient is then the one-process
    gradient of the whole batch (see gather_with_grad); with one process it changes nothing.
    """

    requires_teacher: bool = False

    def __init__(self, gather: bool = True) -> None:
        super().__init__()
        self.gather = gather

    def gathered(self, q: Tensor, d: Tensor, teacher_scores: Tensor | None) -> tuple[Tensor, Tensor, Tensor | None]:
        """(q, d, teacher_scores) of the whole batch across processes; each rank's rows stay in whole groups."""
        if not self.gather:
            return q, d, teacher_scores
        t = None if teacher_scores is None else gather_with_grad(teacher_scores.contiguous())
        return gather_with_grad(q.contiguous()), gather_with_grad(d.contiguous()), t

    def forward(self, q: Tensor, d: Tensor, teacher_scores: Tensor | None = None) -> Tensor:  # pragma: no cover
        raise NotImplementedError

    def _teacher(self, teacher_scores: Tensor | None) -> Tensor:
        if teacher_scores is None:
            raise ValueError(
                f"loss={type(self).__name__} needs teacher scores: use a data source that provides `scores` "
                "(e.g. data=boolq, whose BM25 scores act as a weak teacher, or a JSONL with a `scores` field)"
            )
        return teacher_scores
