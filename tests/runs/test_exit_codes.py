"""Honest process state: a run stopped by a signal exits 128 + signal (130 for Ctrl-C, 143 for SIGTERM, 129 for a
dropped ssh session's SIGHUP, 131 for SIGQUIT) with one line saying what a rerun does for its stage, and status.json
"interrupted"; a sweep with a failed job exits non-zero after running all its jobs."""

from __future__ import annotations

import io
import json
import logging
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import run_vtlab, said, start_vtlab
from omegaconf import OmegaConf

from vtlab.bench.tiny_runs import TINY_FINETUNE
from vtlab.runs import signals
from vtlab.runs.signals import CAUGHT, catch_signals, interrupting_signal, raise_terminated
from vtlab.runs.status import SweepExitCode

_TRAIN = [
    *TINY_FINETUNE,
    "stage=finetune",
    "trainer.max_steps=400",
    "trainer.val_check_interval=400",
    "callbacks.last_checkpoint.every_n_train_steps=1",
]
_EVAL = ["backbone=splade-tiny", "vocab=native", "apc=off", "baseline=false", "logger=none", "stage=evaluate"]


def _start(overrides: list[str], run_dir: Path, log: Path) -> subprocess.Popen:
    with open(log, "w") as f:  # a file, not a pipe nobody drains while we wait
        return start_vtlab(*overrides, f"hydra.run.dir={run_dir}", stdout=subprocess.DEVNULL, stderr=f)


def _interrupt_while_running(proc: subprocess.Popen, run_dir: Path, sig: signal.Signals) -> None:
    """Send `sig` at a moment the run is observably still working: the process is frozen (SIGSTOP), checked to be
    alive with status "running", signalled, then resumed. A run that finished before we looked fails the test with
    that reason instead of passing a signal to a process that already exited 0."""
    proc.send_signal(signal.SIGSTOP)
    try:
        status = json.loads((run_dir / "status.json").read_text()) if (run_dir / "status.json").exists() else {}
        assert proc.poll() is None and status.get("status", "running") == "running", (
            f"the run ended before it could be interrupted (status {status})"
        )
        proc.send_signal(sig)
    finally:
        proc.send_signal(signal.SIGCONT)


@pytest.fixture(scope="module")
def interrupted_runs(tmp_path_factory) -> dict[str, tuple[int, str, dict]]:
    """SIGTERM and SIGHUP during training (after its first checkpoint), SIGINT and SIGQUIT during evaluation (once the
    run has started): all at once, each in its own run directory, each signalled as soon as its marker appears."""
    tmp = tmp_path_factory.mktemp("signals")
    cases = {
        "sigterm_training": (_TRAIN, "checkpoints/last.ckpt", signal.SIGTERM),
        "sighup_training": (_TRAIN, "checkpoints/last.ckpt", signal.SIGHUP),
        "sigint_evaluation": (_EVAL, "status.json", signal.SIGINT),
        "sigquit_evaluation": (_EVAL, "status.json", signal.SIGQUIT),
    }
    procs = {
        name: (_start(ov, tmp / name, tmp / f"{name}.log"), tmp / name, tmp / f"{name}.log", marker, sig)
        for name, (ov, marker, sig) in cases.items()
    }
    waiting = dict(procs)
    deadline = time.monotonic() + 300
    while waiting:  # both at once: a run waited for second must not finish while the first one is handled
        for name, (proc, run_dir, log, marker, sig) in list(waiting.items()):
            if (run_dir / marker).exists():
                _interrupt_while_running(proc, run_dir, sig)
                del waiting[name]
            else:
                assert proc.poll() is None, f"{name} ended before {marker} appeared: {log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"no marker after 300 s: {sorted(waiting)}"
        time.sleep(0.05)
    out = {}
    for name, (proc, run_dir, log, _, _) in procs.items():
        rc = proc.wait(timeout=300)
        out[name] = (rc, log.read_text(), json.loads((run_dir / "status.json").read_text()))
    return out


@pytest.mark.cli
@pytest.mark.slow
@pytest.mark.parametrize(
    "name,code,signame",
    [
        ("sigterm_training", 143, "SIGTERM"),
        ("sighup_training", 129, "SIGHUP"),
        ("sigint_evaluation", 130, "SIGINT"),
        ("sigquit_evaluation", 131, "SIGQUIT"),
    ],
)
def test_a_signal_gives_its_exit_code_one_line_and_status_interrupted(interrupted_runs, name, code, signame) -> None:
    rc, stderr, status = interrupted_runs[name]
    assert rc == code, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    lines = [ln for ln in said(stderr) if ln.startswith("vtlab: ")]
    assert lines == [said(stderr)[-1]], stderr[-3000:]
    assert lines[0].startswith(f"vtlab: interrupted by {signame} (exit {code});"), lines
    # what a rerun does: training resumes from its checkpoint; an evaluation has none and runs again
    if name.endswith("training"):
        assert " with: python -m vtlab " in lines[0] and "hydra.run.dir=" in lines[0], lines
    else:
        assert "nothing to resume" in lines[0] and "to run it again: python -m vtlab " in lines[0], lines
    assert status["status"] == "interrupted" and status["error"] == f"interrupted by {signame}", status


