"""Progress of a long phase (encoding a corpus, scoring teacher triplets, exporting vectors, searching) that suits
where the output goes: a tqdm bar on a terminal; off a terminal (SLURM, a pipe), where a redrawn bar would fill the
log with carriage-return frames, one log line per interval and one at the end, e.g.
`encoding corpus: 1,200/3,825 passages (31%), 2m10s elapsed, ~4m50s left` (vtlab.core.logs decides which).

`counted` wraps a loop over batches in one; vtlab.core.waiting.Waiting is the progress of a phase that counts nothing
while it runs (a line per interval with the time it has taken). The interval is `VTLAB_PROGRESS_INTERVAL` seconds
(default 30; 0 logs every update). Training's progress is its own (vtlab.tracking.progress: a line per tenth of the
steps, and at least one per interval)."""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Iterable, Iterator
from types import TracebackType
from typing import Any, Protocol, TypeVar

from tqdm.auto import tqdm

from vtlab.core.errors import VtlabError
from vtlab.core.logs import interactive

INTERVAL_ENV = "VTLAB_PROGRESS_INTERVAL"
DEFAULT_INTERVAL_S = 30.0
# an encoder's side → (what its progress lines say, the unit counted)
SIDES: dict[str, tuple[str, str]] = {"query": ("encoding queries", "queries"), "doc": ("encoding corpus", "passages")}

log = logging.getLogger("vtlab")
T = TypeVar("T")


class Progress(Protocol):
    """What every progress object does (a tqdm bar, LogLines, or one that shows nothing)."""

    def update(self, n: int = 1) -> Any: ...

    def close(self) -> None: ...

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc: Any) -> Any: ...


def interval_s() -> float:
    """Seconds between two progress lines: `VTLAB_PROGRESS_INTERVAL`, else DEFAULT_INTERVAL_S."""
    raw = os.environ.get(INTERVAL_ENV)
    if raw is None or not raw.strip():
        return DEFAULT_INTERVAL_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise VtlabError(f"{INTERVAL_ENV}={raw!r}: expected a number of seconds >= 0")
    return value


def duration(seconds: float) -> str:
    """`1h02m`, `4m50s` or `7s`."""
    minutes, s = divmod(int(round(seconds)), 60)
    h, m = divmod(minutes, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s" if m else f"{s}s"


class LogLines:
    """Counts what a phase has done and logs `<label>: done/total unit (pct%), elapsed, ~left` at most once per
    `every` seconds of `clock` (None: interval_s()), and once more when it closes without an error after at least
    one interval (a phase shorter than that logs nothing). `total` None: an unknown total (no share, no time left)."""

    def __init__(
        self,
        total: int | None,
        unit: str,
        label: str,
        every: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        logger: logging.Logger = log,
    ) -> None:
        self.total, self.unit, self.label = total, unit, label
        self.every = interval_s() if every is None else float(every)
        self.clock, self.logger = clock, logger
        self.done = 0
        self._start = self._last = clock()
        self._closed = False

    def update(self, n: int = 1) -> None:
        self.done += int(n)
        now = self.clock()
        if now - self._last >= self.every and (self.total is None or self.done < self.total):
            self._last = now  # the line at the total is close()'s
            self.logger.info("%s", self.line(now))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        now = self.clock()
        if now - self._start >= self.every:  # a phase shorter than one interval says nothing
            self.logger.info("%s", self.line(now))

    def line(self, now: float) -> str:
        elapsed = now - self._start
        total = self.total
        if total:
            parts = [f"{self.done:,}/{total:,} {self.unit} ({int(100 * self.done / total)}%)"]
        else:  # no unit: a phase that counts nothing (Waiting), its time alone
            parts = [f"{self.done:,} {self.unit}"] if self.unit else []
        parts.append(f"{duration(elapsed)} elapsed")
        if total and 0 < self.done < total:
            parts.append(f"~{duration(elapsed / self.done * (total - self.done))} left")
        return f"{self.label}: {', '.join(parts)}"

    def __enter__(self) -> LogLines:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        if kind is None:
            self.close()  # a failed phase ends with its error, not with a line that reads like its end
        self._closed = True


def progress(total: int | None, unit: str, label: str, show: bool = True) -> Progress:
    """The progress of a phase of `total` `unit`: a tqdm bar on a terminal, LogLines off a terminal, nothing with
    show=False. Use it as a context manager, or call close()."""
    if show and not interactive():
        return LogLines(total, unit, label)
    return tqdm(total=total, desc=label, unit=unit, disable=not show, leave=False)


def counted(
    items: Iterable[T],
    total: int | None,
    unit: str,
    label: str,
    show: bool = True,
    size: Callable[[T], int] = lambda _item: 1,
) -> Iterator[T]:
    """`items`, each counted as `size(item)` `unit` once the caller is done with it, on a progress (`progress`) that
    closes when they run out."""
    with progress(total, unit, label, show) as bar:
        for item in items:
            yield item
            bar.update(size(item))


def encoding(side: str, total: int, show: bool = True) -> Progress:
    """The progress of encoding `total` texts of `side` ("query" or "doc")."""
    label, unit = SIDES.get(side, (f"encoding {side}", "texts"))
    return progress(total, unit, label, show)
