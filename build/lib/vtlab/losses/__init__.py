"""Ranking losses over sparse query/document representations, one class per file.

Every loss is called as `loss(q, d, teacher_scores)` with q: [B, V], d: [B*(1+n), V] (row b*(1+n) is query b's
positive, the next n rows its negatives) and teacher_scores: [B, 1+n] or None.
"""

from vtlab.losses.base import RankingLoss, group_scores
from vtlab.losses.infonce import InfoNCE
from vtlab.losses.kl_div import KLDivergence
from vtlab.losses.margin_mse import MarginMSE

__all__ = ["RankingLoss", "group_scores", "InfoNCE", "KLDivergence", "MarginMSE"]
