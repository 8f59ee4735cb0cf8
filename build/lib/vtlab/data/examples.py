"""The training example shared by every triplet source, loss and the DataModule."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

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

    def positive_texts(self) -> list[str]:
        """Every passage training may use as this query's positive (CEPoolExample: each of its qrels positives)."""
        return [self.positive]

    def negative_texts(self) -> list[str]:
        """Every passage training uses only as a negative for this query."""
        return list(self.negatives)

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


class Triplets(list):  # list[TripletExample]; a plain list subclass so every list use of a source's result still works
    """Training examples that remember the settings they were built from (`source`: {"path": ...} for a triplet
    file, {"dev_size": 300, "seed": 0, ...} for a BoolQ split), so a refused train/dev split can name the config keys
    behind it (vtlab.data.overlap)."""

    def __init__(self, examples: Iterable[TripletExample] = (), source: Mapping[str, Any] | None = None) -> None:
        super().__init__(examples)
        self.source: dict[str, Any] = dict(source or {})
