"""Stage `evaluate`: encode the collection(s), exact retrieval from the inverted index, ir-measures metrics."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from rich.console import Console

from vtlab.assets import cache_dir
from vtlab.atomic import json_hash, write_json
from vtlab.data.collections import judged_queries
from vtlab.evaluation import EvaluationSuite, average, results_table
from vtlab.export.safe_config import RENAMED_TARGETS
from vtlab.stages.build import build_encoder
from vtlab.tracking.loggers import log_results, run_loggers

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


def baseline_metrics(cfg: DictConfig, evaluation, dataset: str) -> dict[str, float]:
    """The plain backbone (native vocabulary, no APC, no training) on the same collection, cached per configuration."""
    key = json_hash(
        {
            "backbone": instantiate(cfg.backbone).cache_key(),
            "eval": _keyed_targets(OmegaConf.to_container(cfg.eval, resolve=True)),
            "dataset": dataset,
            "encoder": {
                k: v for k, v in OmegaConf.to_container(cfg.model.encoder, resolve=True).items() if k != "backbone"
            },  # the model type (siamese / inference-free), lengths, activation
        }
    )
    path = cache_dir("evals") / f"{key}.json"
    cached = _cached_metrics(path) if path.exists() else None
    if cached is not None:
        return cached
    metrics = evaluation(instantiate(cfg.model.encoder))
    write_json(path, metrics)
    return metrics


def _cached_metrics(path: Path) -> dict[str, float] | None:
    """A baseline cache entry: {measure: number}. None, with one warning naming the file, for a truncated or changed one
    (it is then evaluated again and rewritten)."""
    try:
        metrics = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(metrics, dict) or not metrics:
            raise ValueError(f"expected a JSON object measure -> number, got {type(metrics).__name__}")
        bad = next((k for k, v in metrics.items() if isinstance(v, bool) or not isinstance(v, (int, float))), None)
        if bad is not None:
            raise ValueError(f"{bad!r} is {metrics[bad]!r}, expected a number")
    except (OSError, ValueError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
        log.warning(
            "baseline cache %s is damaged (%s: %s): evaluating the baseline again", path, type(e).__name__, first
        )
        return None
    return metrics


def run(cfg: DictConfig, state: dict[str, Any]) -> dict[str, Any]:
    if cfg.eval is None:
        return state
    encoder = state.get("encoder") or build_encoder(cfg, state)
    evaluation = instantiate(cfg.eval)
    run_dir = Path(cfg.paths.run_dir)
    datasets = evaluation.items() if isinstance(evaluation, EvaluationSuite) else [(None, evaluation)]
    with_baseline = cfg.get("baseline", False) and ("encoder" in state or instantiate(cfg.vocab).transfers)
    console = Console()
    results: dict[str, dict[str, float]] = {}
    for name, ev in datasets:
        name = name or ev.name  # a BEIR directory's own name (loading it) unless eval.name is set
        out_dir = run_dir / "eval" / name
        coll = getattr(ev, "collection", None)
        if coll is not None:  # what was read, before minutes of encoding
            log.info(
                "evaluating %s: %d queries (%d judged) over %d documents -> %s",
                name,
                len(coll.queries),
                len(judged_queries(coll.qrels)),
                len(coll.corpus),
                out_dir,
            )
        metrics = ev(encoder, out_dir=out_dir)
        results[name] = metrics
        baseline = baseline_metrics(cfg, ev, name) if with_baseline else None
        console.print(
            results_table(
                metrics,
                title=f"{cfg.name}: {name}",
                baseline=baseline,
                baseline_label=f"{cfg.backbone.get('name', 'backbone')} as is",
            )
        )
        if baseline is not None:
            write_json(out_dir / "baseline_metrics.json", baseline)
    summary = average(results) if len(results) > 1 else next(iter(results.values()))
    if len(results) > 1:
        write_json(run_dir / "eval" / "summary.json", {"datasets": results, "average": summary})
        console.print(results_table(summary, title=f"{cfg.name}: average over {len(results)} datasets"))
    console.print(f"outputs: {run_dir.resolve()}  (metrics: {run_dir / 'eval'}/<dataset>/metrics.json)")
    log_results(run_loggers(cfg, state), results, run_dir)
    return {**state, "metrics": summary, "results": results, "eval_dir": run_dir / "eval"}
