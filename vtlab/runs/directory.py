"""The run directory: an earlier run's results are never overwritten, an interrupted run (its `checkpoints/last.ckpt`
but no results) is resumed from its last checkpoint, and two processes never share one directory (an flock).

A single run (`python -m vtlab ...`) takes the lock before Hydra creates the directory's `.hydra/` and job log, and
holds it until the process ends (vtlab.stages.admission.RunDirGuard). Limit: a sweep's job directories are made and
written by Hydra (`.hydra/`, job log) before any callback sees the job (on_job_start comes after), so a reused job
directory is locked and checked by the run's admission only: its earlier results and status.json are kept, Hydra's
record of the earlier job is not."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, read_write

from vtlab.core.errors import ConfigError, RunDirError, VtlabError, one_line
from vtlab.runs.paths import check_paths
from vtlab.runs.ranks import later_rank

log = logging.getLogger("vtlab")

LAST_CKPT = Path("checkpoints") / "last.ckpt"
# A run's results (globs under run_dir): evaluation metrics, the trained/calibrated/transferred model, checkpoints.
# Everything else is not protected: Hydra's `.hydra/` and job log and status.json describe the latest invocation, and
# what a run killed before its first checkpoint leaves (logs, apc_report.json, the mlm/ link) is made again.
FINISHED = ("eval/*/metrics.json",)
OUTPUTS = (*FINISHED, "checkpoints/*.ckpt", "model/config.json", "apc/config.json", "transfer")
RESUME_VALUES = ("auto", True, False)
RUN_DIR_INSIDE = "vtlab.runs.directory.RunDirInside"  # the callback that records a run inside another (moved_run_dir)
TRAINING_STEP = "vtlab.stages.finetune.run"  # the stage that resumes from last.ckpt (named, not imported: layering)
# (st_dev, st_ino) of each run directory whose lock hold_run_dir_lock took → its descriptor, open until the process ends
_HELD: dict[tuple[int, int], int] = {}
# (st_dev, st_ino) of a run directory → what RunDirGuard's `start` hook answered for it before Hydra wrote there
_FOUND: dict[tuple[int, int], Any] = {}
StartCheck = Callable[[DictConfig, Path], Any]  # (config, run dir, under its lock) → where the run starts; raises
# RunDirError to refuse it (vtlab.stages.admission.resume_point)


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


def _dir_id(run_dir: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(run_dir)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _held(run_dir: Path) -> bool:
    return _dir_id(run_dir) in _HELD


def found_before_hydra(run_dir: Path) -> Any:
    """What RunDirGuard's `start` hook answered for `run_dir` in this process (taken: asked once), else None."""
    key = _dir_id(run_dir)
    return None if key is None else _FOUND.pop(key, None)


def hold_run_dir_lock(run_dir: Path) -> None:
    """Make `run_dir` and take its lock until the process ends (RunDirGuard: before Hydra writes into it, so the
    lock covers `.hydra/` too). A directory this process holds already is kept as it is."""
    run_dir.mkdir(parents=True, exist_ok=True)
    if _held(run_dir):
        return
    fd = os.open(run_dir, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise _in_use(run_dir) from None
    st = os.fstat(fd)
    _HELD[(st.st_dev, st.st_ino)] = fd  # never closed: the kernel releases the lock when the process ends


def release_run_dir_lock(run_dir: Path) -> None:
    """Give up the lock hold_run_dir_lock took (an interrupted run, before its last line: a rerun may start at once)."""
    try:
        st = os.stat(run_dir)
    except OSError:
        return
    fd = _HELD.pop((st.st_dev, st.st_ino), None)
    if fd is not None:
        os.close(fd)


@contextlib.contextmanager
def run_dir_lock(run_dir: Path, key: str = "paths.run_dir") -> Iterator[None]:
    """An exclusive flock on the run directory itself (no lock file to leave behind) for the whole run: a second
    process with the same run directory is refused instead of mixing its checkpoints, config and status with the
    first's. The kernel releases it when the process ends, however it ends. A directory whose lock RunDirGuard took
    in this process is used under that lock (flock belongs to an open file description: a second open and flock here
    would be refused by our own lock)."""
    check_dir_path(run_dir, key)
    run_dir.mkdir(parents=True, exist_ok=True)
    if _held(run_dir):
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


def trains(cfg: DictConfig) -> bool:
    """Whether the run's stages include fine-tuning, the one stage that resumes from a checkpoint."""
    steps = OmegaConf.select(cfg, "stage.steps", default=None)
    return any(isinstance(step, DictConfig) and step.get("_target_") == TRAINING_STEP for step in steps or [])


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


class RunDirGuard(Callback):
    """Hydra callback (conf/hydra/default.yaml): before Hydra makes the run directory or writes `.hydra/` and its job
    log there, check the paths the config names (vtlab.runs.paths), take the directory's lock (held until the process
    ends) and ask `start` (the run's admission: vtlab.stages.admission.resume_point) whether and from where the run
    may start: an earlier run there, a resume's config and inputs. A refused `python -m vtlab ... hydra.run.dir=<run>`
    exits 2 with one line and leaves that run's recorded config (which export and resume read back) and status.json
    as they were; an admitted one's answer waits for the admission in this process (found_before_hydra). Single runs
    only: a sweep's jobs are admitted after Hydra has written their `.hydra/` (the module docstring says why)."""

    def __init__(self, start: StartCheck | None = None) -> None:
        self.start = start

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            self.check(config)
        except VtlabError as err:
            print(one_line(err), file=sys.stderr)
            sys.exit(2)

    def check(self, config: DictConfig) -> None:
        hydra_dir = Path(str(config.hydra.run.dir))
        check_dir_path(hydra_dir, "hydra.run.dir")  # Hydra makes it whatever paths.run_dir says
        paths = config.get("paths")
        run_dir_node = paths._get_node("run_dir") if isinstance(paths, DictConfig) else None  # noqa: SLF001
        guarded = run_dir_node is not None and run_dir_node._value() == "${hydra:runtime.output_dir}"  # noqa: SLF001
        check_paths(config, hydra_dir if guarded else None)  # names, export outputs: before any directory is made
        if not guarded or later_rank():
            return  # the run writes elsewhere than Hydra's directory (its admission locks and checks that one), or
            # this is a later rank of a run whose rank 0 holds the directory (vtlab.runs.ranks)
        check_run_dir(hydra_dir, config.get("resume", "auto"), config.get("overwrite", False))  # before mkdir
        hold_run_dir_lock(hydra_dir)
        if self.start is not None:  # under the lock: another process may have written there in between
            found = self.start(config, hydra_dir)
            if (key := _dir_id(hydra_dir)) is not None:
                _FOUND[key] = found


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

    def check(self, config: DictConfig) -> None:
        if self.source and not Path(self.source).is_dir():  # before <source>/<subdir> is made: a mistyped run_dir
            raise VtlabError(f"run_dir={self.source}: no such directory")  # stays absent
        if (moved := moved_run_dir(config)) is not None:
            with read_write(config.hydra.run):
                config.hydra.run.dir = str(moved[0])
        super().check(config)


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
