"""A run directory that cannot be written (a read-only or full file system, no permission) is refused with one line
before Hydra writes into it: Hydra makes the directory, configures its job log `<run_dir>/<job>.log` and writes
`.hydra/` before the job runs, and fails there with a traceback ("Unable to configure handler 'file'")."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from vtlab.core.errors import DiskError, disk_error, one_line

# what the probe writes: about what Hydra writes before the job starts (.hydra/*.yaml, the log's first lines), so a
# disk too full for that is refused here too
PROBE_BYTES = 64 * 1024
RUN_DIR_INSIDE = "vtlab.runs.directory.RunDirInside"


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


def _hydra_dir(config: DictConfig) -> Path:
    """The directory Hydra will write this run into: hydra.run.dir, or where a later RunDirInside callback (stage=export
    run_dir=R) moves it (R/<subdir>)."""
    for cb in (config.hydra.get("callbacks") or {}).values():
        if isinstance(cb, DictConfig) and cb.get("_target_") == RUN_DIR_INSIDE and cb.get("source"):
            return Path(str(cb.source)) / str(cb.subdir)
    return Path(str(config.hydra.run.dir))


def _refuse_unwritable(directory: Path) -> None:
    try:
        check_writable(directory)
    except DiskError as err:
        print(one_line(err), file=sys.stderr)
        sys.exit(2)  # like every refused run
    except OSError:
        return  # not a disk's error (a component that is a file, ...): Hydra meets it and says what it is


class RunDirWritable(Callback):
    """Hydra callback (conf/config.yaml `hydra.callbacks`, before run_dir_guard): a run (or sweep) directory that cannot
    be written is one line and exit 2, before Hydra makes it, writes `.hydra/` or opens its job log there."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        _refuse_unwritable(_hydra_dir(config))

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        _refuse_unwritable(Path(str(config.hydra.sweep.dir)))
