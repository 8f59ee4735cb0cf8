"""The trained encoder of a run directory: its saved Hugging Face model, rebuilt with the run's own `model.encoder`
settings (read by vtlab/export/run_config.py, checked by vtlab/export/safe_config.py)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from vtlab.backbones import Backbone
from vtlab.core.errors import VtlabError
from vtlab.core.instantiate import instantiate_with
from vtlab.export.run_config import RunConfig
from vtlab.runs.export_source import model_dir_of, no_model

log = logging.getLogger("vtlab")


def encoder_from_run(run_dir: Path, cfg: DictConfig, run: RunConfig | None = None) -> tuple[Any, dict[str, Any]]:
    """The trained encoder of a run directory, rebuilt with that run's own `model.encoder` settings (and the export
    command line's `model.encoder.*` overrides, when `run` carries them)."""
    if not run_dir.is_dir():
        raise VtlabError(f"run_dir={run_dir}: no such directory")
    model_dir = model_dir_of(run_dir)
    if model_dir is None:
        raise no_model(run_dir)
    run = run or RunConfig(cfg, run_dir)
    if run.recorded is None:
        log.warning("export: %s has no .hydra/config.yaml; using this run's model.encoder settings", run_dir)
    encoder_cfg, _ = run.node("model.encoder")  # checked (vtlab/export/safe_config.py); its recorded backbone dropped
    # the saved model is already on the run's vocabulary: no transfer, load it as it is
    encoder = instantiate_with(encoder_cfg, backbone=Backbone(str(model_dir), name=run_dir.name))
    query_dir = model_dir / "query"
    if encoder.query_model is not None and (query_dir / "config.json").is_file():
        encoder.query_model = Backbone(str(query_dir)).load_model()  # two-tower: the trained query network
    return encoder, {"run_dir": str(run_dir.resolve()), "model_dir": str(model_dir.resolve())}
