"""Training progress that suits where the output goes (conf/callbacks/progress_bar.yaml): Lightning's rich bar on a
terminal; one log line per interval when the output is a file (SLURM, a pipe), which a redrawn bar would fill with
carriage-return frames (vtlab.core.logs decides which)."""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.callbacks import ProgressBar, RichProgressBar

from vtlab.core.logs import interactive
from vtlab.core.progress import duration, interval_s

log = logging.getLogger("vtlab")


def progress_bar(every: int | None = None) -> ProgressBar:
    """The rich bar on a terminal, else LogProgress(every)."""
    return StepBoundedRichBar() if interactive() else LogProgress(every)


class StepBoundedRichBar(RichProgressBar):
    """Lightning's rich bar, except that a run bounded by steps alone (max_epochs=-1) reads "Epoch 0", not
    "Epoch 0/-2"."""

    def _get_train_description(self, current_epoch: int) -> str:
        max_epochs = self.trainer.max_epochs
        if max_epochs is None or max_epochs >= 0:
            return super()._get_train_description(current_epoch)
        return f"{f'Epoch {current_epoch}':{len(self.validation_description)}}"  # padded like Lightning's


class LogProgress(ProgressBar):
    """One log line every `every` optimizer steps, at the last one, and after any step that ends an interval_s() after
    the last line (vtlab.core.progress): the step, the share of the run, the metrics
    the model shows on a progress bar (loss, the dev metric), the speed and the time left. `every=None`: a tenth of
    the run, at least `trainer.log_every_n_steps`. A step still running an interval after the last line (a busy
    machine, a slow CPU, a dev evaluation) gets a line of its own from a thread that only reads the clock and the step
    count."""

    def __init__(self, every: int | None = None) -> None:
        super().__init__()
        self.every = every
        self._enabled = True
        self._reported = -1
        self._start: tuple[float, int] = (0.0, 0)  # (time, step) training started (or resumed) at
        self._total: int | None = None  # optimizer steps of the whole run; None: unbounded
        self._last_line = 0.0  # when the last line was logged
        self._stepped, self._step_began = -1, 0.0  # the last optimizer step seen, and when it ended
        self._quiet: threading.Event | None = None  # set: the heartbeat thread stops
        self._beating = threading.Thread()  # the heartbeat thread

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._start = (time.perf_counter(), trainer.global_step)
        self._last_line = self._start[0]
        self._reported = trainer.global_step  # nothing to report before the first optimizer step
        total = trainer.max_steps if trainer.max_steps > 0 else trainer.estimated_stepping_batches
        self._total = int(total) if math.isfinite(total) else None
        self._stepped, self._step_began = trainer.global_step, self._start[0]
        self._beat(trainer)

    def _beat(self, trainer: pl.Trainer) -> None:
        """Start the thread that says a step is still running (at most one a second, once per interval_s())."""
        self._stop_beat()
        self._quiet = quiet = threading.Event()

        def beating() -> None:
            while not quiet.wait(max(1.0, interval_s())):
                now = time.perf_counter()
                if self._enabled and now - self._last_line >= max(1.0, interval_s()):
                    self._last_line = now
                    step = trainer.global_step
                    done = f"step {step}/{self._total}" if self._total else f"step {step}"
                    log.info("train: %s · %s since the last step", done, duration(now - self._step_began))

        self._beating = threading.Thread(target=beating, name="vtlab-train-heartbeat", daemon=True)
        self._beating.start()

    def _stop_beat(self) -> None:
        if self._quiet is not None:
            self._quiet.set()  # wakes the thread's wait: it ends at once
            self._beating.join()
            self._quiet = None

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._stop_beat()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self._stop_beat()

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._stop_beat()

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        step, total = trainer.global_step, self._total
        if step != self._stepped:
            self._stepped, self._step_began = step, time.perf_counter()
        if not self._enabled or step == self._reported:
            return  # no optimizer step since the last line (gradient accumulation: several batches per step)
        every = self.every or max(int(trainer.log_every_n_steps), math.ceil(total / 10) if total else 1)
        due = time.perf_counter() - self._last_line >= interval_s()  # a long run's tenth is not an hour of silence
        if step % every and step != total and not due:
            return
        self._reported, self._last_line = step, time.perf_counter()
        log.info("train: %s", self._line(trainer, pl_module, step, total))

    def _line(self, trainer: pl.Trainer, pl_module: pl.LightningModule, step: int, total: int | None) -> str:
        parts = [f"step {step}/{total} ({100 * step / total:.0f}%)" if total else f"step {step}"]
        metrics = {k: v for k, v in self.get_metrics(trainer, pl_module).items() if k != "v_num"}
        parts += [f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in metrics.items()]
        t0, step0 = self._start
        if step > step0:
            per_step = (time.perf_counter() - t0) / (step - step0)
            parts.append(f"{per_step:.3g} s/step")
            if total:
                parts.append(f"{duration(per_step * (total - step))} left")
        return " · ".join(parts)
