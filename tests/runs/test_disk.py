"""A full or read-only disk: found before training (free space against the checkpoints the run will write), and a
write that fails anyway is one line naming the path, with no temp file left behind.

Tests run as root, where a chmod 0500 directory still takes writes: a read-only or full disk is stood in for by
os-level functions that fail as the kernel does (OSError with EROFS / ENOSPC), and the free space by shutil.disk_usage.
"""

from __future__ import annotations

import errno
import io
import os
import shutil
import tempfile
from collections import namedtuple
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import compose_run
from test_resume import _RUN  # tests/ is on sys.path (rootdir conftest)
from torch import nn

from vtlab.callbacks.checkpoints import SameDirCheckpointIO, check_free_space
from vtlab.core import atomic
from vtlab.core.atomic import atomic_dir, atomic_write, atomic_write_bytes
from vtlab.core.errors import DiskError

Usage = namedtuple("Usage", "total used free")
MiB = 2**20


def _free(monkeypatch, n_bytes: int) -> list[Path]:
    """shutil.disk_usage reports `n_bytes` free; returns the paths it was asked about."""
    asked: list[Path] = []

    def usage(path):
        asked.append(Path(path))
        return Usage(10**12, 10**12 - n_bytes, n_bytes)

    monkeypatch.setattr(shutil, "disk_usage", usage)
    return asked


# ---- free space before training -----------------------------------------------------------------------------------


def _needed(n_params: int, existing: int = 0) -> int:
    """Written out: 3 checkpoints (last.ckpt, the best, a replacement being written) of fp32 weights + 2 AdamW states,
    less the checkpoints already there, + model/ (the weights) + a margin of a tenth of a checkpoint and 100 MiB."""
    ckpt = n_params * 4 * 3
    return max(0, 3 * ckpt - existing) + n_params * 4 + ckpt // 10 + 100 * MiB


def test_free_space_check_names_the_path_and_the_sizes(tmp_path: Path, monkeypatch) -> None:
    module = nn.Linear(1000, 1000)  # 1,001,000 parameters
    need = _needed(1_001_000)
    run_dir = tmp_path / "run"  # not created yet: the disk of its nearest existing parent is asked
    asked = _free(monkeypatch, need - 1)
    with pytest.raises(DiskError) as ei:
        check_free_space(run_dir, module)
    assert asked == [tmp_path]
    gib = lambda n: f"{n / 2**30:.2f} GiB"  # noqa: E731
    ckpt = 1_001_000 * 12
    assert str(ei.value) == (
        f"{run_dir}: not enough free disk space to train: {gib(need - 1)} free, {gib(need)} needed (3 checkpoints of "
        f"{gib(ckpt)} = 1,001,000 parameters x 4 bytes x (1 + 2 optimizer states), model/ {gib(1_001_000 * 4)}, "
        f"margin {gib(ckpt // 10 + 100 * MiB)}); free some space there or choose another hydra.run.dir"
    )
    _free(monkeypatch, need)
    check_free_space(run_dir, module)  # exactly enough


def test_a_resume_counts_the_checkpoints_it_will_replace(tmp_path: Path, monkeypatch) -> None:
    module = nn.Linear(1000, 1000)
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.ckpt").write_bytes(b"\0" * 5_000_000)
    (tmp_path / "checkpoints" / "notes.txt").write_bytes(b"\0" * 1_000_000)  # not a checkpoint: not counted
    need = _needed(1_001_000, existing=5_000_000)
    _free(monkeypatch, need)
    check_free_space(tmp_path, module)
    _free(monkeypatch, need - 1)
    with pytest.raises(DiskError, match="less 0.00 GiB of checkpoints already there"):
        check_free_space(tmp_path, module)


@pytest.mark.train
def test_a_full_run_dir_stops_training_before_its_first_step(tmp_path: Path, monkeypatch, capsys) -> None:
    """The real fine-tuning stage (splade-tiny) on a disk with 1 MiB free: refused before a step or a checkpoint."""
    from vtlab.stages.pipeline import run_or_exit

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    steps = []
    monkeypatch.setattr(torch.optim.AdamW, "step", lambda *a, **k: steps.append(1))
    _free(monkeypatch, 1 * MiB)
    overrides = [o for o in _RUN if not o.startswith("+eval")]
    with pytest.raises(SystemExit) as ei:
        run_or_exit(compose_run(tmp_path, *overrides))
    assert ei.value.code == 2
    assert steps == [] and not (tmp_path / "checkpoints").exists() and not (tmp_path / "model").exists()
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("vtlab")]  # (+ progress bars)
    assert len(err) == 1 and err[0].startswith(
        f"vtlab: error: {tmp_path}: not enough free disk space to train: 0.00 GiB free, "
    )


