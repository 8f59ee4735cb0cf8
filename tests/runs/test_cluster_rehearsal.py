"""The cluster path rehearsed on this machine: a sweep through `hydra/launcher=submitit-local` (each job pickled and
run in its own process by a submitit controller, with its logs in <sweep>/.submitit/<job id>/, as SLURM runs them
with `hydra/launcher=slurm`), two jobs sharing one $VTLAB_CACHE, one job preempted the way SLURM preempts (SIGTERM to
the job) after its first checkpoint and resubmitted into its own job directory, where it resumes to the uninterrupted
job's weights and metrics. One process per job (docs/cluster.md says why); about 80 s on 2 loaded cores."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch
from helpers import TINY_RUN, child_env, hydra_conf, run_results, said, start_vtlab
from hydra.core.global_hydra import GlobalHydra
from hydra.types import RunMode

from vtlab.callbacks.checkpoints import load_checkpoint
from vtlab.runs.directory import LAST_CKPT

# the two jobs differ only in their name (run-local): the same training, so either is the other's reference
_JOB = [
    *[o for o in TINY_RUN if not o.startswith(("apc=", "data.batch_size=", "data.doc_max_length=", "+eval."))],
    "apc=p60-sparse",  # the stage both jobs share: one APC calibration of the same weights, cached under a lock
    "apc.num_docs=50",
    "data.batch_size=2",
    "data.doc_max_length=32",
    "trainer.limit_val_batches=0",
    "+eval.collection.max_queries=10",
    "+eval.collection.max_docs=30",
    "trainer.max_steps=8",
    "callbacks.last_checkpoint.every_n_train_steps=2",
]
_NAMES = ("rehearsal-a", "rehearsal-b")
_PREEMPTED = 1  # the job the test preempts (job 0 runs through: the reference)


def _sweep(sweep: Path, env: dict[str, str], log: Path, *extra: str) -> subprocess.Popen:
    with open(log, "w") as f:  # a file, not a pipe nobody drains while we wait
        return start_vtlab(
            "-m",
            *_JOB,
            *extra,
            f"hydra.sweep.dir={sweep}",
            "hydra/launcher=submitit-local",
            env=env,
            stdout=f,
            stderr=subprocess.STDOUT,
        )


def _status(job_dir: Path) -> dict:
    path = job_dir / "status.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def _controller(job_dir: Path) -> int:
    """The job's submitit id: the pid of its local controller (SLURM's job id on a cluster), as Hydra recorded it."""
    for line in (job_dir / ".hydra" / "hydra.yaml").read_text().splitlines():
        if line.startswith("    id: "):
            return int(line.split(":", 1)[1].strip().strip("'\""))
    raise AssertionError(f"no hydra.job.id in {job_dir / '.hydra' / 'hydra.yaml'}")


def _task(controller: int) -> int:
    """The controller's one task: the process that runs the pickled job."""
    children = Path(f"/proc/{controller}/task/{controller}/children").read_text().split()
    assert len(children) == 1, children
    return int(children[0])


def _wait(what: str, ready, proc: subprocess.Popen, log: Path, timeout: float = 400) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert time.monotonic() < deadline, f"no {what} after {timeout} s: {log.read_text()[-3000:]}"
        time.sleep(0.05)


def _submitit_logs(sweep: Path, controller: int) -> tuple[str, str]:
    folder = sweep / ".submitit" / str(controller)
    return (folder / f"{controller}_0_log.out").read_text(), (folder / f"{controller}_0_log.err").read_text()


def _launcher(name: str):
    with hydra_conf():  # a multirun's load: the launcher as the sweep reads it
        loader = GlobalHydra.instance().config_loader()
        return loader.load_configuration(
            "config", ["name=a,b", f"hydra/launcher={name}"], RunMode.MULTIRUN
        ).hydra.launcher


def test_the_local_launcher_has_the_slurm_jobs_settings_that_apply_on_one_machine() -> None:
    local, slurm = _launcher("submitit-local"), _launcher("slurm")
    assert local._target_.endswith("submitit_launcher.LocalLauncher")
    assert slurm._target_.endswith("submitit_launcher.SlurmLauncher")
    for key in ("timeout_min", "nodes", "submitit_folder"):  # as written: the sweep dir holds the time of the load
        assert local._get_node(key)._value() == slurm._get_node(key)._value(), key  # noqa: SLF001
    assert local.tasks_per_node == 1  # the local executor gives Lightning no ranks (docs/cluster.md)


