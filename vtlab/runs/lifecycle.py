"""A run's life in its process, around the stages (after lightning-hydra-template's `task_wrapper`): status.json from
the moment the run directory is accepted, the exit code, and the line an interrupted run ends with (the command that
resumes it from its checkpoint, or runs it again), each command quoted by vtlab.core.overrides.

- accepted (the admission's `on_start`): status.json says "running"; a refused run never touches an earlier run's
  status;
- done: "done", exit 0; status.json that cannot say so (a full disk) is one line and exit 2;
- failed: "failed", and the error goes on (a user's error: one line, exit 2); a sweep's job logs it and the sweep goes
  on (it exits 1 at its end: vtlab.runs.status.SweepExitCode);
- interrupted (a signal: vtlab.runs.signals): "interrupted", the directory's lock given up, one line, exit 128 + the
  signal's number, a sweep stopped too: the user asked to stop.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from vtlab.core.errors import DiskError, one_line, user_error
from vtlab.core.overrides import key, override, shell_line
from vtlab.runs import world
from vtlab.runs.directory import LAST_CKPT, HeldLock, earlier_outputs
from vtlab.runs.signals import CAUGHT, interrupting_signal, raise_unheeded
from vtlab.runs.status import RunStatus, error_line

log = logging.getLogger("vtlab")

_PINNED = {"hydra.run.dir", "paths.run_dir", "resume", "overwrite"}  # what the commands below set themselves


@dataclass(frozen=True)
class Job:
    """The run as its lifecycle sees it: where it writes, its name, the command line's overrides (as Hydra records
    them), whether it trains (resumes from a checkpoint), whether it is a sweep's job (`num`), and the run
    directory's lock the Hydra callback holds (vtlab.runs.guard), given up when the run is interrupted."""

    run_dir: Path
    name: str
    overrides: tuple[str, ...]
    trains: bool
    num: int | None = None
    lock: HeldLock | None = None


class Record:
    """The run's status.json, written from `start` on (the admission calls it once the run directory is accepted)."""

    def __init__(self, job: Job) -> None:
        self.status = RunStatus(job.run_dir, name=job.name, overrides=list(job.overrides))
        self.started = False

    def start(self) -> None:
        self.started = True  # first: a signal arriving while status.json is written still records the interruption
        self.status.start()


def run_job(job: Job, body: Callable[[Callable[[], None]], object]) -> None:
    """Run `body(on_start)` (the stages) as the module docstring says: status.json, the exit code, the lines."""
    record = Record(job)
    try:
        body(record.start)
        raise_unheeded()  # a signal no step acted on still ends the run as interrupted, not done
    except BaseException as exc:  # noqa: BLE001 - interruptions too: recorded, then an honest exit code
        if (signum := interrupting_signal(exc)) is not None:
            interrupted(job, record, signum)
        if record.started:
            record_failure(record.status, exc)
        if job.num is not None:  # one failed job must not end the sweep: the table shows it as failed (vtlab.report)
            log.error("job %s failed: %s", job.num, error_line(exc))
            return
        raise
    try:
        if record.started:  # a later rank of a run records nothing: rank 0 does (vtlab.runs.ranks)
            record.status.done()
    except DiskError as err:  # the results are written, but status.json cannot say so: not an honest exit 0
        if job.num is not None:
            log.error("job %s: %s", job.num, err)
            return
        print(one_line(err), file=sys.stderr)
        raise SystemExit(2) from None


def interrupted(job: Job, record: Record, signum: int) -> None:
    """Record the interruption, give up the lock, print the line that resumes or reruns the run, and leave."""
    for caught in (signal.SIGINT, *CAUGHT):  # a second signal must not cut the status write short
        signal.signal(caught, signal.SIG_IGN)
    if record.started:
        record.status.interrupted(signum)
    last = job.run_dir / LAST_CKPT
    checkpoint = last if job.trains and last.is_file() else None
    command = (resume_command if checkpoint else rerun_command)(job.overrides, job.run_dir)
    if job.lock is not None:
        job.lock.release()  # free when the line appears: the rerun may start at once
    print(interrupted_line(signum, job.run_dir, checkpoint, command, job.trains), file=sys.stderr)
    leave(128 + signum)  # a sweep stops too: the user asked to stop


def record_failure(status: RunStatus, exc: BaseException) -> None:
    """status.json says "failed"; where it cannot be written (a link there, a full disk) that is one more line, and
    none after a refusal that already named the file (the run exits 2 on its own line, no traceback)."""
    try:
        status.fail(exc)
    except Exception as err:  # noqa: BLE001 - a user's error is one line; anything else is a bug
        said = user_error(err)
        if said is None:
            raise
        if not isinstance(exc, SystemExit):
            print(one_line(said), file=sys.stderr)


def leave(code: int) -> None:
    """Exit now, the line printed: flush what is open and skip the interpreter's teardown (collecting a large
    model's objects took minutes on a loaded machine, holding the CPU past the line a scheduler reads)."""
    wandb = sys.modules.get("wandb")
    if wandb is not None and getattr(wandb, "run", None) is not None:
        wandb.finish(exit_code=code, quiet=True)
    world.current().farewell()  # every rank leaves once rank 0 recorded the run's end
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _kept(overrides: Sequence[str]) -> list[str]:
    return [o for o in overrides if key(o) not in _PINNED]


def resume_command(overrides: Sequence[str], run_dir: str | Path) -> str:
    """The command that continues a run in `run_dir` from its checkpoint: its own overrides with `hydra.run.dir`
    pinned to the directory (a dated default directory would be a new one), less `resume=`/`overwrite=` (the default
    resume=auto continues; overwrite=true would delete the checkpoint)."""
    return shell_line(["python", "-m", "vtlab", *_kept(overrides), override("hydra.run.dir", run_dir)])


def rerun_command(overrides: Sequence[str], run_dir: str | Path) -> str:
    """The command that runs an interrupted run with nothing to resume again from the start, in the same `run_dir`
    (so what points at it, `stage=export run_dir=...`, gets the results): its overrides with `hydra.run.dir` pinned,
    less `resume=` (resume=true would refuse: there is no checkpoint) and `overwrite=`, plus `overwrite=true` only when
    the interrupted run left outputs the run directory check refuses without it (earlier_outputs:
    an evaluation suite's first metrics, a finished stage's model, a best checkpoint); its logs, .hydra/ and
    status.json never need it."""
    rerun = ["python", "-m", "vtlab", *_kept(overrides), override("hydra.run.dir", run_dir)]
    if Path(run_dir).is_dir() and earlier_outputs(Path(run_dir)):
        rerun.append("overwrite=true")
    return shell_line(rerun)


def interrupted_line(signum: int, run_dir: str | Path, checkpoint: Path | None, command: str, trains: bool) -> str:
    """The one line an interrupted run ends with: the command that resumes it from `checkpoint`, or why a rerun
    starts over (an evaluation or export keeps no partial results; a training run stopped before its first save)."""
    head = f"vtlab: interrupted by {signal.Signals(signum).name} (exit {128 + signum}); "
    if checkpoint is not None:
        return f"{head}resume from {checkpoint} with: {command}"
    why = "it stopped before its first checkpoint" if trains else "an evaluation or export keeps no partial results"
    return f"{head}nothing to resume in {run_dir} ({why}); to run it again: {command}"
