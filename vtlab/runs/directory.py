"""The run directory: an earlier run's results are never overwritten, an interrupted run (its `checkpoints/last.ckpt`
but no results) is resumed from its last checkpoint, and two processes never share one directory (an flock).

A single run (`python -m vtlab ...`) takes the lock before Hydra creates the directory's `.hydra/` and job log, and
holds it until the process ends (vtlab.runs.guard.RunDirGuard). Limit: a sweep's job directories are made and
written by Hydra (`.hydra/`, job log) before any callback sees the job (on_job_start comes after), so a reused job
directory is locked and checked by the run's admission only: its earlier results and status.json are kept, Hydra's
record of the earlier job is not."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vtlab.core.errors import ConfigError, RunDirError

log = logging.getLogger("vtlab")

LAST_CKPT = Path("checkpoints") / "last.ckpt"
# A run's results (globs under run_dir): evaluation metrics, the trained/calibrated/transferred model, checkpoints.
# Everything else is not protected: Hydra's `.hydra/` and job log and status.json describe the latest invocation, and
# what a run killed before its first checkpoint leaves (logs, apc_report.json, the mlm/ link) is made again.
FINISHED = ("eval/*/metrics.json",)
OUTPUTS = (*FINISHED, "checkpoints/*.ckpt", "model/config.json", "apc/config.json", "transfer")
RESUME_VALUES = ("auto", True, False)


def earlier_outputs(run_dir: Path) -> list[str]:
    """The results of an earlier run found in `run_dir` (paths relative to it), sorted."""
    return sorted({str(p.relative_to(run_dir)) for pattern in OUTPUTS for p in run_dir.glob(pattern)})


def _resume_setting(value: Any) -> str | bool:
    if value not in RESUME_VALUES or isinstance(value, int) and not isinstance(value, bool):
        raise ConfigError(f"resume={value!r} must be auto, true or false")
    return value


def check_run_dir(run_dir: Path, resume: Any = "auto", overwrite: Any = False) -> tuple[Path | None, bool]:
    """How a run may use `run_dir`: (checkpoint to resume from, whether to clear the old checkpoints first).
    Refuses with RunDirError; changes nothing on disk.

    - nothing of an earlier run there: a fresh run;
    - `<run_dir>/checkpoints/last.ckpt` but no final metrics (a killed run) and resume=auto|true: resume from it;
    - results of an earlier run (or a checkpoint with resume=false): refuse, unless overwrite=true, which clears the
      old checkpoints (so they are neither resumed nor mixed with the new ones) and lets the run replace the rest;
    - resume=true with nothing to resume: refuse.
    """
    resume = _resume_setting(resume)
    if not isinstance(overwrite, bool):
        raise ConfigError(f"overwrite={overwrite!r} must be true or false")
    found = earlier_outputs(run_dir) if run_dir.is_dir() else []
    finished = [p for p in found if any(Path(p).match(g) for g in FINISHED)]
    last = run_dir / LAST_CKPT
    if overwrite:
        return None, bool(found)
    if last.is_file() and not finished and resume in ("auto", True):
        return last, False
    if found:
        raise RunDirError(_refusal(run_dir, found, finished, last.is_file()))
    if resume is True:
        raise RunDirError(
            f"resume=true: nothing to resume in {run_dir} (no {LAST_CKPT}); pass the directory of the "
            "run to continue as hydra.run.dir=... (or paths.run_dir=...)"
        )
    return None, False


def _in_use(run_dir: Path) -> RunDirError:
    return RunDirError(
        f"run directory {run_dir} is in use by another vtlab process (it holds the directory's lock); "
        "wait for it to end, or choose another hydra.run.dir"
    )


def check_dir_path(run_dir: Path, key: str) -> None:
    """RunDirError if `run_dir` or a directory above it exists as something else than a directory (a file): making
    it would fail with a traceback."""
    for path in (run_dir, *run_dir.parents):
        if os.path.lexists(path) and not path.is_dir():  # a file, or a link to nothing
            what = "exists and is not a directory" if path == run_dir else f"{path} is a file, not a directory"
            raise RunDirError(
                f"{key}={run_dir}: {what}; a run directory is a new directory or an earlier run's: choose another {key}"
            )


@dataclass(frozen=True)
class HeldLock:
    """The lock on a run directory that hold_run_dir_lock took: `fd` stays open (the kernel releases the lock when the
    process ends) until `release`."""

    run_dir: Path
    fd: int
    dev_ino: tuple[int, int]

    def covers(self, run_dir: Path) -> bool:
        """Whether this lock is `run_dir`'s (the same directory, by device and inode)."""
        try:
            st = os.stat(run_dir)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == self.dev_ino

    def release(self) -> None:
        """Give the lock up (an interrupted run, before its last line: a rerun may start at once)."""
        with contextlib.suppress(OSError):
            os.close(self.fd)


def hold_run_dir_lock(run_dir: Path) -> HeldLock:
    """Make `run_dir` and take its lock until the process ends or the lock is released (RunDirGuard: before Hydra
    writes into it, so the lock covers `.hydra/` too)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(run_dir, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise _in_use(run_dir) from None
    st = os.fstat(fd)
    return HeldLock(run_dir, fd, (st.st_dev, st.st_ino))


@contextlib.contextmanager
def run_dir_lock(run_dir: Path, key: str = "paths.run_dir", held: HeldLock | None = None) -> Iterator[None]:
    """An exclusive flock on the run directory itself (no lock file to leave behind) for the whole run: a second
    process with the same run directory is refused instead of mixing its checkpoints, config and status with the
    first's. The kernel releases it when the process ends, however it ends. A directory whose lock this process
    holds already (`held`: RunDirGuard's) is used under that lock (flock belongs to an open file description: a
    second open and flock here would be refused by our own lock)."""
    check_dir_path(run_dir, key)
    run_dir.mkdir(parents=True, exist_ok=True)
    if held is not None and held.covers(run_dir):
        yield
        return
    fd = os.open(run_dir, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _in_use(run_dir) from None
        yield
    finally:
        os.close(fd)


def clear_earlier_run(run_dir: Path, clear: bool, resume_from: Path | None) -> None:
    """Act on check_run_dir's answer: with overwrite=true, delete the earlier run's checkpoints (so they are neither
    resumed nor mixed with the new ones); say where a resume continues from."""
    if clear:
        log.warning(
            "overwrite=true: replacing the earlier run in %s (%s)", run_dir, ", ".join(earlier_outputs(run_dir)[:5])
        )
        shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
    if resume_from is not None:
        log.info("resuming the interrupted run in %s from %s", run_dir, resume_from)


def _refusal(run_dir: Path, found: list[str], finished: list[str], has_last: bool) -> str:
    shown = ", ".join(found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
    if finished:
        why = "is finished"
    elif has_last:
        why = "holds an interrupted run and resume=false"
    else:
        why = f"holds an earlier run's outputs but no {LAST_CKPT} to resume from"
    return (
        f"run directory {run_dir} {why} ({shown}); it is never overwritten: choose another hydra.run.dir, "
        "or pass overwrite=true to replace it" + ("" if finished or not has_last else ", or resume=auto to continue it")
    )
