"""A run on two devices from the command line (trainer=ddp, 2 CPU processes): Lightning's launcher starts the command
again for rank 1 once rank 0 trains; rank 0 admits the run and owns its directory (lock, status.json), rank 1 takes
where it starts and writes none of them (vtlab.runs.ranks)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import OFFLINE_ENV, ROOT, TWO_STEP_FINETUNE

from vtlab.runs.ranks import later_rank

_DDP = [*TWO_STEP_FINETUNE, "trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2"]


@pytest.mark.parametrize(
    ("env", "later"),
    [
        ({}, False),
        ({"LOCAL_RANK": "0"}, False),
        ({"LOCAL_RANK": "1"}, True),
        ({"RANK": "3"}, True),
        ({"RANK": ""}, False),
        ({"SLURM_PROCID": "0"}, False),
        ({"SLURM_PROCID": "7"}, True),
    ],
)
def test_a_later_rank_is_told_by_the_launchers_variables(monkeypatch, env, later) -> None:
    for name in ("LOCAL_RANK", "RANK", "SLURM_PROCID"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert later_rank() is later


@pytest.mark.cli
@pytest.mark.slow
def test_two_processes_from_the_command_line_train_into_one_run_dir(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "vtlab", *_DDP, f"hydra.run.dir={run_dir}"],
        cwd=ROOT,
        env=OFFLINE_ENV,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "vtlab: error" not in proc.stderr
    assert json.loads((run_dir / "status.json").read_text())["status"] == "done"
    assert (run_dir / "model" / "config.json").is_file() and (run_dir / "checkpoints" / "last.ckpt").is_file()
    assert (run_dir / "train_ddp_process_1.log").is_file()  # rank 1 ran, in the same directory
    assert [p.name for p in tmp_path.iterdir()] == ["run"]
    assert proc.stdout.count("vtlab: finetune-") == 1  # one first line: rank 0's
