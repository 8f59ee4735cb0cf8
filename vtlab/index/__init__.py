"""Sparse retrieval indexes: exact (`InvertedIndex`, compiled kernel or scipy) and approximate (`SeismicIndex`)."""
from __future__ import annotations

import functools
from typing import Any, Callable, Mapping

from vtlab.index.inverted import InvertedIndex, to_run, topk_rows
from vtlab.index.seismic import SeismicIndex  # its optional pyseismic package is imported only when an index is built

__all__ = ["INDEXES", "InvertedIndex", "index_factory", "to_run", "topk_rows"]

# eval.index choices → how to build one from (docs, doc_ids, **options)
INDEXES: tuple[str, ...] = ("exact", "scipy", "seismic")


def index_factory(name: str = "exact", options: Mapping[str, Any] | None = None) -> Callable[..., Any]:
    """`evaluate(index=...)` factory for a named backend: exact (native kernel, scipy fallback), scipy, seismic.

    options go to the index constructor (e.g. seismic's n_postings, query_cut, heap_factor).
    """
    opts = dict(options or {})
    if name == "exact":
        return functools.partial(InvertedIndex, **opts)
    if name == "scipy":
        return functools.partial(InvertedIndex, backend="scipy", **opts)
    if name == "seismic":
        return functools.partial(SeismicIndex, **opts)
    raise ValueError(f"unknown index {name!r}: choose one of {', '.join(INDEXES)}")
