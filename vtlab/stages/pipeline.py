"""Run the configured stages in order, and turn user errors into one clear line + a non-zero exit.

Before any stage runs, the run directory is checked (vtlab.runs.directory): an earlier run's results are never
overwritten, an interrupted run is resumed from its last checkpoint, and an equal finished run may be reused
(vtlab.runs.reuse).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hydra.utils import instantiate
from omegaconf import DictConfig

from vtlab.callbacks.resume_state import resume_configs
from vtlab.core.errors import config_key, one_line, user_error
from vtlab.data.preflight import EVALUATE_STEP, preflight
from vtlab.export.run_encoder import encoder_from_run
from vtlab.runs.checks import check_config
from vtlab.runs.directory import check_run_dir, held_from_start, prepare_run_dir, run_dir_lock, trains
from vtlab.runs.reads import warn_unread_overrides
from vtlab.runs.reuse import reuse, reuse_training
from vtlab.runs.status import exit_code
from vtlab.tracking.loggers import finish_runs

log = logging.getLogger("vtlab")


def run(cfg: DictConfig, on_start: Callable[[], None] | None = None) -> dict[str, Any]:
    """Each stage is `fn(cfg, state) -> state`; `state` carries artifacts (model, paths, metrics) to the next.
    `state["resume_from"]` is the checkpoint an interrupted run continues from (fine-tuning passes it to Lightning).
    `on_start` runs once the run directory is accepted: the place to write anything into it (e.g. status.json), so a
    refused run leaves an earlier run's files as they were. The run's wandb run ends with it, failed or not (a sweep's
    next job in this process starts its own)."""
    try:
        state = _run_stages(cfg, on_start)
    except BaseException as exc:  # noqa: BLE001 - interruptions too; re-raised as they are
        finish_runs(exit_code(exc))
        raise
    finish_runs(0)
    return state


def _run_stages(cfg: DictConfig, on_start: Callable[[], None] | None) -> dict[str, Any]:
    state: dict[str, Any] = {}
    check_config(cfg)  # values of the wrong kind or range, named by key, before any directory or model is touched
    warn_unread_overrides(cfg)  # a command line's override that no stage of the run reads: said, then ignored
    run_dir = Path(str(cfg.paths.run_dir))
    _refuse_a_changed_resume(cfg, run_dir)  # before anything reads or records the run's inputs
    preflight(cfg)  # the eval data, the input files and a resume's inputs, checked before the model loads or trains
    # RunDirGuard took the lock before Hydra wrote there (single runs); a sweep's job or an in-process run takes it here
    with run_dir_lock(run_dir):
        resume_from = prepare_run_dir(cfg)
        if resume_from is not None:
            state["resume_from"] = str(resume_from)
        if on_start is not None:
            on_start()
        if (src := reuse(cfg)) is not None:  # an equal finished run (reuse_runs): its results, no stage runs
            return {"reused_from": src}
        if (src := reuse_training(cfg)) is not None:  # the same training, another eval: evaluate its copied model
            return _evaluate_reused(cfg, src)
        for step in instantiate(cfg.stage.steps):
            state = step(cfg, state)
        return state


def _evaluate_reused(cfg: DictConfig, src: Path) -> dict[str, Any]:
    """Run the evaluation steps of the run's stages on the model reuse_training copied into the run directory."""
    encoder, _ = encoder_from_run(Path(str(cfg.paths.run_dir)), cfg)
    state: dict[str, Any] = {"reused_training_from": src, "encoder": encoder}
    for step in cfg.stage.steps:
        if step.get("_target_") == EVALUATE_STEP:
            state = instantiate(step)(cfg, state)
    return state


def _refuse_a_changed_resume(cfg: DictConfig, run_dir: Path) -> None:
    """RunDirError if the run would resume an interrupted run whose recorded config differs (fine-tuning checks it
    again): here, so a refused resume writes nothing (status.json, inputs) into that run. RunDirGuard has checked it
    already for a single run, before Hydra wrote `.hydra/`; a sweep's job or an in-process run is checked here."""
    if not trains(cfg) or held_from_start(run_dir):
        return
    with run_dir_lock(run_dir):
        resume_from, _ = check_run_dir(run_dir, cfg.get("resume", "auto"), cfg.get("overwrite", False))
        if resume_from is not None:
            resume_configs(cfg, str(resume_from))


def run_or_exit(cfg: DictConfig, on_start: Callable[[], None] | None = None) -> dict[str, Any]:
    try:
        return run(cfg, on_start)
    except Exception as exc:  # noqa: BLE001 - classify, then re-raise what is not a user error
        err = user_error(exc)
        if err is None:
            raise
        print(one_line(err, config_key(exc, cfg)), file=sys.stderr)
        sys.exit(2)