# ---- a write that fails: one line, nothing left behind ----------------------------------------------------------


class _FullDisk(io.FileIO):
    """A file on a full disk: every write fails as the kernel's does (buffered writers meet it on flush)."""

    def write(self, b) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _full_disk(monkeypatch) -> None:
    def fdopen(fd, mode="r", **kwargs):
        raw = _FullDisk(fd, "w")
        return io.BufferedWriter(raw) if "b" in mode else io.TextIOWrapper(io.BufferedWriter(raw), **kwargs)

    monkeypatch.setattr(atomic.os, "fdopen", fdopen)


def _read_only(monkeypatch) -> None:
    def refuse(*args, dir=None, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(dir))

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    monkeypatch.setattr(tempfile, "mkdtemp", refuse)


def _one_line(path: Path, what: str, code: str, fix: str) -> str:
    return (
        f"{path}: cannot write: {what} ({code}); {fix} or choose another location (hydra.run.dir, VTLAB_CACHE); "
        "nothing half-written was left behind"
    )


FULL = ("no space left on the device", "ENOSPC", "free some space there")
READ_ONLY = ("the file system is read-only", "EROFS", "make it writable")


def test_a_text_write_on_a_full_disk_names_the_file_and_leaves_no_temp(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "metrics.json").write_text("old")
    _full_disk(monkeypatch)
    with pytest.raises(DiskError) as ei:
        atomic_write(tmp_path / "metrics.json", lambda f: f.write("{}" * 10_000))
    assert str(ei.value) == _one_line(tmp_path / "metrics.json", *FULL)
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.json"] and (tmp_path / "metrics.json").read_text() == "old"


def test_a_checkpoint_on_a_full_disk_names_the_file_and_keeps_the_previous_one(tmp_path: Path, monkeypatch) -> None:
    """torch.save meets the failed write inside its zip writer and raises a RuntimeError over the OSError."""
    io_, path = SameDirCheckpointIO(), tmp_path / "checkpoints" / "last.ckpt"
    io_.save_checkpoint({"global_step": 3}, path)
    _full_disk(monkeypatch)
    with pytest.raises(DiskError) as ei:
        io_.save_checkpoint({"global_step": 6, "w": torch.zeros(100_000)}, path)
    monkeypatch.undo()
    assert str(ei.value) == _one_line(path, *FULL)
    assert torch.load(path, weights_only=True) == {"global_step": 3}
    assert [p.name for p in path.parent.iterdir()] == ["last.ckpt"]


def test_a_read_only_run_dir_names_the_path(tmp_path: Path, monkeypatch) -> None:
    _read_only(monkeypatch)
    with pytest.raises(DiskError) as ei:
        atomic_write_bytes(tmp_path / "table.npz", lambda f: np.savez(f, df=np.zeros(3)))
    assert str(ei.value) == _one_line(tmp_path / "table.npz", *READ_ONLY)
    with pytest.raises(DiskError) as ei:
        with atomic_dir(tmp_path / "model"):
            raise AssertionError("never reached: no temp dir")
    assert str(ei.value) == _one_line(tmp_path / "model", *READ_ONLY)
    assert list(tmp_path.iterdir()) == []


