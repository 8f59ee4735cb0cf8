"""One door into a run: `admit(cfg)` answers "may this run start, and from where?" in one ordered pass, before any
stage runs or anything of the run is written. The config is read once, into the run's plan (vtlab.runs.plan); each
step below takes plain values from it.

1. keys and values: each value of the wrong kind or range, each name or output path that would leave its root
   (vtlab.runs.checks, vtlab.runs.paths), a GPU accelerator torch cannot use here and a SLURM job shape Lightning
   would refuse (vtlab.runs.launch); an override no stage reads is one warning (vtlab.runs.reads); then the plan;
2. the run directory: its lock (another process in it is refused), then where the run starts (vtlab.runs.start):
   an earlier run there (finished: refused; interrupted: resumed; overwrite=true: replaced; vtlab.runs.directory),
   and for a resume the interrupted run's recorded config and input files against this run's, each read once
   (vtlab.runs.resume, vtlab.runs.inputs), the answer handed on to fine-tuning;
3. the data: models from the hub (offline: in the cache), evaluation sets, dev set (vtlab.core.hub,
   vtlab.data.preflight);
4. then, and only then, the run writes: old checkpoints cleared (overwrite), inputs recorded, the wandb run's id
   (kept by a resume, new for a run that starts over: vtlab.runs.tracking_id), `on_start` (status.json);
5. reuse: an equal finished run's results, or its training (vtlab.runs.reuse).

For a single run (`python -m vtlab ...`) the Hydra callback vtlab.runs.guard.RunDirGuard takes the lock and asks
vtlab.runs.start.start_point (conf/hydra/default.yaml) before Hydra writes `.hydra/` and its job log into the
directory, so a refused resume leaves that run's record as it was; its answer (`guarded`) is handed to `admit`,
which then takes it instead of asking again. A sweep's job, or a run started in process, takes every step here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from vtlab.callbacks.resume_state import recorded_configs
from vtlab.core.hub import refuse_unavailable
from vtlab.data.preflight import preflight
from vtlab.runs.directory import clear_earlier_run, run_dir_lock
from vtlab.runs.guard import Guarded
from vtlab.runs.inputs import record
from vtlab.runs.plan import RunPlan, checked_plan
from vtlab.runs.ranks import later_rank
from vtlab.runs.reuse import reuse, reuse_training
from vtlab.runs.start import ResumePoint, follower_point, start_point
from vtlab.runs.tracking_id import run_id
from vtlab.tracking.loggers import logs_to_wandb


@dataclass(frozen=True)
class Admission:
    """What an admitted run needs: its plan (its directory locked while the `admit` block runs), where it starts, and
    an equal finished run whose results (`reused_from`) or training (`reused_training_from`) it takes instead."""

    plan: RunPlan
    start: ResumePoint
    reused_from: Path | None = None
    reused_training_from: Path | None = None

    @property
    def run_dir(self) -> Path:
        return self.plan.run_dir


@contextlib.contextmanager
def admit(
    cfg: DictConfig, on_start: Callable[[], None] | None = None, guarded: Guarded | None = None
) -> Iterator[Admission]:
    """The ordered pass of the module docstring; the run directory stays locked until the block ends. Raises the
    first refusal (a VtlabError: one line); `on_start` runs once the run is accepted, before reuse. `guarded`: what
    RunDirGuard answered before Hydra wrote (its lock, where the run starts)."""
    plan = checked_plan(cfg)
    if later_rank():  # rank 0 admitted the run and holds its directory: start where it does, write nothing
        yield Admission(plan, follower_point(plan, recorded_configs))
        return
    held = guarded.lock if guarded is not None else None
    with run_dir_lock(plan.run_dir, held=held):
        answered = guarded is not None and guarded.start is not None and guarded.lock.covers(plan.run_dir)
        start = guarded.start if answered else start_point(plan, recorded_configs)
        yield _admitted(plan, start, on_start)


def _admitted(plan: RunPlan, start: ResumePoint, on_start: Callable[[], None] | None) -> Admission:
    """Steps 3 to 5 of the module docstring, under the run directory's lock."""
    refuse_unavailable(plan.hub_models)  # offline, a hub model not in the cache: one line before any data
    preflight(plan)
    clear_earlier_run(plan.run_dir, start.clear, start.resume_from)
    if start.inputs and start.resume_from is None:
        record(plan.run_dir, start.inputs)
    if logs_to_wandb(plan.loggers) and plan.trains:  # one wandb run per training run directory, however it resumes
        run_id(plan.run_dir, resumes=start.resume_from is not None)
    if on_start is not None:
        on_start()
    if (src := reuse(plan)) is not None:
        return Admission(plan, start, reused_from=src)
    return Admission(plan, start, reused_training_from=reuse_training(plan))
