"""The training example shared by every triplet source, loss and the DataModule."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


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

    def draw(self, num_negatives: int, rng: np.random.Generator) -> tuple[list[str], list[float] | None]:
        """[positive] + `num_negatives` negatives of the pool (all of them, in order, when the pool is that size) and
        the aligned scores. Subclasses may also draw the positive (vtlab.data.hf.CEPoolExample)."""
        if num_negatives == len(self.negatives):
            pick = list(range(num_negatives))
        else:
            pick = sorted(rng.choice(len(self.negatives), size=num_negatives, replace=False).tolist())
        docs = [self.positive] + [self.negatives[j] for j in pick]
        scores = None if self.scores is None else [self.scores[0]] + [self.scores[1 + j] for j in pick]
        return docs, scores
