"""One door into a run: `admit(cfg)` answers "may this run start, and from where?" in one ordered pass, before any
stage runs or anything of the run is written.

1. keys and values: each value of the wrong kind or range, each name or output path that would leave its root
   (vtlab.runs.checks, vtlab.runs.paths), a GPU accelerator torch cannot use here and a SLURM job shape Lightning
   would refuse (vtlab.runs.launch.check_launch_environment); an override no stage reads is one warning
   (vtlab.runs.reads);
2. the run directory: its lock (another process in it is refused), then an earlier run there (finished: refused;
   interrupted: resumed; overwrite=true: replaced) (vtlab.runs.directory);
3. a resume: the interrupted run's recorded config and input files against this run's, each read once
   (vtlab.runs.resume, vtlab.runs.inputs), the answer handed on to fine-tuning;
4. the data: models from the hub (offline: in the cache), evaluation sets, dev set (vtlab.core.hub,
   vtlab.data.preflight);
5. then, and only then, the run writes: old checkpoints cleared (overwrite), inputs recorded, the wandb run's id
   (kept by a resume, new for a run that starts over: vtlab.runs.tracking_id), `on_start` (status.json);
6. reuse: an equal finished run's results, or its training (vtlab.runs.reuse).

For a single run (`python -m vtlab ...`) the Hydra callback vtlab.runs.directory.RunDirGuard takes the lock and calls
vtlab.runs.resume.resume_point (conf/hydra/default.yaml) before Hydra writes `.hydra/` and its job log into the
directory, so a refused resume leaves that run's record as it was; `admit` in the same process takes its answer
instead of reading the resume again. A sweep's job, or a run started in process, takes every step here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from vtlab.callbacks.resume_state import recorded_configs
from vtlab.core.hub import refuse_missing_hub_models
from vtlab.data.preflight import preflight
from vtlab.runs.checks import check_config
from vtlab.runs.directory import clear_earlier_run, found_before_hydra, run_dir_lock, trains
from vtlab.runs.inputs import record
from vtlab.runs.launch import check_launch_environment
from vtlab.runs.ranks import later_rank
from vtlab.runs.reads import warn_unread_overrides
from vtlab.runs.resume import ResumePoint, follower_point, resume_point
from vtlab.runs.reuse import reuse, reuse_training
from vtlab.runs.tracking_id import run_id
from vtlab.tracking.loggers import logs_to_wandb


@dataclass(frozen=True)
class Admission:
    """What an admitted run needs: its directory (locked while the `admit` block runs), where it starts, and an
    equal finished run whose results (`reused_from`) or training (`reused_training_from`) it takes instead."""

    run_dir: Path
    start: ResumePoint
    reused_from: Path | None = None
    reused_training_from: Path | None = None


@contextlib.contextmanager
def admit(cfg: DictConfig, on_start: Callable[[], None] | None = None) -> Iterator[Admission]:
    """The ordered pass of the module docstring; the run directory stays locked until the block ends. Raises the
    first refusal (a VtlabError: one line); `on_start` runs once the run is accepted, before reuse."""
    check_config(cfg)
    check_launch_environment(cfg)  # a GPU accelerator without a GPU, a SLURM job Lightning would refuse
    warn_unread_overrides(cfg)
    run_dir = Path(str(cfg.paths.run_dir))
    if later_rank():  # rank 0 admitted the run and holds its directory: start where it does, write nothing
        yield Admission(run_dir, follower_point(cfg, run_dir, recorded_configs))
        return
    with run_dir_lock(run_dir):
        start = found_before_hydra(run_dir) or resume_point(cfg, run_dir, recorded_configs)
        refuse_missing_hub_models(cfg)  # offline, a hub model not in the cache: one line before any data is built
        preflight(cfg)
        clear_earlier_run(run_dir, start.clear, start.resume_from)
        if start.inputs and start.resume_from is None:
            record(run_dir, start.inputs)
        if logs_to_wandb(cfg) and trains(cfg):  # one wandb run per training run directory, however often it resumes
            run_id(run_dir, resumes=start.resume_from is not None and trains(cfg))
        if on_start is not None:
            on_start()
        if (src := reuse(cfg)) is not None:
            yield Admission(run_dir, start, reused_from=src)
        else:
            yield Admission(run_dir, start, reused_training_from=reuse_training(cfg))