def test_a_model_save_on_a_full_disk_removes_the_temp_dir(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("old")
    with pytest.raises(DiskError) as ei:
        with atomic_dir(tmp_path / "model") as tmp:
            (tmp / "config.json").write_text("new")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # as save_pretrained meets it
    assert str(ei.value) == _one_line(tmp_path / "model", *FULL)
    assert [p.name for p in tmp_path.iterdir()] == ["model"]
    assert (tmp_path / "model" / "config.json").read_text() == "old"


def test_other_write_errors_are_not_called_a_full_disk(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        atomic_write(tmp_path / "x.json", lambda f: f.write(3))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.train
def test_the_cli_prints_one_line_for_a_full_disk(tmp_path: Path, capsys, monkeypatch) -> None:
    """What the entry point does with a DiskError from deep inside a stage: one line, exit 2."""
    from vtlab.stages.pipeline import run_or_exit

    def fails(cfg, on_start=None, guarded=None):
        try:
            atomic_write(tmp_path / "eval" / "metrics.json", lambda f: f.write("{}"))
        except DiskError as e:
            raise RuntimeError("wrapped by a library") from e

    monkeypatch.setattr("vtlab.stages.pipeline.run", fails)
    _full_disk(monkeypatch)
    with pytest.raises(SystemExit) as ei:
        run_or_exit(compose_run(tmp_path))
    assert ei.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "vtlab: error: " + _one_line(tmp_path / "eval" / "metrics.json", *FULL)
    ]


# ---- every way a run ends: status.json, the log, the run dir, errors that libraries wrap -------------------------


def test_status_json_is_written_in_the_room_its_reserve_kept_when_the_disk_is_full(tmp_path: Path, monkeypatch) -> None:
    """A disk that filled up during the run: the usual write of the final record fails until the reserve beside
    status.json is deleted, which frees the blocks it needs; status.json itself carries no padding."""
    from vtlab.runs.status import RESERVE, RESERVE_FILE, RunStatus, read_status

    status = RunStatus(tmp_path, name="run", overrides=["x=1"])
    status.start()
    reserve = tmp_path / RESERVE_FILE
    assert reserve.stat().st_size == RESERVE and read_status(tmp_path)["status"] == "running"
    assert (tmp_path / "status.json").read_text().endswith("}\n")  # no blanks to scroll past
    real_fdopen = atomic.os.fdopen

    def fdopen(fd, mode="r", **kwargs):  # full while the reserve holds its blocks
        if reserve.exists():
            raw = _FullDisk(fd, "w")
            return io.BufferedWriter(raw) if "b" in mode else io.TextIOWrapper(io.BufferedWriter(raw), **kwargs)
        return real_fdopen(fd, mode, **kwargs)

    monkeypatch.setattr(atomic.os, "fdopen", fdopen)
    status.fail(DiskError("x" * 5000))
    monkeypatch.undo()
    record = read_status(tmp_path)
    assert record["status"] == "failed" and record["error"].startswith("x" * 100)
    assert record["finished"] and [p.name for p in tmp_path.iterdir()] == ["status.json"]  # no reserve, no temp file


def test_a_finished_run_leaves_no_reserve(tmp_path: Path) -> None:
    from vtlab.runs.status import RESERVE_FILE, RunStatus, read_status

    for end in ("done", "fail", "interrupted"):
        status = RunStatus(tmp_path / end, name="run")
        status.start()
        assert (tmp_path / end / RESERVE_FILE).exists()
        {
            "done": status.done,
            "fail": lambda: status.fail(RuntimeError("x")),
            "interrupted": lambda: status.interrupted(15),
        }[end]()
        assert [p.name for p in (tmp_path / end).iterdir()] == ["status.json"], end
        assert read_status(tmp_path / end)["status"] in ("done", "failed", "interrupted")


def test_a_status_that_cannot_be_written_at_all_is_said_on_stderr(tmp_path: Path, monkeypatch, capsys) -> None:
    from vtlab.runs import status as status_module
    from vtlab.runs.status import RunStatus, read_status

    status = RunStatus(tmp_path, name="run")
    status.start()
    _full_disk(monkeypatch)

    def pwrite(fd, data, offset):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(status_module.os, "pwrite", pwrite)
    status.fail(RuntimeError("boom"))  # the run's own error keeps its exit code: no exception from here
    assert capsys.readouterr().err.strip().splitlines() == [
        (
            f"vtlab: error: {tmp_path / 'status.json'}: could not record the run as 'failed', it still says 'running': "
            "no space left on the device (ENOSPC)"
        )
    ]
    with pytest.raises(DiskError, match="status.json: cannot write: no space left"):
        status.done()  # the entry point turns it into one line and exit 2: a finished run it cannot record
    monkeypatch.undo()
    assert read_status(tmp_path)["status"] == "running"


def test_disk_errors_anywhere_in_the_chain_are_one_line_naming_the_path(tmp_path: Path) -> None:
    from vtlab.core.errors import note_write_roots, one_line, user_error
    from vtlab.runs.status import exit_code

    cache = tmp_path / "cache"
    try:  # pathlib's mkdir on a read-only disk: EROFS for the parent, raised while handling the child's ENOENT
        try:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(cache / "triplets"))
        except FileNotFoundError:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(cache))
    except OSError as exc:
        err = user_error(exc)
    assert isinstance(err, DiskError) and exit_code(err) == 2
    assert one_line(err, "data.train") == (  # the config key that was writing is no help: the disk is
        f"vtlab: error: {cache}: cannot write: the file system is read-only (EROFS); make it writable or choose "
        "another location (hydra.run.dir, VTLAB_CACHE)"
    )

    class SafetensorError(Exception):  # as safetensors reports a failed write: text, no errno, often no file
        pass

    note_write_roots(tmp_path / "run", cache)
    err = user_error(SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)"))
    # both on one disk here: both named (on two disks, the one with the least free space)
    assert str(err).startswith(
        f"a file under {tmp_path / 'run'} or a file under {cache}: cannot write: no space left on the device (ENOSPC)"
    ), err
    err = user_error(
        SafetensorError(
            f'Error while serializing: I/O error: Read-only file system (os error 30) at path "{cache}/.tmpAB"'
        )
    )
    assert str(err).startswith(f"{cache}/.tmpAB: cannot write: the file system is read-only (EROFS)"), err
    assert user_error(RuntimeError("boom")) is None
    try:
        try:
            raise OSError(errno.EFBIG, os.strerror(errno.EFBIG))
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 64 vs 0")
    except RuntimeError as exc:
        err = atomic.disk_error(tmp_path / "last.ckpt", exc)
    assert str(err).startswith(
        f"{tmp_path / 'last.ckpt'}: cannot write: the file-size limit is reached (EFBIG); "
        "raise it (ulimit -f) or choose another location"
    ), err
    quoted = DiskError(f"{cache}: cannot write: [Errno 28] No space left on device")  # ours: kept as it is
    assert user_error(quoted) is quoted
    note_write_roots()


