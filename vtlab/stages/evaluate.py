"""Stage `evaluate`: encode the collection, exact retrieval from the inverted index, ir-measures metrics."""
from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from rich.console import Console

from vtlab.assets import cache_dir
from vtlab.evaluation import results_table, write_json
from vtlab.stages.transfer import transfer_parts
from vtlab.vocab.transfer import transferred_backbone

log = logging.getLogger("vtlab")


def build_encoder(cfg: DictConfig):
    """The model to evaluate without training: the backbone, moved to the run's vocabulary when it differs."""
    backbone, vocab, init, options = transfer_parts(cfg)
    return instantiate(cfg.model.encoder, backbone=transferred_backbone(backbone, vocab, init, options))


def baseline_metrics(cfg: DictConfig, evaluation) -> dict[str, float]:
    """The plain backbone (native vocabulary, no APC, no training) on the same collection, cached per configuration."""
    key = hashlib.sha1(json.dumps({
        "backbone": instantiate(cfg.backbone).cache_key(),
        "eval": OmegaConf.to_container(cfg.eval, resolve=True),
        "encoder": {k: v for k, v in OmegaConf.to_container(cfg.model.encoder, resolve=True).items()
                    if k != "backbone"},  # the model type (siamese / inference-free), lengths, activation
    }, sort_keys=True, default=str).encode()).hexdigest()[:16]
    path = cache_dir("evals") / f"{key}.json"
    if path.exists():
        return json.loads(path.read_text())
    metrics = evaluation(instantiate(cfg.model.encoder))
    write_json(path, metrics)
    return metrics


def run(cfg: DictConfig, state: dict[str, Any]) -> dict[str, Any]:
    if cfg.eval is None:
        return state
    encoder = state.get("encoder") or build_encoder(cfg)
    evaluation = instantiate(cfg.eval)
    out_dir = Path(cfg.paths.run_dir) / "eval" / (evaluation.name or "eval")
    metrics = evaluation(encoder, out_dir=out_dir)
    vocab = instantiate(cfg.vocab)
    baseline = None
    if cfg.get("baseline", False) and ("encoder" in state or vocab.transfers):
        baseline = baseline_metrics(cfg, evaluation)
    console = Console()
    console.print(results_table(metrics, title=f"{cfg.name}: {evaluation.name}", baseline=baseline,
                                baseline_label=f"{cfg.backbone.get('name', 'backbone')} as is"))
    console.print(f"outputs: {Path(cfg.paths.run_dir).resolve()}  (metrics: {out_dir / 'metrics.json'})")
    if baseline is not None:
        write_json(out_dir / "baseline_metrics.json", baseline)
    return {**state, "metrics": metrics, "baseline_metrics": baseline, "eval_dir": out_dir}
