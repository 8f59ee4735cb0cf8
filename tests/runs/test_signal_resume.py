"""A run stopped by a signal while training can always be resumed: the step under way finishes, checkpoints/last.ckpt
is written (long before the first periodic save), the process prints one line holding the exact command that resumes
it and exits within seconds with its run directory's lock free, and that command, run as printed, ends with the same
metrics and weights as a run that was never stopped. Stopped and resumed twice (SIGTERM), it is still one wandb run (its
offline folders all carry the id recorded in the run directory), and no resume warns that its checkpoint directory is
not empty (vtlab owns it). Every signal is one flag and one checkpoint at a step boundary, so the resume itself (the
same code whatever stopped the run) is run for SIGTERM; the other signals are checked up to their printed command."""

from __future__ import annotations

import fcntl
import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch
from helpers import TINY_RUN, run_results, start_vtlab

pytestmark = pytest.mark.cli

STEPS = 12  # the signal comes at step 3: 9 steps of room before the run would end by itself
STOPS = {signal.SIGTERM: (3, 7)}  # stopped again after its resume, at step 7 (the other signals: once, at step 3)
RESUMED = {signal.SIGTERM}  # whose printed command is run to the end and compared with the uninterrupted run
_RUN = [
    *(o if o != "logger=none" else "logger=wandb" for o in TINY_RUN),  # offline: one run, however resumed
    f"trainer.max_steps={STEPS}",
    f"trainer.val_check_interval={STEPS}",
    "callbacks.last_checkpoint.every_n_train_steps=1000",  # no periodic save: only the signal's
    "callbacks.progress_bar.every=1",
    "trainer.log_every_n_steps=1",
]
SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGHUP)


def _start(args: list[str], log: Path) -> subprocess.Popen:
    """`python -m vtlab <args>`, its output appended to `log`."""
    with open(log, "a") as f:  # a file: a pipe nobody drains could stall the run
        return start_vtlab(*args, stdout=f, stderr=subprocess.STDOUT)


def _lock_is_free(run_dir: Path) -> bool:
    """Whether another process could take the run directory's lock (an flock on the directory itself) now."""
    fd = os.open(run_dir, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)  # closing drops the lock if it was taken
    return True


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[dict, dict[str, torch.Tensor]]:
    tmp = tmp_path_factory.mktemp("uninterrupted")
    proc = _start([*_RUN, f"hydra.run.dir={tmp / 'run'}"], tmp / "log")
    assert proc.wait(timeout=600) == 0, (tmp / "log").read_text()[-3000:]
    return run_results(tmp / "run")


def _stop_at(proc: subprocess.Popen, log: Path, run_dir: Path, step: int, sig: signal.Signals) -> str:
    """Send `sig` once the run reports `step`; check its exit (128 + sig, the lock free when the line appears, the
    exit within 5 s of it) and return the line."""
    deadline = time.monotonic() + 300
    while f"train: step {step}/{STEPS}" not in log.read_text(errors="replace"):
        assert proc.poll() is None, f"the run ended before step {step}: {log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"no step {step} after 300 s"
        time.sleep(0.02)
    before = log.read_text(errors="replace").count("vtlab: interrupted")
    proc.send_signal(sig)
    line = None
    while proc.poll() is None and line is None:  # the moment the line appears
        found = [ln for ln in log.read_text(errors="replace").splitlines() if "vtlab: interrupted" in ln]
        line = found[-1] if len(found) > before else None
        time.sleep(0.01)
    seen = time.monotonic()
    if line is not None:
        assert _lock_is_free(run_dir), "the run directory is still locked when the line appears"
    rc = proc.wait(timeout=60)
    assert time.monotonic() - seen <= 5, "more than 5 s from the line to the exit"
    text = log.read_text(errors="replace")
    assert rc == 128 + sig, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    return [ln for ln in text.splitlines() if ln.startswith("vtlab: interrupted")][-1]


@pytest.mark.slow
@pytest.mark.parametrize("sig", SIGNALS, ids=[s.name for s in SIGNALS])
def test_a_signal_at_step_3_leaves_a_checkpoint_and_the_printed_command_resumes_it(tmp_path, request, sig):
    run_dir, log = tmp_path / "run", tmp_path / "log"
    proc = _start([*_RUN, f"hydra.run.dir={run_dir}"], log)
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    stops = STOPS.get(sig, (3,))
    for n, stop in enumerate(stops):
        line = _stop_at(proc, log, run_dir, stop, sig)
        step = int(torch.load(ckpt, map_location="cpu", weights_only=False)["global_step"])
        assert stop <= step < STEPS, step
        assert line.startswith(f"vtlab: interrupted by {sig.name} (exit {128 + sig}); resume from {ckpt} with: "), line
        command = shlex.split(line.split(" with: ", 1)[1])
        assert command[:3] == ["python", "-m", "vtlab"] and f"hydra.run.dir={run_dir}" in command
        if sig not in RESUMED:
            return
        resumed = _start(command[3:], log)  # as printed (this interpreter for `python`)
        if n + 1 < len(stops):
            proc = resumed  # stopped again
    assert resumed.wait(timeout=600) == 0, log.read_text()[-3000:]
    got_metrics, got_weights = run_results(run_dir)
    ref_metrics, ref_weights = request.getfixturevalue("reference")  # the uninterrupted run: only a resume needs it
    assert got_metrics == ref_metrics
    assert got_weights.keys() == ref_weights.keys()
    for name, tensor in ref_weights.items():
        assert torch.equal(tensor, got_weights[name]), name
    # one wandb run: each process's offline folder (offline-run-<time>-<id>) carries the id the run directory records
    recorded = (run_dir / "wandb_id").read_text().strip()
    folders = sorted(p.name for p in (run_dir / "wandb").glob("offline-run-*"))
    assert len(folders) == 1 + len(stops), folders
    assert {name.rsplit("-", 1)[1] for name in folders} == {recorded}, (recorded, folders)
    # the resumes' checkpoint directory holds the run's own last.ckpt: no "exists and is not empty"
    assert "exists and is not empty" not in log.read_text(errors="replace")
