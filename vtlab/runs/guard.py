"""The Hydra callbacks that admit a single run (`python -m vtlab ...`) before Hydra makes its directory or writes
`.hydra/` and its job log there: the paths the config names (vtlab.runs.paths), the directory's lock (held until
the process ends), and `start` (vtlab.runs.start.start_point, conf/hydra/default.yaml): whether and from where the
run may start, on the run's plan (vtlab.runs.plan). A refused `python -m vtlab ... hydra.run.dir=<run>` exits 2 with
one line and leaves that run's recorded config (which export and resume read back) and status.json as they were.

The answer (`Guarded`: the lock and where the run starts) goes to the job: Hydra hands the task function to
`on_job_start` and then calls it, so the guard hands the answer over on it (`taken` takes it back), and the
admission in the job uses it instead of asking again (vtlab.stages.admission). Single runs only: a sweep's jobs are
admitted after Hydra has written their `.hydra/` (vtlab.runs.directory says why)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, read_write

from vtlab.core.errors import VtlabError, one_line
from vtlab.runs.directory import HeldLock, check_dir_path, check_run_dir, hold_run_dir_lock
from vtlab.runs.paths import check_paths
from vtlab.runs.plan import RunPlan, run_plan
from vtlab.runs.ranks import later_rank

RUN_DIR_INSIDE = "vtlab.runs.guard.RunDirInside"  # the callback that records a run inside another (moved_run_dir)
HANDED = "vtlab_guarded"  # the task function's attribute the guard's answer is handed over on
StartCheck = Callable[[RunPlan], Any]  # the plan (its run dir under its lock) → where the run starts; RunDirError
# refuses it (vtlab.runs.start.start_point)


@dataclass(frozen=True)
class Guarded:
    """What the guard answered for the run before Hydra wrote there: the run directory's lock, held, and `start`'s
    answer (a vtlab.runs.start.ResumePoint; None without a `start`)."""

    lock: HeldLock
    start: Any


def taken(task_function: Callable[..., Any]) -> Guarded | None:
    """The guard's answer handed over on `task_function` (the job's task, as Hydra called the guard's on_job_start
    with it), taken once; None for a sweep's job or a run the guard did not admit."""
    return vars(task_function).pop(HANDED, None)


class RunDirGuard(Callback):
    """Hydra callback (conf/hydra/default.yaml): the module docstring's checks, lock and `start`, in on_run_start; the
    answer handed to the job in on_job_start."""

    def __init__(self, start: StartCheck | None = None) -> None:
        self.start = start
        self.guarded: Guarded | None = None

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            self.guarded = self.check(config)
        except VtlabError as err:
            print(one_line(err), file=sys.stderr)
            sys.exit(2)

    def on_job_start(self, config: DictConfig, *, task_function: Callable[..., Any], **kwargs: Any) -> None:
        if self.guarded is not None:
            vars(task_function)[HANDED], self.guarded = self.guarded, None

    def check(self, config: DictConfig) -> Guarded | None:
        hydra_dir = Path(str(config.hydra.run.dir))
        check_dir_path(hydra_dir, "hydra.run.dir")  # Hydra makes it whatever paths.run_dir says
        paths = config.get("paths")
        run_dir_node = paths._get_node("run_dir") if isinstance(paths, DictConfig) else None  # noqa: SLF001
        guarded = run_dir_node is not None and run_dir_node._value() == "${hydra:runtime.output_dir}"  # noqa: SLF001
        check_paths(config, hydra_dir if guarded else None)  # names, export outputs: before any directory is made
        if not guarded or later_rank():
            return None  # the run writes elsewhere than Hydra's directory (its admission locks and checks that one),
            # or this is a later rank of a run whose rank 0 holds the directory (vtlab.runs.ranks)
        plan = run_plan(config, hydra_dir)
        check_run_dir(plan.run_dir, plan.resume, plan.overwrite)  # before mkdir
        lock = hold_run_dir_lock(hydra_dir)
        # under the lock: another process may have written there in between
        return Guarded(lock, self.start(plan) if self.start is not None else None)


def moved_run_dir(config: DictConfig) -> tuple[Path, Path, str] | None:
    """Where a RunDirInside callback (conf/stage/export.yaml) records this run instead of in a new run directory:
    (that directory, the directory whose tree it is in, the key naming that one). <R>/<subdir> for stage=export
    run_dir=R; beside the export, <DIR's parent>/<subdir>, for export.out=DIR without run_dir; None: hydra.run.dir as
    configured. A hydra.run.dir already there (the first line named it, vtlab.runs.precheck) is kept."""
    for cb in (config.hydra.get("callbacks") or {}).values():
        if not (isinstance(cb, DictConfig) and cb.get("_target_") == RUN_DIR_INSIDE):
            continue
        source, out = cb.get("source"), cb.get("out")
        if not (source or out):
            return None
        root, key = (Path(str(source)), "run_dir") if source else (Path(str(out)).parent, "export.out")
        target, current = root / str(cb.subdir), Path(str(config.hydra.run.dir))
        return (current if current.parent == target.parent else target), root, key
    return None


class RunDirInside(RunDirGuard):
    """Hydra callback (conf/stage/export.yaml, in place of RunDirGuard): a command that works on an earlier run
    (`source`: stage=export run_dir=R) records itself — `.hydra/`, its job log, status.json — in <source>/<subdir>,
    beside what it writes into that run, instead of in a new run directory that would hold nothing else; one that
    writes one directory (`out`: export.out=DIR) records itself beside it, in <DIR's parent>/<subdir>
    (moved_run_dir). Without either Hydra's run dir stays as configured. Then RunDirGuard's checks and lock, on the
    directory used."""

    def __init__(
        self,
        source: str | None = None,
        subdir: str = "exports",
        start: StartCheck | None = None,
        out: str | None = None,
    ) -> None:
        super().__init__(start)
        self.source, self.subdir, self.out = source, subdir, out

    def check(self, config: DictConfig) -> Guarded | None:
        if self.source and not Path(self.source).is_dir():  # before <source>/<subdir> is made: a mistyped run_dir
            raise VtlabError(f"run_dir={self.source}: no such directory")  # stays absent
        if (moved := moved_run_dir(config)) is not None:
            with read_write(config.hydra.run):
                config.hydra.run.dir = str(moved[0])
        return super().check(config)
