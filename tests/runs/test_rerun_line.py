"""A run interrupted before its first checkpoint prints the command that runs it again; that command runs in the same
run directory (vtlab.runs.lifecycle.rerun_command pins hydra.run.dir), so `stage=export run_dir=<that dir>` finds the
results, and no second dated directory appears."""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest
from helpers import TWO_STEP_FINETUNE, run_vtlab, start_vtlab

from vtlab.runs.lifecycle import rerun_command

pytestmark = pytest.mark.cli

# a short training run (tests/runs/test_exit_codes.py's, two steps): the rerun trains to the end
_TRAIN = TWO_STEP_FINETUNE
HEAD = "; to run it again: "


def _run_dirs(cwd: Path) -> list[Path]:
    return sorted(p for p in (cwd / "outputs" / "runs").glob("*/*") if p.is_dir())


def _interrupt_once_started(proc: subprocess.Popen, cwd: Path, log: Path) -> Path:
    """SIGTERM as soon as the run's status.json says it started (setting up: data, model), with the process frozen
    while it is checked to be still running."""
    deadline = time.monotonic() + 300
    while not (dirs := [d for d in _run_dirs(cwd) if (d / "status.json").exists()]):
        assert proc.poll() is None, f"the run ended before it started: {log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, "no status.json after 300 s"
        time.sleep(0.05)
    proc.send_signal(signal.SIGSTOP)
    try:
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
    finally:
        proc.send_signal(signal.SIGCONT)
    return dirs[0]


@pytest.mark.cli
def test_the_rerun_line_of_a_run_stopped_before_its_first_checkpoint_reruns_in_its_directory(tmp_path):
    log = tmp_path / "first.log"
    with open(log, "w") as f:  # the dated default run directory: outputs/runs/<date>/<time>-<name> under cwd
        proc = start_vtlab(*_TRAIN, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=f)
    run_dir = _interrupt_once_started(proc, tmp_path, log)
    assert proc.wait(timeout=300) == 128 + signal.SIGTERM, log.read_text()[-3000:]
    last = log.read_text().strip().splitlines()[-1]
    assert "nothing to resume" in last and HEAD in last, last  # stopped before its first checkpoint
    assert not (run_dir / "checkpoints" / "last.ckpt").exists()
    command = shlex.split(last.split(HEAD, 1)[1])
    assert command[:3] == ["python", "-m", "vtlab"] and command[-1] == f"hydra.run.dir={run_dir}", command
    assert "overwrite=true" not in command  # nothing the run directory check refuses was left

    time.sleep(1.1)  # a new dated directory would have another <time> in its name
    rerun = run_vtlab(*command[3:], cwd=tmp_path, timeout=600)  # as printed (this interpreter for `python`)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert _run_dirs(tmp_path) == [run_dir]  # no second dated directory
    assert json.loads((run_dir / "status.json").read_text())["status"] == "done"
    assert (run_dir / "model" / "config.json").is_file()


def test_a_rerun_pins_the_run_dir_and_overwrites_only_what_the_run_left(tmp_path):
    run_dir = tmp_path / "run"
    pinned = ["stage=evaluate", "hydra.run.dir=elsewhere", "paths.run_dir=x", "resume=true", "overwrite=false"]
    expected = f"python -m vtlab stage=evaluate hydra.run.dir={run_dir}"
    assert rerun_command(pinned, run_dir) == expected  # no directory yet
    (run_dir / ".hydra").mkdir(parents=True)  # what any started run leaves: admitted without overwrite
    (run_dir / "status.json").write_text("{}")
    assert rerun_command(pinned, run_dir) == expected
    (run_dir / "eval" / "scifact").mkdir(parents=True)  # an evaluation suite stopped after its first member
    (run_dir / "eval" / "scifact" / "metrics.json").write_text("{}")
    assert rerun_command(pinned, run_dir) == f"{expected} overwrite=true"
