"""Stage `mlm`: masked-LM adaptation of the (vocabulary-transferred) backbone, before APC and sparse fine-tuning.

The adapted model is cached under $VTLAB_CACHE/mlm per (starting backbone, resolved `mlm` config, preprocessing,
seed), linked as <run_dir>/mlm/model, and handed on as `state["backbone"]`. On several processes (trainer=ddp) the
ranks join first and build the adaptation together (vtlab.models.mlm.train_cached); rank 0 makes the link.
`mlm.steps=0` is the paper's no-MLM variant: the stage does nothing."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from hydra.utils import instantiate
from omegaconf import DictConfig
from pytorch_lightning.loggers import CSVLogger, Logger

from vtlab.backbones import Backbone
from vtlab.models.mlm import check_recipe, train_cached
from vtlab.runs.reads import reads
from vtlab.runs.steps import mlm_idle
from vtlab.runs.world import join_trainer
from vtlab.stages.build import TRANSFER_READS, run_backbone
from vtlab.tracking.loggers import instantiate_logger

log = logging.getLogger("vtlab")


def _starting_point(cfg: DictConfig, state: dict[str, Any]) -> tuple[Backbone, Any]:
    """(backbone to adapt, input preprocess): MLM runs after vocabulary transfer, on the run's backbone."""
    return run_backbone(cfg, state), instantiate(cfg.vocab).preprocess


def _loggers(cfg: DictConfig, out: Path) -> list[Logger]:
    loggers: list[Logger] = [CSVLogger(save_dir=str(out), name="csv", version="")]
    wandb_cfg = (cfg.get("logger") or {}).get("wandb")
    if wandb_cfg is not None:
        # its own wandb run (job_type=mlm), finished after training so the fine-tune stage starts a fresh one; not the
        # run directory's id (vtlab.runs.tracking_id), which is the fine-tune's: an adaptation never resumes (a stopped
        # one starts over), so each attempt is a wandb run of its own
        loggers.append(instantiate_logger(cfg, wandb_cfg, name=f"{cfg.name}-mlm", job_type="mlm", id=None))
    return loggers


def adaptation_seed(cfg: DictConfig) -> int:
    """`mlm.seed` when set (one adaptation shared by every seed of a sweep), else the run's seed."""
    return int(cfg.seed if cfg.mlm.get("seed") is None else cfg.mlm.seed)


@reads("mlm", "seed", "trainer", *TRANSFER_READS)
def run(cfg: DictConfig, state: dict[str, Any]) -> dict[str, Any]:
    m = cfg.mlm
    check_recipe(m)
    steps = int(m.steps)
    if mlm_idle(m):
        return state  # the no-MLM variant
    run_dir = Path(cfg.paths.run_dir)
    start, preprocess = _starting_point(cfg, state)
    world = join_trainer(cfg.trainer)
    out, report = train_cached(
        start,
        m,
        adaptation_seed(cfg),
        preprocess,
        cfg.trainer,
        log_dir=run_dir / "mlm",
        loggers=lambda d: _loggers(cfg, d),
        world=world,
    )
    link = run_dir / "mlm" / "model"
    if world.leader:  # the run directory's files are rank 0's
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() and Path(os.readlink(link)) != out:
            link.unlink()  # a rerun into the same run_dir with another config
        if not link.is_symlink() and not link.exists():
            os.symlink(out, link, target_is_directory=True)
        print(f"MLM-adapted model: {link} -> {out} ({report['steps']} steps)")
    return {
        **state,
        "backbone": start.derived(str(out), name=f"{start.name}-mlm{steps}"),
        "mlm_dir": out,
        "mlm_report": report,
    }
