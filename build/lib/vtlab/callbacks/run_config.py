"""Entry `run_config`: the run's resolved config to every logger, and where a resumable CSV log takes up."""

from __future__ import annotations

from typing import Any

import pytorch_lightning as pl

from vtlab.tracking.loggers import log_run_config
from vtlab.tracking.resumable_csv import ResumableCSVLogger


class RunConfigLogger(pl.Callback):
    """Logs the run's full resolved config (`config`) to every logger when fitting starts (wandb config, CSV
    hparams.yaml), and tells a ResumableCSVLogger where training (re)starts, at its first batch, and ends (a resume
    keeps the earlier rows of the steps before its checkpoint)."""

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        # filled by the fine-tune stage (vtlab.tracking.loggers.resolved_config); None: nothing logged
        self.config = config
        self._started = True

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit":
            self._started = False
            for lg in _resumable(trainer):
                lg.hold_until_training()
            log_run_config(list(trainer.loggers), self.config)

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if not self._started:
            self._starts(trainer)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not self._started:  # resumed from the final checkpoint: no batch was left
            self._starts(trainer)
        for lg in _resumable(trainer):
            lg.training_ends()

    def _starts(self, trainer: pl.Trainer) -> None:
        # the step Lightning logs the first batch at: 0 for a fresh run, the one after the checkpoint's for a resume
        # (read at the first batch: Lightning advances its logging step for a restored loop only once it runs)
        self._started = True
        step = trainer.fit_loop.epoch_loop._batches_that_stepped  # noqa: SLF001 - Lightning's own logging step
        for lg in _resumable(trainer):
            lg.training_starts(step)


def _resumable(trainer: pl.Trainer) -> list[ResumableCSVLogger]:
    return [lg for lg in trainer.loggers if isinstance(lg, ResumableCSVLogger)]
