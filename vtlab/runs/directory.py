"""The run directory: an earlier run's results are never overwritten, an interrupted run (its `checkpoints/last.ckpt`
but no results) is resumed from its last checkpoint, and two processes never share one directory (an flock)."""
from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, read_write

from vtlab.errors import ConfigError, RunDirError, VtlabError, one_line

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
        raise RunDirError(f"resume=true: nothing to resume in {run_dir} (no {LAST_CKPT}); pass the directory of the "
                          "run to continue as hydra.run.dir=... (or paths.run_dir=...)")
    return None, False


def _in_use(run_dir: Path) -> RunDirError:
    return RunDirError(f"run directory {run_dir} is in use by another vtlab process (it holds the directory's lock); "
                       "wait for it to end, or choose another hydra.run.dir")


@contextlib.contextmanager
def run_dir_lock(run_dir: Path) -> Iterator[None]:
    """An exclusive flock on the run directory itself (no lock file to leave behind) for the whole run: a second
    process with the same run directory is refused instead of mixing its checkpoints, config and status with the
    first's. The kernel releases it when the process ends, however it ends."""
    run_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(run_dir, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _in_use(run_dir) from None
        yield
    finally:
        os.close(fd)


def check_not_in_use(run_dir: Path) -> None:
    """RunDirError if another process holds run_dir's lock (RunDirGuard: before Hydra writes into the directory)."""
    if run_dir.is_dir():
        with run_dir_lock(run_dir):
            pass


def prepare_run_dir(cfg: DictConfig) -> Path | None:
    """check_run_dir for the run's config, then act on it; returns the checkpoint to resume from, if any."""
    run_dir = Path(str(cfg.paths.run_dir))
    resume_from, clear = check_run_dir(run_dir, cfg.get("resume", "auto"), cfg.get("overwrite", False))
    if clear:
        log.warning("overwrite=true: replacing the earlier run in %s (%s)", run_dir,
                    ", ".join(earlier_outputs(run_dir)[:5]))
        shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
    if resume_from is not None:
        log.info("resuming the interrupted run in %s from %s", run_dir, resume_from)
    return resume_from


class RunDirGuard(Callback):
    """Hydra callback (conf/config.yaml `hydra.callbacks`): the same check before Hydra writes `.hydra/` and its job
    log into the run directory, so a refused `python -m vtlab ... hydra.run.dir=<finished run>` leaves that run's
    recorded config (which export reads back) and status.json as they were. Single runs only: a sweep's jobs are
    checked by the pipeline, after Hydra has written their `.hydra/`."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        paths = config.get("paths")
        run_dir_node = paths._get_node("run_dir") if isinstance(paths, DictConfig) else None  # noqa: SLF001
        if run_dir_node is None or run_dir_node._value() != "${hydra:runtime.output_dir}":  # noqa: SLF001
            return  # the run writes elsewhere than Hydra's directory: the pipeline checks that one
        try:
            run_dir = Path(str(config.hydra.run.dir))
            check_not_in_use(run_dir)
            check_run_dir(run_dir, config.get("resume", "auto"), config.get("overwrite", False))
        except VtlabError as err:
            print(one_line(err), file=sys.stderr)
            sys.exit(2)


class RunDirInside(RunDirGuard):
    """Hydra callback (conf/stage/export.yaml): a command that works on an earlier run (`source`: stage=export
    run_dir=R) records itself — `.hydra/`, its job log, status.json — in <source>/<subdir>, beside what it writes into
    that run, instead of in a new run directory that would hold nothing else. Without a source Hydra's run dir stays
    as configured. Then RunDirGuard's check, on the directory used."""

    def __init__(self, source: str | None, subdir: str) -> None:
        self.source, self.subdir = source, subdir

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        if not self.source:
            return
        with read_write(config.hydra.run):
            config.hydra.run.dir = str(Path(self.source) / self.subdir)
        super().on_run_start(config, **kwargs)


def _refusal(run_dir: Path, found: list[str], finished: list[str], has_last: bool) -> str:
    shown = ", ".join(found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
    if finished:
        why = "is finished"
    elif has_last:
        why = "holds an interrupted run and resume=false"
    else:
        why = f"holds an earlier run's outputs but no {LAST_CKPT} to resume from"
    return (f"run directory {run_dir} {why} ({shown}); it is never overwritten: choose another hydra.run.dir, "
            "or pass overwrite=true to replace it" + ("" if finished or not has_last else ", or resume=auto to continue it"))
