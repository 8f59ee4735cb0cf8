"""What a resume must match: the config an interrupted run's checkpoints record, compared with this run's.

Checkpoints record the run's config (vtlab.callbacks.resume_state.ResumeState); a resume whose config differs (lr,
batch size, ...: the restored optimizer, schedule and data order would silently mix both) is refused unless
resume_with_changes=true, which then appends this config to the record (the checkpoint then holds both) and warns
with the differences. Reading the record out of a checkpoint is the callbacks' part
(vtlab.callbacks.resume_state.recorded_configs, handed in as `read_record`); here only plain data is compared.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from vtlab.core.errors import RunDirError
from vtlab.runs.plan import RunPlan, comparable

log = logging.getLogger("vtlab")

# Keys a resumed run may change: how it runs and reports, not what it computes (besides vtlab.runs.plan.IGNORED:
# labels and paths).
RUN_LOCAL = ("resume", "overwrite", "resume_with_changes", "logger", "baseline")


def run_config(config: DictConfig | dict[str, Any]) -> dict[str, Any]:
    """What a checkpoint records of its run's config (a RunPlan's `config`, or the config itself): plain values,
    unresolved, without the run-local keys."""
    return {k: v for k, v in comparable(config).items() if k not in RUN_LOCAL}


def config_changes(old: Any, new: Any, key: str = "") -> list[str]:
    """`key: old -> new` for each leaf that differs (dicts compared key by key, anything else as a whole)."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [
            c
            for k in sorted(set(old) | set(new), key=str)
            for c in config_changes(old.get(k, "<absent>"), new.get(k, "<absent>"), f"{key}.{k}" if key else str(k))
        ]
    return [] if old == new else [f"{key}: {old!r} -> {new!r}"]


def checked_configs(
    plan: RunPlan, resume_from: str | Path | None, recorded: list[dict[str, Any]] | None
) -> list[dict[str, Any]]:
    """The configs this run's checkpoints record: this run's alone for a fresh run; on a resume from `resume_from`,
    whose checkpoint recorded `recorded`, those (RunDirError when this config differs, unless resume_with_changes)."""
    current = run_config(plan.config)
    if resume_from is None:
        return [current]
    if not recorded:
        log.warning(
            "%s records no config (written before vtlab recorded one): the resumed config is not checked", resume_from
        )
        return [current]
    changes = config_changes(recorded[-1], current)
    if not changes:
        return list(recorded)
    shown = "; ".join(changes[:4]) + (f"; and {len(changes) - 4} more" if len(changes) > 4 else "")
    if not plan.resume_with_changes:
        raise RunDirError(
            f"{resume_from}: cannot resume: the config differs from the interrupted run's ({shown}); "
            "rerun with its settings, pass resume_with_changes=true to continue with these (both are "
            "recorded in the checkpoint), or overwrite=true to start over"
        )
    log.warning(
        "resume_with_changes=true: continuing %s with a changed config (%s); the restored optimizer, "
        "schedule and data order are the interrupted run's",
        resume_from,
        shown,
    )
    return [*recorded, current]
