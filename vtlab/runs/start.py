"""Where a run starts in its directory: the admission's steps before anything of the run is written, on the run's
plan (vtlab.runs.plan). An earlier run there (vtlab.runs.directory.check_run_dir), and for a training run a resume's
recorded config (vtlab.runs.resume) and input files (vtlab.runs.inputs), each read once. The Hydra callback that
admits a single run before Hydra writes (vtlab.runs.guard) asks `start_point` and hands its answer to the admission
(vtlab.stages.admission); a sweep's job, or a run started in process, asks it there."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vtlab.runs.directory import LAST_CKPT, check_run_dir
from vtlab.runs.inputs import check_resume, fingerprints
from vtlab.runs.plan import RunPlan
from vtlab.runs.resume import checked_configs

ReadRecord = Callable[[str], list[dict[str, Any]] | None]  # a checkpoint → the configs it records, None for none


@dataclass(frozen=True)
class ResumePoint:
    """Where a run starts in its directory: `resume_from` (an interrupted run's last checkpoint, or None), whether the
    earlier run there is cleared first (overwrite=true), and for a training run the configs its checkpoints record
    (ResumeState) and its input files' fingerprints (vtlab.runs.inputs)."""

    resume_from: Path | None = None
    clear: bool = False
    configs: list[dict[str, Any]] = field(default_factory=list)
    inputs: dict[str, dict[str, Any]] = field(default_factory=dict)


def start_point(plan: RunPlan, read_record: ReadRecord) -> ResumePoint:
    """Whether and from where the run starts in `plan.run_dir` (held under its lock): an earlier run there, and for a
    training run a resume's config (`read_record(checkpoint)`: what it records) and input files, each read once.
    RunDirError refuses the run; nothing is written."""
    resume_from, clear = check_run_dir(plan.run_dir, plan.resume, plan.overwrite)
    if not plan.trains:
        return ResumePoint(resume_from, clear)
    configs = checked_configs(plan, resume_from, read_record(str(resume_from)) if resume_from is not None else None)
    inputs = fingerprints(plan.inputs)  # every file the config names exists
    if resume_from is not None:
        check_resume(plan.run_dir, resume_from, inputs, plan.resume_with_changes)
    return ResumePoint(resume_from, clear, configs, inputs)


def follower_point(plan: RunPlan, read_record: ReadRecord) -> ResumePoint:
    """Where a later rank starts (vtlab.runs.ranks): where rank 0 does, which admitted the run and, before training
    launched this rank, left `run_dir/checkpoints/last.ckpt` only when it resumes from it (overwrite=true removed the
    old ones). Nothing is refused or written here: rank 0 has."""
    last = plan.run_dir / LAST_CKPT
    resume_from = last if last.is_file() and plan.resume is not False else None
    if not plan.trains:
        return ResumePoint(resume_from)
    recorded = read_record(str(resume_from)) if resume_from is not None else None
    return ResumePoint(resume_from, False, checked_configs(plan, resume_from, recorded))
