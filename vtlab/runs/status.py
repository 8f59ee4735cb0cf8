"""`<run_dir>/status.json`: whether a run is running, done or failed (and why), for sweeps and `vtlab.report`.

A table built from a sweep must show failed and unfinished rows as such, never drop them; this file is how the report
tells a failed job from one that is still running or never started. Format:
{"status": "running" | "done" | "failed" | "interrupted", "name": str, "overrides": [str], "started": iso, "finished": iso | null,
 "seconds": float | null, "error": str | null}
"""
from __future__ import annotations

import datetime as _dt
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from hydra.experimental.callback import Callback
from omegaconf import DictConfig
from pytorch_lightning.utilities.exceptions import SIGTERMException

from vtlab.atomic import write_json
from vtlab.errors import one_line, user_error

STATUS_FILE = "status.json"


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


class RunStatus:
    def __init__(self, run_dir: str | Path, name: str, overrides: Sequence[str] = ()) -> None:
        self.path = Path(run_dir) / STATUS_FILE
        self.record: dict[str, Any] = {"status": "running", "name": name, "overrides": list(overrides),
                                       "started": _now(), "finished": None, "seconds": None, "error": None}
        self._t0 = time.perf_counter()

    def _write(self, **update: Any) -> None:
        self.record.update(update)
        write_json(self.path, self.record)

    def start(self) -> None:
        self._write()

    def done(self) -> None:
        self._write(status="done", finished=_now(), seconds=round(time.perf_counter() - self._t0, 1))

    def fail(self, exc: BaseException) -> None:
        self._write(status="failed", finished=_now(), seconds=round(time.perf_counter() - self._t0, 1),
                    error=describe(exc))

    def interrupted(self, signum: int) -> None:
        self._write(status="interrupted", finished=_now(), seconds=round(time.perf_counter() - self._t0, 1),
                    error=f"interrupted by {signal.Signals(signum).name}")


# ---- signals: an interrupted run exits 128 + signal number, like a shell reports a process killed by it ----------


class Terminated(BaseException):
    """SIGTERM, raised where the process is (like KeyboardInterrupt for SIGINT): a BaseException, so no `except
    Exception` on the way swallows it, and Lightning's fit tears down and re-raises it."""

    signum = signal.SIGTERM


def raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated()


def interrupting_signal(exc: BaseException) -> int | None:
    """The signal behind `exc`, if it is (or was raised while handling) an interruption: SIGINT for Ctrl-C (also after
    Lightning turned it into `sys.exit(1)`), SIGTERM for Terminated or Lightning's SIGTERMException (a SystemExit
    without a code, which would otherwise exit 0)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, KeyboardInterrupt):
            return int(signal.SIGINT)
        if isinstance(seen, (Terminated, SIGTERMException)):
            return int(signal.SIGTERM)
        seen = seen.__cause__ or seen.__context__
    return None


def exit_code(exc: BaseException) -> int:
    """The exit status `python -m vtlab` ends with when a run raises `exc`: 128 + signal for an interruption, 2 for a
    user error (vtlab.pipeline.run_or_exit), a SystemExit's own code, else 1."""
    signum = interrupting_signal(exc)
    if signum is not None:
        return 128 + signum
    if isinstance(exc, SystemExit):
        return exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    return 2 if isinstance(exc, Exception) and user_error(exc) is not None else 1


def interrupted_line(signum: int, run_dir: str | Path) -> str:
    return (f"vtlab: interrupted by {signal.Signals(signum).name} (exit {128 + signum}); {run_dir} keeps what was "
            "written: rerun the same command to resume from its last checkpoint")


class SweepExitCode(Callback):
    """Hydra callback (conf/config.yaml `hydra.callbacks`): a sweep runs all its jobs even when one fails (each failed
    job's status.json says why), then exits 1 if any job did not finish, so a scheduler or `&&` sees the failure."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep = Path(str(config.hydra.sweep.dir))
        jobs = sorted((p.parent for p in sweep.glob("*/.hydra")), key=lambda p: p.name)
        states = {job.name: _state(job) for job in jobs}
        bad = [f"{name} ({state})" for name, state in states.items() if state != "done"]
        if bad:
            print(f"vtlab: error: {len(bad)} of {len(jobs)} jobs of the sweep {sweep} did not finish: "
                  f"{', '.join(bad[:10])}{' …' if len(bad) > 10 else ''}; their status.json says why "
                  f"(python -m vtlab.report {sweep})", file=sys.stderr)
            sys.exit(1)


def describe(exc: BaseException) -> str:
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
    path = Path(run_dir) / STATUS_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def job_dirs(sweep: Path) -> list[Path]:
    """Direct children with a `.hydra/` folder (vtlab's `hydra.sweep.subdir` is the job number)."""
    return sorted((p for p in sweep.iterdir() if (p / ".hydra").is_dir()),
                  key=lambda p: (not p.name.isdigit(), int(p.name) if p.name.isdigit() else 0, p.name))
