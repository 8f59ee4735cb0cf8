"""A run directory is admitted before Hydra writes into it: Hydra makes the directory, configures its job log
`<run_dir>/<job>.log` and writes `.hydra/` before the job runs, so what vtlab's own writers check (vtlab.core.atomic)
must be checked here for Hydra's. Refused with one line and exit 2, nothing written:

- a directory that cannot be written (a read-only or full file system, no permission), where Hydra would fail with a
  traceback ("Unable to configure handler 'file'");
- a hard-linked file already in the directory (Hydra, Lightning and the job log write some files in place: the
  file's other name, anywhere on the disk, would receive the run's output);
- a link on the way to a file Hydra writes (`R/.hydra` -> elsewhere, `R/__main__.log` -> another file, an export's
  `R/exports` -> elsewhere) that leads out of the directory and out of the cache: the rule vtlab's own writers are
  held to (vtlab.core.atomic.link_leaving, guard_write's), applied to Hydra's writes. A sweep: its multirun.yaml and
  what Hydra writes in each job directory already there (an earlier sweep's). The directory itself may be a link
  (runs kept on another disk); links elsewhere in it (wandb's into its own cache) are checked by vtlab's writers
  when they write through them."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from vtlab.core.atomic import hard_link_error, hard_link_in, link_leaving, real_path
from vtlab.core.errors import DiskError, LinkError, disk_error, one_line
from vtlab.core.paths import cache_root
from vtlab.runs.guard import moved_run_dir

# what the probe writes: about what Hydra writes before the job starts (.hydra/*.yaml, the log's first lines), so a
# disk too full for that is refused here too
PROBE_BYTES = 64 * 1024
HYDRA_RECORD = ("config.yaml", "hydra.yaml", "overrides.yaml")  # what Hydra writes into <job dir>/<output_subdir>
SWEEP_RECORD = "multirun.yaml"  # what Hydra writes into a sweep directory before its first job


def check_writable(directory: Path) -> None:
    """DiskError naming `directory` unless a file of PROBE_BYTES can be written there (or, when it does not exist
    yet, in its nearest existing parent, where it would be made: nothing is created but the probe, which is removed)."""
    where = next((p for p in (directory, *directory.parents) if p.is_dir()), directory)
    fd, name = -1, None
    try:
        fd, name = tempfile.mkstemp(dir=where, prefix=".vtlab-write-probe-")
        data = memoryview(b"\0" * PROBE_BYTES)
        while data:  # a disk that fills up mid-write returns a short count first, ENOSPC on the next write
            data = data[os.write(fd, data) :]
    except OSError as exc:
        err = disk_error(directory, exc)
        if err is None:
            raise
        raise err from None
    finally:
        if fd >= 0:
            os.close(fd)
        if name is not None:
            Path(name).unlink(missing_ok=True)


def hydra_writes(config: DictConfig, job_dir: Path) -> list[Path]:
    """The files Hydra writes into `job_dir` before the job runs: its record (<hydra.output_subdir>/config.yaml,
    hydra.yaml, overrides.yaml; none when output_subdir is null) and the job log <hydra.job.name>.log."""
    subdir = config.hydra.get("output_subdir")
    record = [] if subdir is None else [job_dir / str(subdir) / name for name in HYDRA_RECORD]
    job = OmegaConf.select(config, "hydra.job.name", default=None)
    return record + ([job_dir / f"{job}.log"] if job else [])


def check_links(paths: list[Path], directory: Path, what: str, key: str) -> None:
    """LinkError naming the first link on the way from `directory` to one of `paths` that leads out of it and out of
    the cache (vtlab.core.atomic.link_leaving). `what` and `key` name the directory ("run directory",
    "hydra.run.dir")."""
    for path in paths:
        found = link_leaving(path, [directory, cache_root()])
        if found is not None:
            link = found[0]
            raise LinkError(
                f"{link}: a link to {real_path(link)}, out of the {what} {directory} ({key}): Hydra would write "
                f"{path} through it before the run starts, and nothing is written out of a run directory through a "
                "link; remove the link"
            )


def check_hard_links(directory: Path) -> None:
    """LinkError naming the first hard-linked file already in `directory` (an earlier run's): Hydra, Lightning (its
    checkpoints and CSV logs) and the job log write some files in place, so the file's other name would receive
    them."""
    if directory.is_dir() and (found := hard_link_in(directory)) is not None:
        raise hard_link_error(*found)


def _sweep_writes(config: DictConfig, sweep: Path) -> list[Path]:
    """What Hydra writes into the sweep directory `sweep`: its multirun.yaml, and each job's files in every job
    directory an earlier sweep left there (`hydra_writes`)."""
    jobs = sorted(p for p in sweep.iterdir() if p.is_dir() or p.is_symlink()) if sweep.is_dir() else []
    return [sweep / SWEEP_RECORD, *(path for job in jobs for path in hydra_writes(config, job))]


def _hydra_dir(config: DictConfig) -> Path:
    """The directory Hydra will write this run into: hydra.run.dir, or where a later RunDirInside callback (stage=export
    run_dir=R, export.out=DIR) moves it (vtlab.runs.directory.moved_run_dir)."""
    moved = moved_run_dir(config)
    return Path(str(config.hydra.run.dir)) if moved is None else moved[0]


def _run_root(config: DictConfig) -> tuple[Path, str]:
    """(the run directory whose tree Hydra writes in, the key that names it): R for stage=export run_dir=R, whose
    record goes to R/<subdir>, DIR's parent for export.out=DIR; else hydra.run.dir."""
    moved = moved_run_dir(config)
    return (Path(str(config.hydra.run.dir)), "hydra.run.dir") if moved is None else moved[1:]


def _refuse_links(paths: list[Path], directory: Path, what: str, key: str, writes_in: Path) -> None:
    try:
        check_links(paths, directory, what, key)
        check_hard_links(writes_in)
    except LinkError as err:
        print(one_line(err), file=sys.stderr)
        sys.exit(2)


def _refuse_unwritable(directory: Path) -> None:
    try:
        check_writable(directory)
    except DiskError as err:
        print(one_line(err), file=sys.stderr)
        sys.exit(2)  # like every refused run
    except OSError:
        return  # not a disk's error (a component that is a file, ...): Hydra meets it and says what it is


class RunDirWritable(Callback):
    """Hydra callback (conf/config.yaml `hydra.callbacks`, before run_dir_guard): a run (or sweep) directory that
    cannot be written, or where a link would carry Hydra's writes out of it, is one line and exit 2, before Hydra
    makes it, writes `.hydra/` or opens its job log there."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        root, key = _run_root(config)
        _refuse_links(hydra_writes(config, _hydra_dir(config)), root, "run directory", key, _hydra_dir(config))
        _refuse_unwritable(_hydra_dir(config))

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        sweep = Path(str(config.hydra.sweep.dir))
        _refuse_links(_sweep_writes(config, sweep), sweep, "sweep directory", "hydra.sweep.dir", sweep)
        _refuse_unwritable(sweep)
