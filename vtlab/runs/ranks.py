"""Which process of a run this is. A run on several devices is one process per device: Lightning's DDP launcher starts
rank 0 as the command and, once rank 0 reaches training, the command again for each later rank with LOCAL_RANK set
(torchrun: RANK; SLURM with several tasks: every task at once, SLURM_PROCID). Rank 0 admits the run and owns its
directory: the lock, status.json, the records; a later rank takes where rank 0 starts and writes none of them.

Under SLURM the tasks start together, so a later task reads the run directory while task 0 may still be admitting
it: a fresh run (no checkpoint) and a resume (its last.ckpt) read the same either way; overwrite=true over an earlier
run's checkpoints does not, and is not for a multi-task job (docs/cluster.md).

Lightning reads the same variables (lightning_fabric.utilities.rank_zero._get_rank; tests/runs/test_ddp_cli.py checks
that the two agree on every launcher's environment), but importing it loads torch, and `python -m vtlab` asks which
rank it is before torch loads (its first line, vtlab/__main__.py); a blank variable is no rank here, an error there."""

from __future__ import annotations

import os

RANK_VARIABLES = ("LOCAL_RANK", "RANK", "SLURM_PROCID")  # Lightning's launcher, torchrun, SLURM's tasks


def later_rank() -> bool:
    """Whether this process is a rank after the first of a run that rank 0 admitted."""
    for name in RANK_VARIABLES:
        value = os.environ.get(name, "").strip()
        if value.isdigit() and int(value) > 0:
            return True
    return False
