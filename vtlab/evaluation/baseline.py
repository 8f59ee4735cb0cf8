"""The baseline evaluation: the plain backbone (native vocabulary, no APC, no training) on the same collection, cached
per configuration under the cache's `evals/`, so every run of a sweep compares against it without evaluating it again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from vtlab.core.assets import cache_dir
from vtlab.core.atomic import write_json
from vtlab.core.cache_keys import settings_key
from vtlab.core.json_files import read_json, what_is_wrong
from vtlab.core.targets import RENAMED_TARGETS

log = logging.getLogger("vtlab")

# The baseline cache key hashes the eval config, its `_target_`s included. It hashes them under the names they had
# when the cache entries were written (RENAMED_TARGETS reversed: vtlab.evaluation.retrieval.RetrievalEvaluation is
# keyed as vtlab.evaluation.RetrievalEvaluation), so moving a class to another module does not invalidate every
# cached baseline; anything that changes what the eval config selects still changes the key.
_KEYED_AS: dict[str, str] = {new: old for old, new in RENAMED_TARGETS.items()}


def _keyed_targets(tree: Any) -> Any:
    """A plain config tree with each `_target_` under its cache-key name (_KEYED_AS)."""
    if isinstance(tree, dict):
        return {
            k: _KEYED_AS.get(v, v) if k == "_target_" and isinstance(v, str) else _keyed_targets(v)
            for k, v in tree.items()
        }
    if isinstance(tree, list):
        return [_keyed_targets(v) for v in tree]
    return tree


# what an evaluation reports (its measures, sparsity and timing keys): bump when that changes, so that a cached
# baseline is evaluated again rather than shown with another run's columns
REPORT_VERSION = 2


def baseline_metrics(
    evaluation: Callable[[Any], dict[str, float]],
    plain_encoder: Callable[[], Any],
    *,
    backbone_key: str,
    eval_config: dict[str, Any],
    encoder_config: Mapping[str, Any],
    dataset: str,
) -> dict[str, float]:
    """`evaluation(plain_encoder())`, cached per configuration: the backbone's cache key, the plain eval config, the
    dataset's name and the encoder's settings (the model type, lengths, activation; its `backbone` entry is left out,
    `backbone_key` stands for it)."""
    key = settings_key(
        "baseline",
        REPORT_VERSION,
        backbone=backbone_key,
        eval=_keyed_targets(eval_config),
        dataset=dataset,
        encoder={k: v for k, v in encoder_config.items() if k != "backbone"},
    )
    path = cache_dir("evals") / f"{key}.json"
    cached = _cached_metrics(path) if path.exists() else None
    if cached is not None:
        return cached
    log.info("baseline: evaluating the backbone as is on %s (once per configuration, then read from %s)", dataset, path)
    metrics = evaluation(plain_encoder())
    write_json(path, metrics)
    return metrics


def _cached_metrics(path: Path) -> dict[str, float] | None:
    """A baseline cache entry: {measure: number}. None, with one warning naming the file, for a truncated or changed one
    (it is then evaluated again and rewritten)."""
    try:
        metrics = read_json(path, what="measure -> number")
        if not metrics:
            raise ValueError("expected a JSON object measure -> number, got an empty one")
        bad = next((k for k, v in metrics.items() if isinstance(v, bool) or not isinstance(v, (int, float))), None)
        if bad is not None:
            raise ValueError(f"{bad!r} is {metrics[bad]!r}, expected a number")
    except ValueError as e:  # a JsonFileError too
        why = what_is_wrong(e, path)[:160]
        log.warning("baseline cache %s is damaged (%s): evaluating the baseline again", path, why)
        return None
    return metrics
