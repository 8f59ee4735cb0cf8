"""Sparse retrieval indexes: exact (`InvertedIndex`, compiled kernel or scipy) and approximate (`SeismicIndex`).

`eval.index=<name>` names a node of indexes.yaml (beside this file): a `_target_` partial taking (docs, doc_ids) that
`index_factory` instantiates with eval.index_options. A new backend is a new node there, not new code here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from vtlab.core.paths import INDEXES_FILE
from vtlab.index.inverted import InvertedIndex, to_run, topk_rows

__all__ = ["INDEXES_FILE", "InvertedIndex", "index_factory", "index_names", "to_run", "topk_rows"]


@lru_cache(maxsize=1)
def _indexes() -> DictConfig:
    return OmegaConf.load(INDEXES_FILE)


def index_names() -> tuple[str, ...]:
    """The eval.index choices, the default first."""
    return tuple(str(k) for k in _indexes())


def index_factory(name: str = "exact", options: Mapping[str, Any] | None = None) -> Callable[..., Any]:
    """`evaluate(index=...)` factory for a named backend: its node of indexes.yaml instantiated, `options` as keyword
    arguments to the index constructor (e.g. seismic's n_postings, query_cut, heap_factor)."""
    names = index_names()
    if name not in names:
        raise ValueError(f"unknown index {name!r}: choose one of {', '.join(names)}")
    return instantiate(_indexes()[name], **dict(options or {}))