def test_a_log_file_on_a_full_disk_is_one_warning_not_a_traceback_per_record(tmp_path: Path, capsys) -> None:
    import logging

    from vtlab.core.logs import guard_log_files

    handler = logging.FileHandler(tmp_path / "job.log")
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        guard_log_files()
        logging.getLogger("vtlab.test").warning("written")
        handler.stream = io.TextIOWrapper(
            io.BufferedWriter(_FullDisk(os.open(tmp_path / "x", os.O_WRONLY | os.O_CREAT), "w"))
        )
        for _ in range(3):
            logging.getLogger("vtlab.test").warning("lost")
    finally:
        root.removeHandler(handler)
    err = capsys.readouterr().err
    assert "Traceback" not in err and "Logging error" not in err, err
    assert [line for line in err.splitlines() if line.startswith("vtlab")] == [
        (
            f"vtlab: warning: {tmp_path / 'job.log'}: cannot write the log: no space left on the device (ENOSPC); it "
            "stops here, the console keeps the rest"
        )
    ]
    assert (tmp_path / "job.log").read_text().count("written") == 1


def _hydra_cfg(run_dir: Path, callbacks: dict | None = None):
    from omegaconf import OmegaConf

    return OmegaConf.create(
        {"hydra": {"run": {"dir": str(run_dir)}, "sweep": {"dir": str(run_dir)}, "callbacks": callbacks or {}}}
    )


def test_a_run_dir_that_cannot_be_written_is_refused_before_hydra_writes_there(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    from vtlab.runs.writable import RunDirWritable

    run_dir = tmp_path / "runs" / "a"
    RunDirWritable().on_run_start(_hydra_cfg(run_dir))  # writable: passes, and makes nothing (Hydra will)
    assert list(tmp_path.iterdir()) == []
    _read_only(monkeypatch)
    for start in (RunDirWritable().on_run_start, RunDirWritable().on_multirun_start):
        with pytest.raises(SystemExit) as ei:
            start(_hydra_cfg(run_dir))
        assert ei.value.code == 2
        assert capsys.readouterr().err.strip().splitlines() == ["vtlab: error: " + _one_line(run_dir, *READ_ONLY)]
    # stage=export run_dir=R: Hydra's directory moves into R (RunDirInside, a later callback); that one is checked
    inside = {
        "run_dir_inside": {
            "_target_": "vtlab.runs.guard.RunDirInside",
            "source": str(tmp_path / "R"),
            "subdir": "exports/t",
        }
    }
    with pytest.raises(SystemExit):
        RunDirWritable().on_run_start(_hydra_cfg(run_dir, inside))
    assert capsys.readouterr().err.startswith(f"vtlab: error: {tmp_path / 'R' / 'exports' / 't'}: cannot write: ")
