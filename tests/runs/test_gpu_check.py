"""`make gpu-check-cpu` (python -m vtlab.bench.gpu_check --cpu): every step that runs on the CPU passes on two gloo
processes at tiny shapes, the GPU-only steps say why they were skipped, and the report records each step. The steps
hold the multi-process rehearsals: MLM + stage=all through VT on two processes, SIGTERM to every rank and to one rank
(every process out within a minute, one last.ckpt, status interrupted, the printed command resumes on two
processes), a two-process encode equal to the one-process index."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT, child_env

from vtlab.bench import gpu_check

CPU_STEPS = [
    "environment",
    "head",
    "cached_loss",
    "cached_loss_ddp",
    "sigterm",
    "sigterm_one_rank",
    "mlm_all",
    "encode",
]
GPU_STEPS = ["paper_step", "quickstart"]


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("gpu-check") / "gpu_check.json"
    proc = subprocess.run(
        [sys.executable, "-m", "vtlab.bench.gpu_check", "--cpu", "--out", str(out)],
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "gpu-check (cpu): 8 passed, 0 failed; skipped: paper_step (needs a CUDA GPU)" in proc.stdout
    return json.loads(out.read_text())


def test_the_check_knows_every_step() -> None:
    assert list(gpu_check.STEPS) == [*CPU_STEPS[:4], *GPU_STEPS, *CPU_STEPS[4:]]


@pytest.mark.cli
@pytest.mark.slow
@pytest.mark.parametrize("step", CPU_STEPS)
def test_each_cpu_step_passes(report, step) -> None:
    assert report["mode"] == "cpu" and report["processes"] == 2
    entry = report["steps"][step]
    assert entry["status"] == "passed", entry


@pytest.mark.cli
@pytest.mark.slow
@pytest.mark.parametrize("step", GPU_STEPS)
def test_the_gpu_steps_say_why_they_were_skipped(report, step) -> None:
    assert report["steps"][step] == {"status": "skipped", "why": gpu_check.GPU_ONLY, "seconds": 0.0}


@pytest.mark.cli
@pytest.mark.slow
def test_the_signal_steps_stopped_every_rank_and_resumed(report) -> None:
    both, one = report["steps"]["sigterm"], report["steps"]["sigterm_one_rank"]
    assert both["processes"] == one["processes"] == 2
    assert both["exited_after_s"] <= gpu_check.EXIT_WITHIN_S and one["exited_after_s"] <= gpu_check.EXIT_WITHIN_S
    assert both["resumed"] == "done"
    assert "vtlab: interrupted by SIGTERM (exit 143); resume from" in one["line"]


def test_without_a_gpu_the_gpu_check_says_so_in_one_line(capsys) -> None:
    if gpu_check.torch.cuda.is_available():
        pytest.skip("this machine has a GPU: `make gpu-check` runs there")
    assert gpu_check.main(["--out", "/nonexistent/never-written.json"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["vtlab: error: gpu-check needs a CUDA GPU (`make gpu-check-cpu` runs its CPU steps)"]


def test_an_unknown_step_is_refused(capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        gpu_check.main(["--cpu", "--only", "head,heads"])
    assert exited.value.code == 2
    assert "unknown step(s) heads" in capsys.readouterr().err


def test_a_failed_step_is_recorded_and_fails_the_check(tmp_path, monkeypatch) -> None:
    def broken(m: gpu_check.Machine) -> dict:
        raise AssertionError("planted")

    monkeypatch.setitem(gpu_check.STEPS, "head", broken)
    out = tmp_path / "r.json"
    assert gpu_check.main(["--cpu", "--only", "environment,head,paper_step", "--out", str(out)]) == 1
    steps = json.loads(out.read_text())["steps"]
    assert [steps[s]["status"] for s in steps] == ["passed", "failed", "skipped"]
    assert steps["head"]["why"] == "AssertionError: planted"
    assert Path(out).is_file()
