"""Retrieval measures (ir_measures) per query and averaged, and the sparsity of encoded queries and docs.

Which queries are measured: those with at least one positive grade in the qrels (`judged_queries`). ir_measures would
score a query whose judgments are all 0 as 0 on every measure and average it in; here such a query is left out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import ir_measures
import numpy as np
import scipy.sparse as sp

from vtlab.core.errors import DataError, VtlabError
from vtlab.data.collections import judged_queries

DEFAULT_MEASURES: tuple[str, ...] = ("nDCG@10", "RR@10", "R@100")
SPARSITY_KEYS: tuple[str, ...] = ("query_active_dims", "doc_active_dims", "flops")


def _parse_measures(measures: Sequence[str]) -> dict[Any, str]:
    """measure object -> the key it is reported under (the user's string when it names one measure)."""
    parsed: dict[Any, str] = {}
    for name in measures:
        try:
            objs = [ir_measures.parse_measure(name)]
        except Exception:  # ir_measures raises plain ValueError/NameError/SyntaxError on unknown syntax
            try:
                objs = list(ir_measures.parse_trec_measure(name))
            except Exception:
                objs = []
        if not objs:
            raise VtlabError(f"unknown retrieval measure {name!r} (ir_measures syntax, e.g. nDCG@10, RR@10, R@100)")
        for m in objs:
            parsed[m] = name if len(objs) == 1 else str(m)
    return parsed


def per_query_metrics(
    run: dict[str, dict[str, float]], qrels: dict[str, dict[str, int]], measures: Sequence[str] = DEFAULT_MEASURES
) -> dict[str, dict[str, float]]:
    """{measure key: {query id: value}} for every query with a positive grade (`judged_queries`; the input of paired
    significance tests).

    Queries with a positive grade but no (or an empty) run entry score 0 for every measure: we fill that in ourselves
    rather than rely on the ir_measures provider, so the values do not depend on which provider answers.
    Run entries for queries without a positive grade are ignored.
    """
    parsed = _parse_measures(measures)
    judged = {q: {d: int(r) for d, r in qrels[q].items()} for q in judged_queries(qrels)}
    if not judged:
        raise DataError("no query has a positive relevance grade (the qrels are empty or all 0): nothing to measure")
    # empty rankings are dropped: they score 0 through the fill below, and some providers reject them
    run = {q: docs for q, docs in run.items() if q in judged and docs}
    values = {m: dict.fromkeys(judged, 0.0) for m in parsed}
    if run:
        for metric in ir_measures.iter_calc(list(parsed), judged, run):
            values[metric.measure][metric.query_id] = float(metric.value)
    return {parsed[m]: values[m] for m in parsed}


def _means(per_query: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    return {key: sum(values.values()) / len(values) for key, values in per_query.items()}


def compute_metrics(
    run: dict[str, dict[str, float]], qrels: dict[str, dict[str, int]], measures: Sequence[str] = DEFAULT_MEASURES
) -> dict[str, float]:
    """Mean of each measure over every query with a positive grade (`per_query_metrics`, averaged: such a query with
    no run entry counts as 0, so the mean divides by the number of judged queries)."""
    return _means(per_query_metrics(run, qrels, measures))


def sparsity_stats(queries: sp.csr_matrix, docs: sp.csr_matrix) -> dict[str, float]:
    """Mean active (non-zero) dims per query and per doc, and FLOPS as in the SPLADE papers.

    flops = Σ_v p_q(v)·p_d(v), p(v) = fraction of queries (docs) with a non-zero weight on term v: the expected
    number of multiplications for one query-doc pair in an inverted index.
    """
    if queries.shape[1] != docs.shape[1]:
        raise ValueError(f"queries have {queries.shape[1]} dims, docs {docs.shape[1]}")
    vocab = queries.shape[1]

    def term_fraction(m: sp.csr_matrix) -> tuple[float, np.ndarray]:
        m = sp.csr_matrix(m)
        if not m.has_canonical_format:  # duplicate entries would be counted twice
            m = m.copy()
            m.sum_duplicates()
        nz = m.data != 0  # explicit zeros are not active dims
        terms = m.indices if nz.all() else m.indices[nz]
        n = max(m.shape[0], 1)
        return float(terms.size / n), np.bincount(terms, minlength=vocab) / n

    q_dims, p_q = term_fraction(queries)
    d_dims, p_d = term_fraction(docs)
    return {"query_active_dims": q_dims, "doc_active_dims": d_dims, "flops": float(p_q @ p_d)}