@pytest.mark.cli
@pytest.mark.slow
def test_a_sweep_through_submitit_shares_its_cache_and_a_preempted_job_resumes_exactly(tmp_path: Path) -> None:
    t0 = time.monotonic()
    sweep, cache = tmp_path / "sweep", tmp_path / "cache"
    env = child_env(VTLAB_CACHE=str(cache), OMP_NUM_THREADS="1")
    log = tmp_path / "sweep.log"
    proc = _sweep(sweep, env, log, f"name={','.join(_NAMES)}")
    job = sweep / str(_PREEMPTED)
    _wait("first checkpoint", (job / LAST_CKPT).is_file, proc, log)
    controller = _controller(job)
    task = _task(controller)
    # preempted as SLURM does: SIGTERM to the job (the local controller forwards it to its task, as srun does); the
    # task is frozen while we check that it is still training, so a job that already finished fails the test instead
    os.kill(task, signal.SIGSTOP)
    try:
        assert _status(job).get("status") == "running", _status(job)
        os.kill(controller, signal.SIGTERM)
    finally:
        os.kill(task, signal.SIGCONT)
    _wait("interruption", lambda: _status(job).get("status") == "interrupted", proc, log)
    out, err = _submitit_logs(sweep, controller)
    stopped = [ln for ln in said(err) if ln.startswith("vtlab: ")]
    assert len(stopped) == 1 and stopped[0].startswith("vtlab: interrupted by SIGTERM (exit 143); resume from "), err
    assert _status(job)["error"] == "interrupted by SIGTERM"
    stopped_at = int(load_checkpoint(job / LAST_CKPT)["global_step"])
    assert 2 <= stopped_at < 8 and not (job / "model").exists()

    # resubmitted the way a user does on a cluster: the sweep command with that job's overrides, pinned to its job
    # directory (hydra.sweep.subdir); resume=auto finds checkpoints/last.ckpt there. It may start while job 0 runs.
    again_log = tmp_path / "resubmitted.log"
    again = _sweep(sweep, env, again_log, f"name={_NAMES[_PREEMPTED]}", f"hydra.sweep.subdir={_PREEMPTED}")
    assert again.wait(timeout=600) == 0, again_log.read_text()[-3000:]
    assert f"resuming training from {job / LAST_CKPT}" in (job / "__main__.log").read_text()  # not started over
    # the first sweep ends when job 0 does: non-zero, a job of it gave no result (submitit's UncompletedJobError)
    assert proc.wait(timeout=600) == 1, log.read_text()[-3000:]
    assert "UncompletedJobError" in log.read_text()

    for num, name in enumerate(_NAMES):
        job_dir = sweep / str(num)
        assert _status(job_dir)["status"] == "done" and _status(job_dir)["name"] == name, _status(job_dir)
        assert {p.name for p in (job_dir / ".hydra").iterdir()} >= {"config.yaml", "hydra.yaml", "overrides.yaml"}
        assert f"name={name}" in (job_dir / ".hydra" / "overrides.yaml").read_text()
        assert (job_dir / "__main__.log").is_file()
        out, err = _submitit_logs(sweep, _controller(job_dir))  # the resubmission's controller: a new job id
        assert "Job completed successfully" in out + err, err[-3000:]
        assert (sweep / ".submitit" / str(_controller(job_dir)) / f"{_controller(job_dir)}_0_result.pkl").is_file()
    assert _controller(job) != controller

    # the shared stage: one APC calibration in the cache, built by one job, read by the other (and by the resumed run)
    entries = [p for p in (cache / "apc").iterdir() if not p.name.endswith(".lock")]
    assert len(entries) == 1, entries
    logs = "".join((sweep / str(n) / "__main__.log").read_text() for n in range(2))  # the resumed run's appended
    calibrations, cached = logs.count("APC p60-sparse before:"), logs.count("apc: cached calibration")
    assert calibrations >= 2 and calibrations - cached == 1, (calibrations, cached)  # one build, the rest read it

    # the resumed job reached the uninterrupted job's final weights, training state and metrics, exactly
    (ref_metrics, ref_weights), (got_metrics, got_weights) = run_results(sweep / "0"), run_results(job)
    assert got_metrics == ref_metrics
    assert ref_weights.keys() == got_weights.keys()
    for key, tensor in ref_weights.items():
        assert torch.equal(tensor, got_weights[key]), key
    ref_last, got_last = (load_checkpoint(d / LAST_CKPT) for d in (sweep / "0", job))
    assert ref_last["global_step"] == got_last["global_step"] == 8
    for key, tensor in ref_last["state_dict"].items():
        assert torch.equal(tensor, got_last["state_dict"][key]), key
    print(f"rehearsal: {time.monotonic() - t0:.0f} s wall, preempted after step {stopped_at}")
