"""Entry `last_checkpoint`: the checkpoint a killed run resumes from."""

from __future__ import annotations

from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.callbacks import ModelCheckpoint

from vtlab.core.errors import ConfigError
from vtlab.runs import world
from vtlab.runs.signals import agreed, raise_pending, stop_at_step_ends


class LastCheckpoint(ModelCheckpoint):
    """checkpoints/last.ckpt every `every_n_train_steps` steps and when training ends: what a killed run resumes from.

    When a validation runs right after a due step, the save waits for its end: Lightning, restarting from a checkpoint
    written before that validation, counts the validation as done and skips it (the run would then miss a dev score
    and may keep another best checkpoint). The only writer of last.ckpt: the best-by-dev ModelCheckpoint keeps
    save_last off, since two writers make Lightning version each other's file as last-v1.ckpt.

    A signal while training (TERM, INT, HUP, QUIT, USR1, USR2: vtlab.runs.signals) waits for the end of the step under
    way; last.ckpt is then written and the signal raised, so an interrupted run always has a step to resume from. When
    a validation would follow that step the checkpoint is written before it: a resumed run then skips that one
    validation, which is better than nothing to resume from. On several processes the ranks agree at every step's
    end whether any of them received a signal (vtlab.runs.world), so all of them save at the same step and stop
    there, whichever rank it reached; vtlab's handler takes over from the one Lightning installs when a fit starts.
    """

    def __init__(self, dirpath: str, every_n_train_steps: int = 50) -> None:
        if isinstance(every_n_train_steps, bool) or not isinstance(every_n_train_steps, int) or every_n_train_steps < 1:
            raise ConfigError(
                f"callbacks.last_checkpoint.every_n_train_steps={every_n_train_steps!r} must be an integer >= 1"
            )
        super().__init__(dirpath=dirpath, every_n_train_steps=every_n_train_steps, save_top_k=0, save_last=True)
        self._save_after_validation = False

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        stop_at_step_ends(True)

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        signum = agreed(world.current().most)
        if signum is not None:
            if trainer.global_step != self._last_global_step_saved:
                self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))
            raise_pending(signum)
        if _validation_follows(trainer):
            due = trainer.global_step % self._every_n_train_steps == 0
            self._save_after_validation = self._save_after_validation or due
            return
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # after the best-by-dev ModelCheckpoint (listed before): the saved state includes this validation's outcome
        if self._save_after_validation and not trainer.sanity_checking:
            self._save_after_validation = False
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        stop_at_step_ends(False)
        if trainer.global_step != self._last_global_step_saved:  # the final steps since the last multiple of N
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        stop_at_step_ends(False)


def _validation_follows(trainer: pl.Trainer) -> bool:
    """Whether the fit loop validates right after the current training batch (Lightning's own test, read early)."""
    loop = trainer.fit_loop
    return bool(trainer.enable_validation) and loop.epoch_loop._should_check_val_fx(loop._data_fetcher)  # noqa: SLF001
