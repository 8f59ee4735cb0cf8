"""A trainer with no checkpoint to write stops where every rank agrees (the MLM adaptation, cached once complete)."""

from __future__ import annotations

from typing import Any

import pytorch_lightning as pl

from vtlab.runs import world
from vtlab.runs.signals import agreed, raise_pending, stop_at_step_ends


class AgreedStop(pl.Callback):
    """A signal while training waits for the end of the step under way; the ranks then agree whether any of them
    received one (vtlab.runs.world), and every rank raises it at that same step: no rank is left waiting in a
    collective the others never reach. vtlab's handler takes over from the one Lightning installs for the fit."""

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        stop_at_step_ends(True)

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        raise_pending(agreed(world.current().most))

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        stop_at_step_ends(False)

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        stop_at_step_ends(False)
