"""Stage `evaluate`: encode the collection, exact retrieval from the inverted index, ir-measures metrics."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from hydra.utils import instantiate
from omegaconf import DictConfig
from rich.console import Console

from vtlab.evaluation import results_table

log = logging.getLogger("vtlab")


def run(cfg: DictConfig, state: dict[str, Any]) -> dict[str, Any]:
    if cfg.eval is None:
        return state
    encoder = state.get("encoder") or instantiate(cfg.model.encoder)
    evaluation = instantiate(cfg.eval)
    out_dir = Path(cfg.paths.run_dir) / "eval" / (evaluation.name or "eval")
    metrics = evaluation(encoder, out_dir=out_dir)
    console = Console()
    console.print(results_table(metrics, title=f"{cfg.name}: {evaluation.name}"))
    console.print(f"outputs: {Path(cfg.paths.run_dir).resolve()}  (metrics: {out_dir / 'metrics.json'})")
    return {**state, "metrics": metrics, "eval_dir": out_dir}
