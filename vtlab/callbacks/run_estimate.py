"""Entry `run_estimate`: the run's size before it starts, and its length on this machine once a step is measured.

When fitting starts, one line says what the run will do (`train: 300 steps of 16 triplets, dev every 100 steps`);
after its second optimizer step (the first pays one-off costs: allocation, kernel choice), one line says what a step
takes here and what the steps take in all; after the first dev evaluation, one line adds the dev evaluations to it."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytorch_lightning as pl

from vtlab.core.progress import duration
from vtlab.runs.steps import training_size

log = logging.getLogger("vtlab")


def dev_evaluations(trainer: pl.Trainer, steps: int) -> int:
    """How many dev evaluations `steps` optimizer steps make (an integer val_check_interval of batches)."""
    every = trainer.val_check_interval
    if not getattr(trainer, "enable_validation", trainer.limit_val_batches) or not isinstance(every, int) or every <= 0:
        return 0
    return steps * trainer.accumulate_grad_batches // every


class RunEstimate(pl.Callback):
    """Logs the run's size at the start and its estimated length once a step (then a dev evaluation) is measured."""

    def __init__(self) -> None:
        self._stepped: list[tuple[int, float]] = []  # (optimizer step, when it ended): the first two
        self._per_step: float | None = None
        self._dev_start: float | None = None
        self._dev_told = False

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.is_global_zero:
            return  # one process says it
        batch = getattr(getattr(trainer, "datamodule", None), "batch_size", None)
        dev = trainer.val_check_interval if getattr(trainer, "enable_validation", trainer.limit_val_batches) else None
        size = training_size(trainer.max_steps, trainer.max_epochs, batch, trainer.accumulate_grad_batches, dev)
        log.info("train: %s%s", size, f", from step {trainer.global_step:,}" if trainer.global_step else "")

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if not trainer.is_global_zero or self._per_step is not None:
            return
        if self._stepped and self._stepped[-1][0] == trainer.global_step:
            return  # no optimizer step since the last batch (gradient accumulation)
        self._stepped.append((trainer.global_step, time.perf_counter()))
        if len(self._stepped) < 2 or trainer.max_steps <= 0:
            return
        (s0, t0), (s1, t1) = self._stepped
        self._per_step = (t1 - t0) / (s1 - s0)
        left = trainer.max_steps - trainer.global_step
        log.info(
            "train: a step takes %.3g s on this machine: ~%s for the %s steps left%s",
            self._per_step,
            duration(self._per_step * left),
            f"{left:,}",
            ", dev evaluations not counted (the first one is timed)" if dev_evaluations(trainer, left) else "",
        )

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._dev_start = time.perf_counter()

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._dev_start is None:
            return
        dev_s, self._dev_start = time.perf_counter() - self._dev_start, None
        if len(self._stepped) == 1:  # between the two timed steps: not a step's time
            self._stepped[0] = (self._stepped[0][0], self._stepped[0][1] + dev_s)
        if self._dev_told or self._per_step is None or not trainer.is_global_zero:
            return
        self._dev_told = True
        left = trainer.max_steps - trainer.global_step
        devs = dev_evaluations(trainer, left)
        log.info(
            "train: a dev evaluation takes %s: ~%s for the %s steps left and %d dev evaluation%s",
            duration(dev_s),
            duration(self._per_step * left + dev_s * devs),
            f"{left:,}",
            devs,
            "" if devs == 1 else "s",
        )
