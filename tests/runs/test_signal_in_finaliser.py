"""A signal is never lost: one that lands while Python runs a finaliser (`__del__` during a garbage collection),
where an exception is only printed as "Exception ignored in ...", still stops the run with its exit code, its one
line and status.json "interrupted" (vtlab.runs.signals)."""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import TESTS, child_env, start_vtlab

from vtlab.runs import signals
from vtlab.runs.signals import Terminated, catch_signals

CHEAP = ["stage=evaluate", "eval=none", "logger=none", "baseline=false", "vocab=native", "apc=off"]


@pytest.fixture
def caught_signals():
    saved = {s: signal.getsignal(s) for s in signals.CAUGHT}
    hook = sys.unraisablehook
    catch_signals()
    yield
    for s, handler in saved.items():
        signal.signal(s, handler)
    sys.unraisablehook = hook
    signals.heeded()


class _RaisesInFinaliser:
    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGUSR2)  # the handler runs at the next bytecode: inside this finaliser
        for _ in range(1000):
            pass


def test_a_signal_raised_in_a_finaliser_is_raised_again_outside_it(caught_signals) -> None:
    _RaisesInFinaliser()
    with pytest.raises(Terminated) as raised:
        gc.collect()
        for _ in range(1000):  # the delivered-again signal is raised here, after the collection
            time.sleep(0.001)
    assert raised.value.signum == signal.SIGUSR2


def test_a_signal_no_step_acted_on_is_raised_before_the_run_says_done(caught_signals) -> None:
    signals._received.append(int(signal.SIGHUP))  # noqa: SLF001 - as if its Terminated had been swallowed
    with pytest.raises(Terminated) as raised:
        signals.raise_unheeded()
    assert raised.value.signum == signal.SIGHUP
    signals.raise_unheeded()  # acted on once: nothing left


@pytest.mark.cli
@pytest.mark.slow
def test_sigterm_during_a_finaliser_stops_the_run_with_its_line_code_and_status(tmp_path: Path) -> None:
    run_dir, marker, log = tmp_path / "run", tmp_path / "in-finaliser", tmp_path / "stderr.log"
    with open(log, "w") as f:
        proc = start_vtlab(
            *CHEAP,
            f"hydra.run.dir={run_dir}",
            "+hydra.callbacks.finaliser._target_=run_finaliser.SleepInFinaliser",
            f"+hydra.callbacks.finaliser.marker={marker}",
            env=child_env(TESTS),  # tests/ on the path for run_finaliser
            stdout=subprocess.DEVNULL,
            stderr=f,
        )
    deadline = time.monotonic() + 300
    while not marker.exists():
        assert proc.poll() is None, f"the run ended before its finaliser ran: {log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, "no finaliser after 300 s"
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    rc = proc.wait(timeout=120)
    stderr = log.read_text()
    assert rc == 143, stderr[-3000:]
    assert stderr.strip().splitlines()[-1].startswith("vtlab: interrupted by SIGTERM (exit 143);"), stderr[-3000:]
    assert "Exception ignored" not in stderr, stderr[-3000:]
    status = json.loads((run_dir / "status.json").read_text())
    assert status["status"] == "interrupted" and status["error"] == "interrupted by SIGTERM", status
