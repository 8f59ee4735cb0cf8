"""What a resume must match: the config an interrupted run's checkpoints record, compared with this run's.

Checkpoints record the run's config (vtlab.callbacks.resume_state.ResumeState); a resume whose config differs (lr,
batch size, ...: the restored optimizer, schedule and data order would silently mix both) is refused unless
resume_with_changes=true, which then appends this config to the record (the checkpoint then holds both) and warns
with the differences. Reading the record out of a checkpoint is the callbacks' part
(vtlab.callbacks.resume_state.recorded_configs, handed in as `read_record`); here only plain data is compared.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from vtlab.core.errors import RunDirError
from vtlab.runs.directory import LAST_CKPT, check_run_dir, trains
from vtlab.runs.inputs import check_resume, fingerprints
from vtlab.runs.reuse import comparable

log = logging.getLogger("vtlab")

# Keys a resumed run may change: how it runs and reports, not what it computes (besides vtlab.runs.reuse.IGNORED:
# labels and paths).
RUN_LOCAL = ("resume", "overwrite", "resume_with_changes", "logger", "baseline")


def run_config(cfg: DictConfig) -> dict[str, Any]:
    """What a checkpoint records of its run's config: plain values, unresolved, without the run-local keys."""
    return {k: v for k, v in comparable(cfg).items() if k not in RUN_LOCAL}


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
    cfg: DictConfig, resume_from: str | Path | None, recorded: list[dict[str, Any]] | None
) -> list[dict[str, Any]]:
    """The configs this run's checkpoints record: this run's alone for a fresh run; on a resume from `resume_from`,
    whose checkpoint recorded `recorded`, those (RunDirError when this config differs, unless resume_with_changes)."""
    current = run_config(cfg)
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
    if not cfg.get("resume_with_changes", False):
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


@dataclass(frozen=True)
class ResumePoint:
    """Where a run starts in its directory: `resume_from` (an interrupted run's last checkpoint, or None), whether the
    earlier run there is cleared first (overwrite=true), and for a training run the configs its checkpoints record
    (ResumeState) and its input files' fingerprints (vtlab.runs.inputs)."""

    resume_from: Path | None = None
    clear: bool = False
    configs: list[dict[str, Any]] = field(default_factory=list)
    inputs: dict[str, dict[str, Any]] = field(default_factory=dict)


def resume_point(
    cfg: DictConfig, run_dir: Path, read_record: Callable[[str], list[dict[str, Any]] | None]
) -> ResumePoint:
    """Whether and from where the run starts in `run_dir` (held under its lock): an earlier run there
    (vtlab.runs.directory.check_run_dir), and for a training run a resume's config (`read_record(checkpoint)`: what
    it records) and input files, each read once. RunDirError refuses the run; nothing is written."""
    resume_from, clear = check_run_dir(run_dir, cfg.get("resume", "auto"), cfg.get("overwrite", False))
    if not trains(cfg):
        return ResumePoint(resume_from, clear)
    configs = checked_configs(cfg, resume_from, read_record(str(resume_from)) if resume_from is not None else None)
    inputs = fingerprints(cfg)  # every file the config names exists
    if resume_from is not None:
        check_resume(run_dir, resume_from, inputs, bool(cfg.get("resume_with_changes", False)))
    return ResumePoint(resume_from, clear, configs, inputs)


def follower_point(
    cfg: DictConfig, run_dir: Path, read_record: Callable[[str], list[dict[str, Any]] | None]
) -> ResumePoint:
    """Where a later rank starts (vtlab.runs.ranks): where rank 0 does, which admitted the run and, before training
    launched this rank, left `run_dir/checkpoints/last.ckpt` only when it resumes from it (overwrite=true removed the
    old ones). Nothing is refused or written here: rank 0 has."""
    last = run_dir / LAST_CKPT
    resume_from = last if last.is_file() and cfg.get("resume", "auto") is not False else None
    if not trains(cfg):
        return ResumePoint(resume_from)
    recorded = read_record(str(resume_from)) if resume_from is not None else None
    return ResumePoint(resume_from, False, checked_configs(cfg, resume_from, recorded))
