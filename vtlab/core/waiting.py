"""The progress of a phase that counts nothing while it runs (vtlab.core.progress for the phases that count)."""

from __future__ import annotations

import threading
from typing import Any

from tqdm.auto import tqdm

from vtlab.core import progress
from vtlab.core.progress import LogLines


class Waiting:
    """A phase that counts nothing while it runs (one call that takes minutes: building an index, timing the
    precisions, saving a model): a tqdm line with its elapsed time, redrawn every second, on a terminal; off a terminal
    a log line when it starts (announce=False: none), then `<label>: 1m00s elapsed` once per interval_s() until it
    ends: `with Waiting("indexing 3,825 passages"): ...`"""

    def __init__(self, label: str, show: bool = True, every: float | None = None, announce: bool = True) -> None:
        self.label, self.show, self.every, self.announce = label, show, every, announce
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._shown: Any = None

    def __enter__(self) -> Waiting:
        if not self.show:
            return self
        if progress.interactive():  # the switch every phase's progress reads
            bar = tqdm(total=None, desc=self.label, bar_format="{desc}: {elapsed}", leave=False)
            self._shown, tick, step = bar, bar.refresh, 1.0
        else:
            lines = LogLines(None, "", self.label, self.every)
            if self.announce:  # False: the caller's own line said it starts
                lines.logger.info("%s ...", self.label)
            self._shown, tick, step = lines, lambda: lines.update(0), min(1.0, lines.every) or 0.05

        def ticking() -> None:
            while not self._stop.wait(step):
                tick()

        self._thread = threading.Thread(target=ticking, name="vtlab-waiting", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if isinstance(self._shown, LogLines):
            self._shown.__exit__(kind, None, None)
        elif self._shown is not None:
            self._shown.close()
