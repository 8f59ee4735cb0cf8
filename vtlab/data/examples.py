"""The training example shared by every triplet source, loss and the DataModule."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TripletExample:
    """A query, one relevant passage and a pool of negatives (the DataModule samples from the pool).

    scores: optional teacher scores aligned with [positive] + negatives (MarginMSE / KL distillation).
    The *_id fields are optional provenance (source-dataset ids), never needed for training.
    """

    query: str
    positive: str
    negatives: list[str]
    scores: list[float] | None = None
    query_id: str | None = None
    positive_id: str | None = None
    negative_ids: list[str] | None = None
