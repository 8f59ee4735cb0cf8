"""Teacher scores for triplets: every example's [positive] + negatives scored by a trained retriever (the dot product of
its query and document vectors, sparse or dense), for the distillation losses (MarginMSE, KL). The paper fine-tunes
with MarginMSE from a cross-encoder; offline, a retriever on disk takes its place (SPLADE-tiny, e5-small as a dense
retriever, or an ensemble of them: vtlab.data.teacher_ensemble). The scores are cached beside the triplets, keyed by
their content and the teacher's settings (its factory as the config builds it: vtlab.core.cache_keys), so a teacher is
loaded and run once per machine."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import scipy.sparse as sp

from vtlab.core.assets import cache_dir
from vtlab.core.atomic import atomic_write_text, file_lock, json_hash
from vtlab.core.cache_keys import settings_key
from vtlab.core.errors import ConfigError, DataError
from vtlab.core.json_files import read_json
from vtlab.data.examples import TripletExample, Triplets

VERSION = "t1"  # bump when what a score means changes, so cached scores are recomputed
log = logging.getLogger(__name__)


class TeacherEncoder(Protocol):
    """What a teacher must do: encode texts as the rows of a matrix, a scipy sparse one (SPLADE) or a numpy array
    (a dense retriever), queries and documents on their own side; a score is the dot product of two rows."""

    def encode(
        self, texts: Sequence[str], side: str = "doc", batch_size: int = 64, show_progress: bool = True
    ) -> Any: ...


def row_dots(rows: Any, query: Any) -> np.ndarray:
    """The dot product of each row of `rows` with the one-row (or 1-D) `query`, sparse or dense, as a flat array."""
    product = rows @ query.T
    return np.asarray(product.todense() if sp.issparse(product) else product).ravel()


def _score(teacher: TeacherEncoder, examples: Sequence[TripletExample], batch_size: int) -> list[list[float]]:
    queries = list(dict.fromkeys(ex.query for ex in examples))
    docs = list(dict.fromkeys(d for ex in examples for d in [ex.positive, *ex.negatives]))
    q_row = {q: i for i, q in enumerate(queries)}
    d_row = {d: i for i, d in enumerate(docs)}
    log.info(
        "teacher scores: encoding %s queries and %s passages of %s triplets with %s",
        f"{len(queries):,}",
        f"{len(docs):,}",
        f"{len(examples):,}",
        type(teacher).__name__,
    )  # the encoder's progress follows (vtlab.core.progress)
    qv = teacher.encode(queries, side="query", batch_size=batch_size)
    dv = teacher.encode(docs, side="doc", batch_size=batch_size)
    out = []
    for ex in examples:
        rows = [d_row[d] for d in [ex.positive, *ex.negatives]]
        out.append([float(s) for s in row_dots(dv[rows], qv[q_row[ex.query]])])
    return out


def score_file(name: str, examples: Sequence[TripletExample], settings: Any) -> Path:
    """Where the scores of `examples` by the teacher called `name` are cached: keyed by the teacher's `settings` (its
    factory, or an ensemble's members and rule), the triplets' content and VERSION; `name` makes the file readable."""
    if not name or "/" in name:
        raise DataError(f"teacher_scored: name={name!r}: expected a non-empty name without '/' (the cache file's name)")
    content = json_hash([[e.query, e.positive, e.negatives] for e in examples], 40)
    key = settings_key("teacher-scores", VERSION, teacher=settings, triplets=content)
    return cache_dir("teacher-scores") / f"{name}-{key}.json"


def _stored(path: Path, examples: Sequence[TripletExample]) -> list | None:
    """The score lists at `path` (None where there is no file), checked to hold one list per example."""
    if not path.is_file():
        return None
    what = f"teacher scores: a list of {len(examples)} score lists; delete it to recompute"
    scores = read_json(path, list, what, DataError)
    if len(scores) != len(examples):
        raise DataError(f"{path}: {len(scores)} score lists, expected {len(examples)}; delete it to recompute")
    for i, (row, ex) in enumerate(zip(scores, examples, strict=True)):
        if (
            not isinstance(row, list)
            or len(row) != 1 + len(ex.negatives)
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in row)
        ):
            raise DataError(
                f"{path}: score list {i} is {str(row)[:80]}, expected {1 + len(ex.negatives)} finite numbers "
                "(its positive and negatives); delete it to recompute"
            )
    return scores


def cached_scores(
    path: Path, examples: Sequence[TripletExample], compute: Callable[[], list[list[float]]]
) -> list[list[float]]:
    """The score lists stored at `path`, else `compute()`'s, stored there first (atomically); one per example, each
    as long as its [positive] + negatives. A damaged file is named, never trusted. Jobs side by side that need the same
    scores compute them once: the others wait on the entry's lock, then read the file."""
    with file_lock(path.with_name(path.name + ".lock")):
        scores = _stored(path, examples)
        if scores is None:
            t0 = time.perf_counter()
            scores = compute()
            atomic_write_text(path, [json.dumps(scores)])
            log.info("teacher scores of %d triplets in %.1f s → %s", len(examples), time.perf_counter() - t0, path)
    for ex, s in zip(examples, scores, strict=True):
        if not isinstance(s, list) or len(s) != 1 + len(ex.negatives):
            raise DataError(f"{path}: a score list does not match its triplet's {1 + len(ex.negatives)} passages")
    return [[float(v) for v in s] for s in scores]


def with_scores(
    examples: Sequence[TripletExample], scores: Sequence[Sequence[float]], source: dict[str, Any] | None
) -> Triplets:
    """`examples` with their `scores` replaced; `source`: the settings they were built from (Triplets.source)."""
    return Triplets([dataclasses.replace(ex, scores=list(s)) for ex, s in zip(examples, scores, strict=True)], source)


def teacher_scored(
    examples: Sequence[TripletExample],
    teacher: Callable[[], TeacherEncoder],
    name: str,
    batch_size: int = 64,
    scale: float = 1.0,
) -> Triplets:
    """`examples` with their `scores` replaced by `scale` × `teacher()`'s (a factory, called only when the cache lacks
    them, whose settings key the cache: a partial as `_partial_: true` builds it, of arguments vtlab.core.cache_keys can
    read); `name` names the cache file, which holds the raw scores (`scale` puts a teacher's scores, e.g. a dense
    model's cosines, on the range of the student's dot products, as the VT authors' score_scale)."""
    if not (math.isfinite(scale) and scale > 0):
        raise ConfigError(f"data.teacher.scale={scale!r}: expected a finite number > 0")
    source = getattr(examples, "source", None)
    examples = list(examples)
    path = score_file(name, examples, teacher)
    scores = cached_scores(path, examples, lambda: _score(teacher(), examples, batch_size))
    return with_scores(examples, [[scale * v for v in s] for s in scores], source)


teacher_scored.KEY_NEUTRAL = ("scale", "batch_size")  # type: ignore[attr-defined]  # the cache holds raw scores
