"""A Hydra callback for tests (`+hydra.callbacks.pause._target_=run_pause.WaitForFile`, tests/ on PYTHONPATH): a run
stops at on_job_start — after Hydra has written `.hydra/` into its run directory, before the pipeline runs — until a
file appears. It widens, on demand, the moment a second process could slip into the directory, so the run-directory
lock is tested against the worst timing every time instead of by luck."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig


class WaitForFile(Callback):
    def __init__(self, path: str, timeout: float = 120.0) -> None:
        self.path, self.timeout = Path(path), timeout

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        Path(f"{self.path}.reached").touch()  # tells the test this run got this far
        deadline = time.monotonic() + self.timeout
        while not self.path.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
