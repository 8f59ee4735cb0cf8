"""Shared scoring for ranking losses."""
from __future__ import annotations

from torch import Tensor, nn


def group_scores(q: Tensor, d: Tensor) -> Tensor:
    """Dot-product scores of each query with its own [positive, negatives...] group: [B, 1+n]."""
    B = q.shape[0]
    return (q.unsqueeze(1) * d.view(B, d.shape[0] // B, -1)).sum(-1)


class RankingLoss(nn.Module):
    """Base class: subclasses implement `forward(q, d, teacher_scores=None) -> scalar`."""

    requires_teacher: bool = False

    def forward(self, q: Tensor, d: Tensor, teacher_scores: Tensor | None = None) -> Tensor:  # pragma: no cover
        raise NotImplementedError

    def _teacher(self, teacher_scores: Tensor | None) -> Tensor:
        if teacher_scores is None:
            raise ValueError(
                f"loss={type(self).__name__} needs teacher scores: use a data source that provides `scores` "
                "(e.g. data=boolq, whose BM25 scores act as a weak teacher, or a JSONL with a `scores` field)"
            )
        return teacher_scores
