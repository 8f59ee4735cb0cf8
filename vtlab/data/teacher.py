"""Teacher scores for triplets: every example's [positive] + negatives scored by a trained retriever (the dot product of
its sparse query and document vectors), for the distillation losses (MarginMSE, KL). The paper fine-tunes with
MarginMSE from a cross-encoder; offline, the strongest retriever on disk (SPLADE-tiny) takes its place. The scores are
cached beside the triplets, keyed by their content, the teacher's name and the lengths, so a teacher is loaded and run
once per machine."""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from vtlab.core.assets import cache_dir
from vtlab.core.atomic import atomic_write_text, json_hash
from vtlab.core.errors import DataError
from vtlab.data.examples import TripletExample, Triplets

VERSION = "t1"  # bump when what a score means changes, so cached scores are recomputed
log = logging.getLogger(__name__)


class SparseEncoder(Protocol):
    """What a teacher must do: encode texts as rows of a sparse matrix, queries and documents on their own side."""

    def encode(
        self, texts: Sequence[str], side: str = "doc", batch_size: int = 64, show_progress: bool = True
    ) -> Any: ...


def _score(teacher: SparseEncoder, examples: Sequence[TripletExample], batch_size: int) -> list[list[float]]:
    queries = list(dict.fromkeys(ex.query for ex in examples))
    docs = list(dict.fromkeys(d for ex in examples for d in [ex.positive, *ex.negatives]))
    q_row = {q: i for i, q in enumerate(queries)}
    d_row = {d: i for i, d in enumerate(docs)}
    qv = teacher.encode(queries, side="query", batch_size=batch_size, show_progress=False)
    dv = teacher.encode(docs, side="doc", batch_size=batch_size, show_progress=False)
    out = []
    for ex in examples:
        rows = [d_row[d] for d in [ex.positive, *ex.negatives]]
        out.append([float(s) for s in np.asarray((dv[rows] @ qv[q_row[ex.query]].T).todense()).ravel()])
    return out


def teacher_scored(
    examples: Sequence[TripletExample], teacher: Callable[[], SparseEncoder], name: str, batch_size: int = 64
) -> Triplets:
    """`examples` with their `scores` replaced by `teacher()`'s (a factory, called only when the cache lacks them).
    `name` identifies the teacher and its settings in the cache key: change it with the teacher."""
    if not name or "/" in name:
        raise DataError(f"teacher_scored: name={name!r}: expected a non-empty name without '/' (the cache key)")
    source = getattr(examples, "source", None) or {}
    examples = list(examples)
    path = (
        cache_dir("teacher-scores")
        / f"{name}-{json_hash([[e.query, e.positive, e.negatives] for e in examples])}-{VERSION}.json"
    )
    scores = None
    if path.is_file():
        try:
            scores = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise DataError(f"{path}: unreadable teacher scores ({e}); delete it to recompute") from e
        if not isinstance(scores, list) or len(scores) != len(examples):
            raise DataError(f"{path}: expected a list of {len(examples)} score lists; delete it to recompute")
    if scores is None:
        t0 = time.perf_counter()
        scores = _score(teacher(), examples, batch_size)
        atomic_write_text(path, [json.dumps(scores)])
        log.info("teacher %s scored %d triplets in %.1f s → %s", name, len(examples), time.perf_counter() - t0, path)
    out = []
    for ex, s in zip(examples, scores, strict=True):
        if not isinstance(s, list) or len(s) != 1 + len(ex.negatives):
            raise DataError(f"{path}: a score list does not match its triplet's {1 + len(ex.negatives)} passages")
        out.append(dataclasses.replace(ex, scores=[float(v) for v in s]))
    return Triplets(out, source)
