"""A resumed run stays one run: its wandb run id is recorded in its directory and kept by a resume, renewed by a run
that starts over, read by rank 0 only (vtlab.runs.tracking_id, vtlab.tracking.loggers); Lightning's "checkpoint
directory is not empty" is silenced for the run's own checkpoints/ only (vtlab.core.logs); a run started with SIGINT
ignored says at its start how to stop it (vtlab.runs.signals.ignored_sigint_line). The resumes themselves, one wandb
run across them and no such warning in their output: tests/runs/test_signal_resume.py."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import warnings
from pathlib import Path

import pytest
from helpers import TESTS, as_from_a_terminal, child_env, start_vtlab
from omegaconf import OmegaConf
from pytorch_lightning.loggers import WandbLogger
from pytorch_lightning.utilities.rank_zero import rank_zero_warn

from vtlab.core import logs
from vtlab.runs.reuse import copy_results
from vtlab.runs.signals import ignored_sigint_line
from vtlab.runs.tracking_id import ID_FILE, recorded_id, run_id
from vtlab.tracking.loggers import configured_loggers, instantiate_logger, logs_to_wandb

CHEAP = ["stage=evaluate", "eval=none", "logger=none", "baseline=false", "vocab=native", "apc=off"]


def test_a_resume_keeps_the_id_and_a_run_that_starts_over_gets_a_new_one(tmp_path: Path) -> None:
    assert recorded_id(tmp_path) is None
    first = run_id(tmp_path, resumes=False)
    assert (tmp_path / ID_FILE).read_text() == f"{first}\n" and recorded_id(tmp_path) == first
    assert run_id(tmp_path, resumes=True) == first  # resumed (twice): the same wandb run
    assert run_id(tmp_path, resumes=True) == first
    again = run_id(tmp_path, resumes=False)  # overwrite=true, or no checkpoint to resume: a new wandb run
    assert again != first and recorded_id(tmp_path) == again
    (tmp_path / ID_FILE).write_text("not/an id\n")
    assert recorded_id(tmp_path) is None
    assert run_id(tmp_path, resumes=True) not in ("not/an id", first, again)  # a resume without a usable id: one


def test_a_reused_run_does_not_take_the_other_directorys_id(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    (src / "eval").mkdir(parents=True)
    (src / "eval" / "metrics.json").write_text("{}")
    run_id(src, resumes=False)
    mine = run_id(dst, resumes=False)  # the admission records the reusing run's own before the copy
    copy_results(src, dst)
    assert (dst / "eval" / "metrics.json").is_file() and recorded_id(dst) == mine


def _cfg(run_dir: Path, logger: str = "wandb"):
    wandb = {"_target_": "pytorch_lightning.loggers.WandbLogger", "project": "vtlab", "save_dir": "${paths.run_dir}"}
    return OmegaConf.create(
        {
            "name": "row",
            "group": None,
            "paths": {"run_dir": str(run_dir)},
            "logger": {"wandb": wandb, "online": False} if logger == "wandb" else {"online": False},
        }
    )


def test_the_wandb_logger_continues_the_run_directorys_run_on_rank_0_only(tmp_path: Path, monkeypatch) -> None:
    for name in ("LOCAL_RANK", "RANK", "SLURM_PROCID"):
        monkeypatch.delenv(name, raising=False)
    cfg = _cfg(tmp_path)
    assert logs_to_wandb(cfg.logger) and not logs_to_wandb(_cfg(tmp_path, "none").logger)
    recorded = run_id(tmp_path, resumes=False)
    (logger,) = configured_loggers(cfg)
    assert isinstance(logger, WandbLogger)
    assert logger._wandb_init["id"] == recorded and logger._wandb_init["resume"] == "allow"  # noqa: SLF001
    # the MLM adaptation's own run (vtlab.stages.mlm) never takes the directory's id
    mlm = instantiate_logger(cfg, cfg.logger.wandb, name="row-mlm", job_type="mlm", id=None)
    assert mlm._wandb_init["id"] is None  # noqa: SLF001
    monkeypatch.setenv("LOCAL_RANK", "1")  # a later rank: no id (its logger starts no run), nothing read
    (later,) = configured_loggers(cfg)
    assert later._wandb_init["id"] is None  # noqa: SLF001


def test_only_the_runs_own_checkpoint_directory_loses_the_not_empty_warning(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(logs, "interactive", lambda: True)  # progress bars are not this test's business
    real = Path(os.path.realpath(tmp_path))
    run_dir, elsewhere, link = real / "run", real / "elsewhere", real / "link"
    (run_dir / "checkpoints").mkdir(parents=True)
    link.symlink_to(run_dir)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        logs.quiet_third_party(link)  # Lightning names the directory by its real path
        for d in (run_dir / "checkpoints", elsewhere / "checkpoints", run_dir / "checkpoints" / "sub"):
            rank_zero_warn(f"Checkpoint directory {d} exists and is not empty.")
        warnings.warn("some other warning", UserWarning, stacklevel=1)
    assert [str(w.message) for w in seen] == [
        f"Checkpoint directory {elsewhere / 'checkpoints'} exists and is not empty.",
        f"Checkpoint directory {run_dir / 'checkpoints' / 'sub'} exists and is not empty.",
        "some other warning",
    ]


def test_the_sigint_line_says_how_to_stop_a_run_only_when_sigint_is_ignored() -> None:
    saved = signal.getsignal(signal.SIGINT)
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        assert ignored_sigint_line(123) is None
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        assert ignored_sigint_line(123).endswith("; stop it with: kill -TERM 123")
        joblib = "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"
        assert ignored_sigint_line(123, joblib).endswith("; stop it with: pkill -TERM -P 123 (each job's process)")
        assert ignored_sigint_line(123, "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher") is None
    finally:
        signal.signal(signal.SIGINT, saved)


def _sigint_ignored() -> None:
    """As a non-interactive shell starts `cmd &`: SIGINT (and SIGQUIT) ignored, the rest as from a terminal."""
    as_from_a_terminal()
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.cli
def test_a_run_started_with_sigint_ignored_says_so_after_its_first_line_and_ignores_ctrl_c(tmp_path: Path) -> None:
    run_dir, release, log = tmp_path / "run", tmp_path / "release", tmp_path / "log"
    with open(log, "w") as f:
        proc = start_vtlab(
            *CHEAP,
            f"hydra.run.dir={run_dir}",
            "+hydra.callbacks.pause._target_=run_pause.WaitForFile",  # held before the pipeline, until `release`
            f"+hydra.callbacks.pause.path={release}",
            env=child_env(TESTS),
            stdout=f,
            stderr=subprocess.STDOUT,
            preexec_fn=_sigint_ignored,
        )
    try:
        deadline = time.monotonic() + 300
        while not Path(f"{release}.reached").exists():
            assert proc.poll() is None, f"the run ended before its pause: {log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, "no pause after 300 s"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)  # Ctrl-C: ignored, as the line says
        time.sleep(1)
        assert proc.poll() is None, log.read_text()[-3000:]
        release.touch()
        rc = proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    lines = log.read_text().splitlines()
    assert rc == 0, "\n".join(lines[-40:])
    assert lines[0].startswith("vtlab: ") and lines[0].endswith(f"writing to {run_dir}"), lines[:3]
    notes = [line for line in lines if "Ctrl-C" in line]
    assert notes == [
        "vtlab: note: Ctrl-C does not stop this run: it was started with SIGINT ignored (as `cmd &` in a script "
        f"starts it); stop it with: kill -TERM {proc.pid}"
    ]
    assert lines[1] == notes[0]  # at its start: right after the first line
