"""Matched term budgets: prune the encoded queries and docs to their top-K weights and search again (no re-encoding).

Each measure and sparsity key comes back again per budget as `<key>@<budget>`, e.g. "nDCG@10@q16-d64".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from vtlab.core.errors import VtlabError
from vtlab.evaluation.metrics import _means, per_query_metrics, sparsity_stats
from vtlab.index.inverted import to_run


@dataclass(frozen=True)
class Budget:
    """A matched term budget: each query keeps its `query` largest weights, each doc its `doc` largest (None: all).

    Pruning after encoding puts models of different sparsity on the same number of active terms, so a contrast can
    be read at equal cost as well as at each model's own sparsity.
    """

    query: int | None
    doc: int | None

    @property
    def label(self) -> str:
        return f"q{self.query if self.query is not None else 'all'}-d{self.doc if self.doc is not None else 'all'}"


BUDGET_KEY = re.compile(r"^(?P<key>.+)@(?P<budget>q(?:\d+|all)-d(?:\d+|all))$")


def budget_key(key: str, budget: Budget) -> str:
    """`nDCG@10` at budget q16-d64 -> `nDCG@10@q16-d64`."""
    return f"{key}@{budget.label}"


def split_budget_key(key: str) -> tuple[str, str | None]:
    """`nDCG@10@q16-d64` -> (`nDCG@10`, `q16-d64`); a key without a budget -> (key, None)."""
    match = BUDGET_KEY.match(key)
    return (match["key"], match["budget"]) if match else (key, None)


def parse_budgets(budgets: Sequence[Budget | Mapping[str, Any]] | None, key: str = "eval.budgets") -> list[Budget]:
    """Budgets from config entries `{query: Kq, doc: Kd}` (a missing or null side is not pruned)."""
    parsed: list[Budget] = []
    for i, entry in enumerate(budgets or ()):
        if isinstance(entry, Budget):
            parsed.append(entry)
            continue
        where = f"{key}[{i}]"
        if not isinstance(entry, Mapping) or set(entry) - {"query", "doc"}:
            raise VtlabError(f"{where}: expected {{query: K, doc: K}} (positive ints or null), got {entry!r}")
        sides = {side: entry.get(side) for side in ("query", "doc")}
        for side, k in sides.items():
            if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
                raise VtlabError(f"{where}.{side}: expected a positive int or null, got {k!r}")
        parsed.append(Budget(**sides))
    labels = [b.label for b in parsed]
    if len(set(labels)) != len(labels):
        raise VtlabError(f"{key}: a budget is listed twice ({', '.join(labels)})")
    return parsed


def prune_top_k(x: sp.csr_matrix, k: int | None) -> sp.csr_matrix:
    """Each row keeps its k largest weights (ties: the lower term id); k=None keeps all. Explicit zeros go first."""
    x = sp.csr_matrix(x, copy=True)
    x.sum_duplicates()
    x.eliminate_zeros()
    counts = np.diff(x.indptr)
    if k is None or counts.size == 0 or counts.max() <= k:
        return x
    rows = np.repeat(np.arange(x.shape[0]), counts)
    order = np.lexsort((x.indices, -x.data, rows))  # by row, then weight descending, then term id
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size) - x.indptr[rows[order]]  # position within its row
    keep = rank < k
    return sp.csr_matrix((x.data[keep], (rows[keep], x.indices[keep])), shape=x.shape, dtype=x.dtype)


def search_budgets(
    q: sp.csr_matrix,
    d: sp.csr_matrix,
    budgets: Sequence[Budget],
    build_index: Callable[..., Any],
    query_ids: Sequence[str],
    doc_ids: Sequence[str],
    qrels: dict[str, dict[str, int]],
    measures: Sequence[str],
    top_k: int,
) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """(per-query values, metrics) of every budget, keys `<key>@<budget>`: each budget prunes q and d, builds a new
    index with `build_index(docs, doc_ids)` and searches it; measures and sparsity are those of the pruned vectors."""
    per_query: dict[str, dict[str, float]] = {}
    metrics: dict[str, float] = {}
    for budget in budgets:
        q_b, d_b = prune_top_k(q, budget.query), prune_top_k(d, budget.doc)
        b_scores, b_indices = build_index(d_b, doc_ids).search(q_b, k=top_k)
        b_run = to_run(np.asarray(b_scores), np.asarray(b_indices), query_ids, doc_ids)
        b_per_query = per_query_metrics(b_run, qrels, measures)
        per_query.update({budget_key(k, budget): v for k, v in b_per_query.items()})
        metrics.update({budget_key(k, budget): v for k, v in _means(b_per_query).items()})
        metrics.update({budget_key(k, budget): v for k, v in sparsity_stats(q_b, d_b).items()})
    return per_query, metrics
