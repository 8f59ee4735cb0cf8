"""A dev split cut from what an evaluation sample leaves over: the selection can then see the evaluation's domains
without seeing one of its questions or passages."""

from __future__ import annotations

from typing import Any

from vtlab.core.errors import DataError
from vtlab.data.collections import Collection, judged_queries


def _loaded(load: Any) -> Collection:
    return load() if callable(load) else load


def held_out(load: Any, exclude: Any, name: str | None = None) -> Collection:
    """`load()`'s collection without any query or document of `exclude()` (e.g. the evaluation's seeded sample of the
    same set), and without the queries judged on one of its documents. What is left is disjoint from the evaluation
    sample in both queries and passages, so a choice scored on it never reads the evaluation set."""
    full, test = _loaded(load), _loaded(exclude)
    taken = set(test.corpus)
    corpus = {d: t for d, t in full.corpus.items() if d not in taken}
    qrels = {
        q: rels
        for q, rels in full.qrels.items()
        if q not in test.queries and q in full.queries and not any(d in taken for d in rels)
    }
    queries = {q: full.queries[q] for q in judged_queries(qrels)}
    if not queries:
        raise DataError(
            f"held_out: {full.name} has no question left once its evaluation sample ({len(test.queries)} questions, "
            f"{len(test.corpus)} passages) is taken out (expected a sample smaller than the set)"
        )
    return Collection(
        name=name or f"{full.name}-dev",
        corpus=corpus,
        queries=queries,
        qrels={q: qrels[q] for q in queries},
        source={"held_out_from": full.name, "excluded_queries": len(test.queries), "excluded_docs": len(taken)},
    )
