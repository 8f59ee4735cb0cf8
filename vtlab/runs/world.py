"""The processes of one run, joined once before the first stage that computes, so that every stage can agree.

A run on several devices is one process per device. `join` starts them with Lightning's own launcher (Fabric's, the
one `Trainer.fit` would use: the command again for each later local rank, or nothing where SLURM or torchrun started
every task) and sets up the process group every later `Trainer` reuses. It adds a gloo group for the run's own
agreements, so that none of them needs a device tensor or a host sync of the accelerator:

- `barrier`: every rank waits here (rank 0 writes a shared file, then the others read it);
- `broadcast`: rank 0's answer becomes every rank's (whether a cache entry exists);
- `most`: the largest of the ranks' integers (the signal one rank received, agreed at a step boundary);
- `gather`: every rank's value, in rank order (each rank's random state in a checkpoint).

One process is a `World` of size 1 whose agreements return at once. Every rank must meet the same agreements in the
same order; rank 0 alone writes what the ranks share.
"""

from __future__ import annotations

import contextlib
import datetime
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

# how long a rank waits for the others at an agreement before it fails (a rank that died, not a slow step)
AGREEMENT_TIMEOUT = datetime.timedelta(minutes=30)


@dataclass(frozen=True)
class World:
    """This process's place among the run's processes: its rank, their number, its device."""

    rank: int = 0
    size: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    group: Any = None

    @property
    def leader(self) -> bool:
        """Rank 0: the one process that writes what the ranks share."""
        return self.rank == 0

    def barrier(self) -> None:
        if self.size > 1:
            dist.barrier(group=self.group)

    def broadcast(self, value: Any) -> Any:
        """Rank 0's `value`, on every rank."""
        if self.size == 1:
            return value
        box = [value if self.leader else None]
        dist.broadcast_object_list(box, src=0, group=self.group)
        return box[0]

    def most(self, value: int) -> int:
        """The largest `value` over the ranks."""
        if self.size == 1:
            return int(value)
        t = torch.tensor([int(value)], dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.group)
        return int(t[0])

    def farewell(self, timeout_s: float = 60.0) -> None:
        """The ranks' last meeting before an interrupted run exits, once rank 0 recorded how it ended: a later rank
        exiting first must not cut rank 0 short (Lightning's launcher kills the main process when a later rank exits
        non-zero). Gives up after `timeout_s`: a rank that is gone does not hold the others."""
        if self.size > 1:
            with contextlib.suppress(Exception):
                timeout = datetime.timedelta(seconds=timeout_s)
                dist.monitored_barrier(group=self.group, timeout=timeout, wait_all_ranks=True)

    def gather(self, value: Any) -> list[Any]:
        """Every rank's `value`, in rank order, on every rank."""
        if self.size == 1:
            return [value]
        out: list[Any] = [None] * self.size
        dist.all_gather_object(out, value, group=self.group)
        return out


_joined: list[World] = []


def current() -> World:
    """The world this process joined, or one process on the CPU when it joined none."""
    return _joined[0] if _joined else World()


def join(accelerator: Any = "cpu", devices: Any = 1, strategy: Any = "auto", num_nodes: Any = 1) -> World:
    """Join the run's processes as `trainer.{accelerator, devices, strategy, num_nodes}` ask (once per process: a later
    call returns the same world). Several processes: the later local ranks are started here and the process group is
    set up, before any rank reads a cache or builds a trainer."""
    if _joined:
        return _joined[0]
    from lightning_fabric import Fabric

    fabric = Fabric(
        accelerator=str(accelerator),
        devices=devices,
        strategy=strategy if isinstance(strategy, str) else "ddp",
        num_nodes=int(num_nodes or 1),
    )
    if fabric.world_size == 1:
        world = World(device=fabric.device)
    else:
        fabric.launch()
        group = dist.new_group(backend="gloo", timeout=AGREEMENT_TIMEOUT)
        world = World(rank=fabric.global_rank, size=fabric.world_size, device=fabric.device, group=group)
    _joined.append(world)
    return world


def join_trainer(trainer: Any) -> World:
    """`join` with a `trainer` config's keys (a mapping; absent keys take Lightning's defaults)."""
    get = trainer.get if hasattr(trainer, "get") else lambda k, d=None: d
    return join(get("accelerator", "auto"), get("devices", "auto"), get("strategy", "auto"), get("num_nodes", 1))
