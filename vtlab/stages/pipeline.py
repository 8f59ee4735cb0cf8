"""Run the configured stages in order, and turn user errors into one clear line + a non-zero exit.

Before any stage runs, the run is admitted (vtlab.stages.admission): its config checked, its directory locked (an
earlier run's results are never overwritten, an interrupted run is resumed from its last checkpoint), its data checked,
and an equal finished run reused (vtlab.runs.reuse).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

from hydra.utils import instantiate
from omegaconf import DictConfig

from vtlab.core.errors import config_key, one_line, user_error
from vtlab.data.preflight import EVALUATE_STEP
from vtlab.runs.guard import Guarded
from vtlab.runs.status import exit_code
from vtlab.stages.admission import admit
from vtlab.tracking.loggers import finish_runs

log = logging.getLogger("vtlab")


def run(cfg: DictConfig, on_start: Callable[[], None] | None = None, guarded: Guarded | None = None) -> dict[str, Any]:
    """Each stage is `fn(cfg, state) -> state`; `state` carries artifacts (model, paths, metrics) to the next.
    `state["resume_from"]` is the checkpoint an interrupted run continues from (fine-tuning passes it to Lightning),
    `state["configs"]` what its checkpoints record (admission read and checked them).
    `on_start` runs once the run directory is accepted: the place to write anything into it (e.g. status.json), so a
    refused run leaves an earlier run's files as they were. `guarded`: what the Hydra callback answered before Hydra
    wrote (vtlab.runs.guard). The run's wandb run ends with it, failed or not (a sweep's next job in this process
    starts its own)."""
    try:
        state = _run_stages(cfg, on_start, guarded)
    except BaseException as exc:  # noqa: BLE001 - interruptions too; re-raised as they are
        finish_runs(exit_code(exc))
        raise
    finish_runs(0)
    return state


def _run_stages(cfg: DictConfig, on_start: Callable[[], None] | None, guarded: Guarded | None) -> dict[str, Any]:
    with admit(cfg, on_start, guarded) as admission:
        state: dict[str, Any] = {"configs": admission.start.configs}
        if admission.start.resume_from is not None:
            state["resume_from"] = str(admission.start.resume_from)
        if admission.reused_from is not None:  # an equal finished run (reuse_runs): its results, no stage runs
            return {"reused_from": admission.reused_from}
        steps = cfg.stage.steps
        if admission.reused_training_from is not None:  # the same training, another eval: evaluate its copied model
            state = {"reused_training_from": admission.reused_training_from}
            steps = [step for step in steps if step.get("_target_") == EVALUATE_STEP]
        for step in instantiate(steps):
            state = step(cfg, state)
        return state


def run_or_exit(
    cfg: DictConfig, on_start: Callable[[], None] | None = None, guarded: Guarded | None = None
) -> dict[str, Any]:
    try:
        return run(cfg, on_start, guarded)
    except Exception as exc:  # noqa: BLE001 - classify, then re-raise what is not a user error
        err = user_error(exc)
        if err is None:
            raise
        print(one_line(err, config_key(exc, cfg)), file=sys.stderr)
        sys.exit(2)
