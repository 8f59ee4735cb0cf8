"""Stage `evaluate`: encode the collection, exact retrieval from the inverted index, ir-measures metrics."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from hydra.utils import instantiate
from omegaconf import DictConfig
from rich.console import Console

from vtlab.evaluation import results_table
from vtlab.stages.transfer import transfer_parts
from vtlab.vocab.transfer import transferred_backbone

log = logging.getLogger("vtlab")


def build_encoder(cfg: DictConfig):
    """The model to evaluate without training: the backbone, moved to the run's vocabulary when it differs."""
    backbone, vocab, init, options = transfer_parts(cfg)
    return instantiate(cfg.model.encoder, backbone=transferred_backbone(backbone, vocab, init, options))


def run(cfg: DictConfig, state: dict[str, Any]) -> dict[str, Any]:
    if cfg.eval is None:
        return state
    encoder = state.get("encoder") or build_encoder(cfg)
    evaluation = instantiate(cfg.eval)
    out_dir = Path(cfg.paths.run_dir) / "eval" / (evaluation.name or "eval")
    metrics = evaluation(encoder, out_dir=out_dir)
    console = Console()
    console.print(results_table(metrics, title=f"{cfg.name}: {evaluation.name}"))
    console.print(f"outputs: {Path(cfg.paths.run_dir).resolve()}  (metrics: {out_dir / 'metrics.json'})")
    return {**state, "metrics": metrics, "eval_dir": out_dir}
