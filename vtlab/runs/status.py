"""`<run_dir>/status.json`: whether a run is running, done or failed (and why), for sweeps and `vtlab.report`.

A table built from a sweep must show failed and unfinished rows as such, never drop them; this file is how the report
tells a failed job from one that is still running or never started. Format:
{"status": "running" | "done" | "failed" | "interrupted", "name": str, "overrides": [str], "started": iso,
 "finished": iso | null,
 "seconds": float | null, "error": str | null}
While a run is running, `.status.reserve` beside it holds RESERVE bytes: room for the final record on a disk that fills
up (deleted to make that room, and when the run ends).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from vtlab.core.atomic import atomic_write, atomic_write_bytes, write_json
from vtlab.core.errors import DiskError, disk_problem, one_line, user_error
from vtlab.core.json_files import read_json
from vtlab.runs.signals import interrupting_signal

STATUS_FILE = "status.json"
# Room kept beside status.json from the start (RESERVE_FILE): when the disk filled up during the run and the usual
# write (a temp file renamed into place) fails, deleting it frees the blocks the final record (finished, seconds, an
# error line of up to 2000 characters) needs
RESERVE = 8192
RESERVE_FILE = ".status.reserve"


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


class RunStatus:
    def __init__(self, run_dir: str | Path, name: str, overrides: Sequence[str] = ()) -> None:
        self.path = Path(run_dir) / STATUS_FILE
        self.reserve = Path(run_dir) / RESERVE_FILE
        self.record: dict[str, Any] = {
            "status": "running",
            "name": name,
            "overrides": list(overrides),
            "started": _now(),
            "finished": None,
            "seconds": None,
            "error": None,
        }
        self._t0 = time.perf_counter()

    def _text(self) -> str:
        return json.dumps(self.record, indent=2) + "\n"

    def _write(self, **update: Any) -> None:
        """The record, atomically; on a full disk again once the reserve is deleted, else over the file's own bytes in
        place. DiskError (naming status.json) when nothing works."""
        self.record.update(update)
        try:
            write_json(self.path, self.record)  # a full, read-only, ... disk: a DiskError naming status.json
        except DiskError:
            if self._release_reserve():
                try:
                    write_json(self.path, self.record)
                    return
                except DiskError:
                    pass
            if not self._overwrite_in_place():
                raise

    def _release_reserve(self) -> bool:
        """Delete the reserve (its blocks become free); whether there was one."""
        try:
            self.reserve.unlink()
            return True
        except OSError:
            return False

    def _overwrite_in_place(self) -> bool:
        """Write the record over the existing file's own bytes (no truncation, no new file): on a full disk this needs
        no block the file does not have already. Whether it worked."""
        try:
            fd = os.open(self.path, os.O_WRONLY)  # neither O_TRUNC nor O_CREAT: keep the blocks it has
        except OSError:
            return False
        try:
            size = os.fstat(fd).st_size
            data = self._fitted(size)
            if data is None:
                return False
            written = 0
            while written < len(data):
                written += os.pwrite(fd, data[written:], written)
            os.fsync(fd)
            return True
        except OSError:
            return False
        finally:
            os.close(fd)

    def _fitted(self, size: int) -> bytes | None:
        """The record as exactly `size` bytes (padded with spaces; the error line shortened if it must be)."""
        record = dict(self.record)
        data = json.dumps(record, indent=2).encode()
        overflow = len(data) + 1 - size
        if overflow > 0 and isinstance(record.get("error"), str):
            record["error"] = record["error"][: max(0, len(record["error"]) - overflow - 1)] + "…"
            data = json.dumps(record, separators=(",", ":")).encode()
        if len(data) + 1 > size:
            return None
        return data.ljust(size - 1) + b"\n"

    def _finish(self, **update: Any) -> None:
        """The final record; when even that cannot be written, one line on stderr naming status.json says so (the
        run's own error, already reported, keeps its exit code)."""
        try:
            self._write(**update)
            self._release_reserve()
        except DiskError as err:
            print(
                f"vtlab: error: {self.path}: could not record the run as {update['status']!r}, it still says "
                f"'running': {_what(err)}",
                file=sys.stderr,
            )

    def start(self) -> None:
        """The running record, and RESERVE bytes of room beside it (RESERVE_FILE); a DiskError when the run dir cannot
        take them."""
        atomic_write(self.path, lambda f: f.write(self._text()))
        atomic_write_bytes(self.reserve, lambda f: f.write(b"\0" * RESERVE))

    def done(self) -> None:
        """DiskError when status.json cannot say so: the run's results are written, but a sweep would count it
        unfinished."""
        self._write(status="done", finished=_now(), seconds=round(time.perf_counter() - self._t0, 1))
        self._release_reserve()

    def fail(self, exc: BaseException) -> None:
        self._finish(
            status="failed", finished=_now(), seconds=round(time.perf_counter() - self._t0, 1), error=error_line(exc)
        )

    def interrupted(self, signum: int) -> None:
        self._finish(
            status="interrupted",
            finished=_now(),
            seconds=round(time.perf_counter() - self._t0, 1),
            error=f"interrupted by {signal.Signals(signum).name}",
        )


def _what(err: DiskError) -> str:
    """What a DiskError says happened: "no space left on the device (ENOSPC)"."""
    problem = disk_problem(err.__cause__) if err.__cause__ is not None else None
    return f"{problem[0]} ({problem[1]})" if problem else str(err)


def exit_code(exc: BaseException) -> int:
    """The exit status `python -m vtlab` ends with when a run raises `exc`: 128 + signal for an interruption, 2 for a
    user error (vtlab.stages.pipeline.run_or_exit), a SystemExit's own code, else 1."""
    signum = interrupting_signal(exc)
    if signum is not None:
        return 128 + signum
    if isinstance(exc, SystemExit):
        return exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    return 2 if isinstance(exc, Exception) and user_error(exc) is not None else 1


class SweepExitCode(Callback):
    """Hydra callback (conf/config.yaml `hydra.callbacks`): a sweep runs all its jobs even when one fails (each failed
    job's status.json says why), then exits 1 if any job did not finish, so a scheduler or `&&` sees the failure."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep = Path(str(config.hydra.sweep.dir))
        jobs = sorted((p.parent for p in sweep.glob("*/.hydra")), key=lambda p: p.name)
        states = {job.name: _state(job) for job in jobs}
        bad = [f"{name} ({state})" for name, state in states.items() if state != "done"]
        if bad:
            print(
                f"vtlab: error: {len(bad)} of {len(jobs)} jobs of the sweep {sweep} did not finish: "
                f"{', '.join(bad[:10])}{' …' if len(bad) > 10 else ''}; their status.json says why "
                f"(python -m vtlab.report {sweep})",
                file=sys.stderr,
            )
            sys.exit(1)


def error_line(exc: BaseException) -> str:
    """One line: the user-facing error behind `exc` (run_or_exit exits from inside its except block, so a SystemExit's
    context is the original error), else the exception's type and message."""
    for candidate in (exc, exc.__context__):
        if candidate is None:
            continue
        err = user_error(candidate)
        if err is not None:
            return one_line(err).removeprefix("vtlab: error: ")
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:2000]


def _state(job: Path) -> str:
    try:
        return str((read_status(job) or {}).get("status", "no status.json"))
    except (OSError, ValueError):
        return "unreadable status.json"


def read_status(run_dir: str | Path) -> dict[str, Any] | None:
    """The run's status record, None without status.json; JsonFileError (a ValueError) when it is unreadable or no
    JSON object, which its readers count as a run that did not finish."""
    path = Path(run_dir) / STATUS_FILE
    return read_json(path, dict, "a run's status record") if path.is_file() else None


def job_dirs(sweep: Path) -> list[Path]:
    """Direct children with a `.hydra/` folder (vtlab's `hydra.sweep.subdir` is the job number)."""
    return sorted(
        (p for p in sweep.iterdir() if (p / ".hydra").is_dir()),
        key=lambda p: (not p.name.isdigit(), int(p.name) if p.name.isdigit() else 0, p.name),
    )
