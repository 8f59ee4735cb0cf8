"""A Hydra callback for tests (`+hydra.callbacks.finaliser._target_=run_finaliser.SleepInFinaliser`, tests/ on
PYTHONPATH): once the run has started (vtlab's signal handler installed, status.json written), a garbage collection
runs a `__del__` that touches `marker` and then sleeps in Python code for `seconds`, so that a signal sent when the
marker appears lands inside the finaliser, where Python would only print "Exception ignored in ..."."""

from __future__ import annotations

import gc
import signal
import time
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from vtlab.runs.signals import raise_terminated


class _Cycle:
    """Garbage only a collection frees (it refers to itself), whose finaliser does the sleeping."""

    def __init__(self, marker: Path, status: Path, seconds: float) -> None:
        self.me, self.marker, self.status, self.seconds = self, marker, status, seconds

    def __del__(self) -> None:
        if self.marker.exists():
            return
        if signal.getsignal(signal.SIGTERM) is not raise_terminated or not self.status.exists():
            _Cycle(self.marker, self.status, self.seconds)  # too early: again at a later collection
            return
        gc.set_threshold(700, 10, 10)
        self.marker.touch()
        deadline = time.monotonic() + self.seconds
        while time.monotonic() < deadline:  # Python code: a signal's handler runs here, inside the finaliser
            time.sleep(0.01)


class SleepInFinaliser(Callback):
    def __init__(self, marker: str, seconds: float = 10.0) -> None:
        self.marker, self.seconds = Path(marker), seconds

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        status = Path(str(config.hydra.runtime.output_dir)) / "status.json"
        _Cycle(self.marker, status, self.seconds)
        gc.set_threshold(1, 1, 1)  # a collection at almost every allocation, until the finaliser has run
