"""A run on two devices from the command line (trainer=ddp, 2 CPU processes): the launcher starts the command again
for rank 1 when the run's processes join (vtlab.runs.world); rank 0 admits the run and owns its directory (lock,
status.json), rank 1 takes where it starts and writes none of them (vtlab.runs.ranks), told by the launchers'
variables."""

from __future__ import annotations

import pytest

from vtlab.runs.ranks import later_rank


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


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"LOCAL_RANK": "0"},
        {"LOCAL_RANK": "1"},
        {"RANK": "0", "LOCAL_RANK": "0"},
        {"RANK": "3", "LOCAL_RANK": "1"},
        {"RANK": "2", "LOCAL_RANK": "0"},
        {"SLURM_PROCID": "0"},
        {"SLURM_PROCID": "7"},
        {"SLURM_PROCID": "0", "LOCAL_RANK": "1"},
        {"SLURM_PROCID": "5", "RANK": "5", "LOCAL_RANK": "1"},
    ],
    ids=lambda env: ",".join(f"{k}={v}" for k, v in env.items()) or "none",
)
def test_a_later_rank_is_what_lightning_calls_a_rank_after_0(monkeypatch, env) -> None:
    """The launchers' environments (Lightning's, torchrun's, SLURM's): vtlab's rule and Lightning's own agree."""
    from lightning_fabric.utilities.rank_zero import _get_rank

    for name in ("LOCAL_RANK", "RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert later_rank() is ((_get_rank() or 0) > 0)


# two processes from the command line training into one run directory (one first line, the later rank's log in it,
# nothing beside it), stopped by SIGTERM and resumed to a finished run: `make gpu-check-cpu`'s sigterm steps
# (vtlab/bench/gpu_check.py, run by tests/runs/test_gpu_check.py)
