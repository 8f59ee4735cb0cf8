"""Training progress: a rich bar on a terminal (without Lightning's "Epoch 0/-2" for a run bounded by steps), log lines
when the output is a file; third-party chatter filtered in one place (vtlab.core.logs)."""

from __future__ import annotations

import logging
import re
import threading
import time
from types import SimpleNamespace

import pytest
from pytorch_lightning.callbacks import RichProgressBar

from vtlab.callbacks import run_estimate
from vtlab.core import logs
from vtlab.core.progress import INTERVAL_ENV
from vtlab.tracking import progress
from vtlab.tracking.progress import LogProgress, StepBoundedRichBar


def _description(bar: RichProgressBar, max_epochs: int) -> str:
    bar._trainer = SimpleNamespace(max_epochs=max_epochs)
    return bar._get_train_description(0).strip()


def test_rich_bar_of_a_step_bounded_run_shows_no_negative_epoch_count():
    assert _description(RichProgressBar(), -1) == "Epoch 0/-2"  # Lightning's own, for max_epochs=-1
    assert _description(StepBoundedRichBar(), -1) == "Epoch 0"
    assert _description(StepBoundedRichBar(), 3) == "Epoch 0/2"


@pytest.mark.parametrize("terminal,kind", [(True, StepBoundedRichBar), (False, LogProgress)])
def test_progress_bar_suits_the_output(monkeypatch, terminal, kind):
    monkeypatch.setattr(progress, "interactive", lambda: terminal)
    assert type(progress.progress_bar()) is kind


class _Trainer(SimpleNamespace):
    """What LogProgress reads of a trainer."""

    def __init__(self, max_steps: int, every_n: int = 10) -> None:
        super().__init__(
            max_steps=max_steps,
            global_step=0,
            log_every_n_steps=every_n,
            estimated_stepping_batches=0,
            progress_bar_metrics={"loss": 0.51234},
            loggers=[],
            is_global_zero=True,
        )


def _lines(bar: LogProgress, trainer: _Trainer, batches: int, caplog, accumulate: int = 1) -> list[str]:
    bar.on_train_start(trainer, None)
    with caplog.at_level(logging.INFO, logger="vtlab"):
        for i in range(batches):
            trainer.global_step = (i + 1) // accumulate
            bar.on_train_batch_end(trainer, None, None, None, i)
        bar.on_train_end(trainer, None)
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("train: ")]


def test_log_progress_writes_a_line_per_tenth_of_the_run_and_at_the_end(caplog):
    lines = _lines(LogProgress(), _Trainer(max_steps=95, every_n=5), 95, caplog)
    assert [line.split(" · ")[0] for line in lines] == [
        *(f"train: step {s}/95 ({100 * s / 95:.0f}%)" for s in range(10, 95, 10)),
        "train: step 95/95 (100%)",
    ]
    assert all(" · loss 0.5123 · " in line and " s/step · " in line and line.endswith(" left") for line in lines)


def test_log_progress_every_n_steps_once_per_optimizer_step(caplog):
    # 4 batches per optimizer step (gradient accumulation): still one line per reported step
    lines = _lines(LogProgress(every=2), _Trainer(max_steps=6), 24, caplog, accumulate=4)
    assert [line.split(" · ")[0] for line in lines] == [f"train: step {s}/6 ({100 * s / 6:.0f}%)" for s in (2, 4, 6)]


def test_quiet_third_party_filters_chatter_on_the_libraries_loggers(monkeypatch, caplog):
    monkeypatch.setattr(logs, "interactive", lambda: True)  # progress bars are not this test's business
    bm25s, rank_zero = logging.getLogger("bm25s"), logging.getLogger("pytorch_lightning.utilities.rank_zero")
    try:
        logs.quiet_third_party()
        logs.quiet_third_party()  # twice: still one filter each
        assert [sum(isinstance(f, logs._Drop) for f in lg.filters) for lg in (bm25s, rank_zero)] == [1, 1]
        monkeypatch.setattr(bm25s, "level", logging.DEBUG)  # what bm25s sets when it is imported
        monkeypatch.setattr(logging.getLogger("pytorch_lightning"), "propagate", True)  # to caplog's root handler
        with caplog.at_level(logging.DEBUG):
            bm25s.debug("Building index from IDs objects")
            bm25s.warning("a real problem")
            rank_zero.info("💡 Tip: ... try installing [litlogger](https://pypi.org/project/litlogger/) ...")
            rank_zero.info("GPU available: False, used: False")
    finally:
        for lg in (bm25s, rank_zero):
            for f in [f for f in lg.filters if isinstance(f, logs._Drop)]:
                lg.removeFilter(f)
    assert [r.getMessage() for r in caplog.records] == ["a real problem", "GPU available: False, used: False"]


