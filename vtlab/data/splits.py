"""A dev split cut from what an evaluation sample leaves over: the selection can then see the evaluation's domains
without seeing one of its questions or passages, nor a near-copy of one.

Near-copies are judged by the rule that keeps the evaluation sets out of training (vtlab.data.near_duplicates):
passages whose word-8-gram sets share at least half of the shorter one's (so a passage contained in a longer
evaluation passage counts), questions at idf-weighted word Jaccard ≥ 0.7 (so a question that differs only in case,
spacing or punctuation counts). An id alone misses both: a set can hold one text under two ids."""

from __future__ import annotations

from typing import Any

from vtlab.core.errors import DataError
from vtlab.data.collections import Collection, judged_queries
from vtlab.data.near_duplicates import near_duplicate_pairs, similar_question_pairs


def _loaded(load: Any) -> Collection:
    return load() if callable(load) else load


def _near_copies(ids: list[str], texts: dict[str, str], references: list[str], passages: bool) -> set[str]:
    """The ids among `ids` whose text near-copies one of `references` (passages or questions)."""
    if not ids or not references:
        return set()
    pairs = near_duplicate_pairs if passages else similar_question_pairs
    return {ids[p.i] for p in pairs([texts[i] for i in ids], references)}


def held_out(load: Any, exclude: Any, name: str | None = None) -> Collection:
    """`load()`'s collection without any query or document of `exclude()` (e.g. the evaluation's seeded sample of the
    same set), without its documents that near-copy a document of `exclude()` and its queries that near-copy a query
    of `exclude()` (vtlab.data.near_duplicates' rules and thresholds), and without the queries judged on a dropped
    document. What is left shares neither a question nor a passage with the evaluation sample, by id or as a
    near-copy, so a choice scored on it never reads the evaluation set. `source` counts what each rule dropped."""
    full, test = _loaded(load), _loaded(exclude)
    taken = set(test.corpus)
    rest = [d for d in full.corpus if d not in taken]
    near_docs = _near_copies(rest, full.corpus, list(test.corpus.values()), passages=True)
    asked = [q for q in full.qrels if q in full.queries and q not in test.queries]
    near_queries = _near_copies(asked, full.queries, list(test.queries.values()), passages=False)
    on_taken = {q for q in asked if any(d in taken for d in full.qrels[q])}
    on_near = {q for q in asked if any(d in near_docs for d in full.qrels[q])} - on_taken
    dropped = on_taken | on_near | near_queries
    qrels = {q: full.qrels[q] for q in asked if q not in dropped}
    queries = {q: full.queries[q] for q in judged_queries(qrels)}
    if not queries:
        raise DataError(
            f"held_out: {full.name} has no question left once its evaluation sample ({len(test.queries)} questions, "
            f"{len(test.corpus)} passages) and near-copies of it are taken out (expected a sample smaller than the set)"
        )
    return Collection(
        name=name or f"{full.name}-dev",
        corpus={d: full.corpus[d] for d in rest if d not in near_docs},
        queries=queries,
        qrels={q: qrels[q] for q in queries},
        source={
            "held_out_from": full.name,
            "excluded_queries": len(test.queries),
            "excluded_docs": len(taken),
            "near_copy_docs": len(near_docs),  # documents near-copying an excluded document
            "near_copy_queries": len(near_queries - on_taken - on_near),  # and not already out for their passage
            "queries_on_excluded_docs": len(on_taken),
            "queries_on_near_copy_docs": len(on_near),
        },
    )
