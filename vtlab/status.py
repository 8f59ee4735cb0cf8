"""`<run_dir>/status.json`: whether a run is running, done or failed (and why), for sweeps and `vtlab.report`.

A table built from a sweep must show failed and unfinished rows as such, never drop them; this file is how the report
tells a failed job from one that is still running or never started. Format:
{"status": "running" | "done" | "failed", "name": str, "overrides": [str], "started": iso, "finished": iso | null,
 "seconds": float | null, "error": str | null}
"""
from __future__ import annotations

import datetime as _dt
import time
from pathlib import Path
from typing import Any, Sequence

from vtlab.evaluation import write_json
from vtlab.pipeline import one_line, user_error

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


def read_status(run_dir: str | Path) -> dict[str, Any] | None:
    import json

    path = Path(run_dir) / STATUS_FILE
    return json.loads(path.read_text()) if path.is_file() else None