def test_log_progress_also_writes_a_line_once_an_interval_has_passed(monkeypatch, caplog):
    """A tenth of a long run can be an hour: a step that ends an interval after the last line gets one too
    (VTLAB_PROGRESS_INTERVAL=0: every step)."""
    monkeypatch.setenv(INTERVAL_ENV, "0")
    lines = _lines(LogProgress(), _Trainer(max_steps=95, every_n=5), 95, caplog)
    steps = [line.split(" · ")[0] for line in lines]
    assert steps == [f"train: step {s}/95 ({100 * s / 95:.0f}%)" for s in range(1, 96)]


def test_a_step_still_running_after_an_interval_gets_a_line_and_the_line_stops_with_training(monkeypatch, caplog):
    """Off a terminal a step longer than the interval (a busy machine) still gives a line per interval: the heartbeat
    thread's, which says how long the run has been in it; none once training ended."""
    monkeypatch.setenv(INTERVAL_ENV, "0")  # the heartbeat still waits a second between its lines
    bar, trainer = LogProgress(), _Trainer(max_steps=10)
    with caplog.at_level(logging.INFO, logger="vtlab"):
        bar.on_train_start(trainer, None)
        trainer.global_step = 1
        bar.on_train_batch_end(trainer, None, None, None, 0)  # step 1 ends; step 2 never does
        deadline = time.monotonic() + 120  # the line comes after ~1 s; the bound only keeps a broken build finite
        while not any("since the last step" in r.getMessage() for r in caplog.records):
            assert time.monotonic() < deadline, "no heartbeat line"
            time.sleep(0.05)
        bar.on_train_end(trainer, None)
        beats = [r.getMessage() for r in caplog.records if "since the last step" in r.getMessage()]
        assert re.fullmatch(r"train: step 1/10 · \d+s since the last step", beats[0]), beats[0]
    assert not any(t.name == "vtlab-train-heartbeat" for t in threading.enumerate())  # ended with training


class _FitTrainer(_Trainer):
    """What RunEstimate reads of a trainer: a 100-step run of batches of 8, dev every 25 batches."""

    def __init__(self) -> None:
        super().__init__(max_steps=100)
        self.max_epochs, self.accumulate_grad_batches, self.val_check_interval = -1, 1, 25
        self.enable_validation, self.limit_val_batches, self.sanity_checking = True, 1.0, False
        self.datamodule = SimpleNamespace(batch_size=8)


def test_the_run_says_its_size_then_its_length_once_a_step_and_a_dev_evaluation_are_timed(monkeypatch, caplog):
    clock = SimpleNamespace(now=0.0)
    monkeypatch.setattr(run_estimate.time, "perf_counter", lambda: clock.now)
    trainer, cb = _FitTrainer(), run_estimate.RunEstimate()
    with caplog.at_level(logging.INFO, logger="vtlab"):
        cb.on_train_start(trainer, None)
        clock.now += 9.0  # the first step pays one-off costs
        trainer.global_step = 1
        cb.on_train_batch_end(trainer, None, None, None, 0)
        cb.on_validation_start(trainer, None)  # a dev evaluation between the two timed steps: not a step's time
        clock.now += 30.0
        cb.on_validation_end(trainer, None)
        for step in (2, 3):
            clock.now += 2.0
            trainer.global_step = step
            cb.on_train_batch_end(trainer, None, None, None, step - 1)
        cb.on_validation_start(trainer, None)
        clock.now += 30.0
        cb.on_validation_end(trainer, None)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("train: ")]
    assert lines == [
        "train: 100 steps of 8 triplets, dev every 25 batches",
        # step 1 → 2 took 2 s: 98 steps left
        "train: a step takes 2 s on this machine: ~3m16s for the 98 steps left, dev evaluations not counted (the first "
        "one is timed)",
        # 97 steps left: 194 s of steps and 3 dev evaluations of 30 s
        "train: a dev evaluation takes 30s: ~4m44s for the 97 steps left and 3 dev evaluations",
    ]