def test_every_caught_signal_raises_with_its_number_and_an_ignored_one_stays_ignored() -> None:
    saved = {s: signal.getsignal(s) for s in CAUGHT}
    try:
        for signum in CAUGHT:  # as a terminal starts a process, whatever this suite was started with
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as nohup starts a process: the run must outlive its terminal
        catch_signals()
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        for signum in set(CAUGHT) - {signal.SIGHUP}:
            assert signal.getsignal(signum) is raise_terminated
            try:
                raise_terminated(signum, None)
            except BaseException as exc:  # noqa: BLE001 - Terminated is a BaseException on purpose
                assert interrupting_signal(exc) == signum
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)


def test_lightning_interruptions_map_to_their_signal() -> None:
    from pytorch_lightning.utilities.exceptions import SIGTERMException

    assert SIGTERMException().code is None  # why it needs mapping: a SystemExit without a code exits 0
    try:  # what Lightning does on Ctrl-C: sys.exit(1) inside its `except KeyboardInterrupt`
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            sys.exit(1)
    except SystemExit as exc:
        assert interrupting_signal(exc) == signal.SIGINT
    assert interrupting_signal(SIGTERMException()) == signal.SIGTERM
    assert interrupting_signal(SystemExit(2)) is None and interrupting_signal(ValueError("x")) is None


def _job(sweep: Path, num: int, status: str | None) -> None:
    (sweep / str(num) / ".hydra").mkdir(parents=True)
    if status is not None:
        (sweep / str(num) / "status.json").write_text(json.dumps({"status": status}))


def test_sweep_exit_code_counts_every_job_not_done(tmp_path: Path, capsys) -> None:
    cfg = OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}}})
    _job(tmp_path, 0, "done")
    _job(tmp_path, 1, "done")
    SweepExitCode().on_multirun_end(cfg)  # all done: no exit
    _job(tmp_path, 2, "failed")
    _job(tmp_path, 3, None)  # refused before it wrote a status
    with pytest.raises(SystemExit) as ei:
        SweepExitCode().on_multirun_end(cfg)
    assert ei.value.code == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(
        f"vtlab: error: 2 of 4 jobs of the sweep {tmp_path} did not finish: 2 (failed), 3 (no status.json);"
    ), err


@pytest.mark.cli
@pytest.mark.slow
def test_multirun_with_failed_jobs_runs_them_all_and_exits_1(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    res = run_vtlab(
        "--multirun",
        *_EVAL,
        "backbone.name_or_path=./no/such/model,./no/such/other",
        f"hydra.sweep.dir={sweep}",
        timeout=600,
    )
    assert res.returncode == 1, res.stderr[-3000:]
    statuses = {p.parent.name: json.loads(p.read_text())["status"] for p in sweep.glob("*/status.json")}
    assert statuses == {"0": "failed", "1": "failed"}, res.stderr[-3000:]  # both jobs ran
    assert res.stderr.strip().splitlines()[-1].startswith("vtlab: error: 2 of 2 jobs of the sweep"), res.stderr[-3000:]


def test_an_exception_chain_that_loops_is_walked_once_not_forever() -> None:
    # found by tests/runs/test_fuzz_inputs.py: a YAML error whose context chain comes back to itself hung the run's end
    from vtlab.core.errors import DataError, exception_chain, user_error

    a, b = ValueError("a"), KeyError("b")
    a.__context__, b.__context__ = b, a
    assert [type(e) for e in exception_chain(a)] == [ValueError, KeyError]
    assert user_error(a) is a and interrupting_signal(b) is None
    c = DataError("c")
    c.__cause__ = c
    assert list(exception_chain(c)) == [c] and user_error(c) is c


class _FlushingStream(io.StringIO):
    """A log stream whose flush is where a signal lands (its handler called there, as Python would between two
    bytecodes of the flush), and which notes any write made while it is flushing."""

    def __init__(self) -> None:
        super().__init__()
        self.flushing = self.reentered = self.landed = False

    def write(self, text: str) -> int:
        self.reentered |= self.flushing
        return super().write(text)

    def flush(self) -> None:
        self.flushing = True
        try:
            if not self.landed:
                self.landed = True
                raise_terminated(signal.SIGTERM, None)
        finally:
            self.flushing = False


def test_a_signal_landing_inside_a_log_write_says_its_line_after_it_not_inside_it() -> None:
    """While training a signal is noted and its line logged; logged from the handler itself it would re-enter the
    stream the interrupted log line was flushing (a real stream raises "reentrant call" and logging prints a
    traceback)."""
    stream, logger = _FlushingStream(), logging.getLogger("vtlab")
    handler, level, sigint = logging.StreamHandler(stream), logger.level, signal.getsignal(signal.SIGINT)
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    signals.defer_signals(True)
    try:
        logger.info("a line under way")
        deadline = time.monotonic() + 120  # the line comes at once; the bound only keeps a broken build finite
        while "SIGTERM received: stopping after this training step" not in stream.getvalue():
            assert time.monotonic() < deadline, stream.getvalue()
            time.sleep(0.01)
    finally:
        signals.defer_signals(False)
        signals.heeded()
        signal.signal(signal.SIGINT, sigint)
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert stream.landed and not stream.reentered
    assert stream.getvalue().index("a line under way") < stream.getvalue().index("SIGTERM received")
