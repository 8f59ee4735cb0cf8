"""The run's processes agree (vtlab.runs.world): on one process every agreement returns at once; on two gloo
processes rank 0's answer is every rank's, the largest signal wins, each rank's random streams are saved and restored
as its own, and a rank that received no signal stops at the same step as the one that did."""

from __future__ import annotations

import os
import signal
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from vtlab.callbacks.resume_state import ResumeState
from vtlab.runs import signals, world
from vtlab.runs.world import World, join


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setattr(world, "_joined", [])


def test_one_process_agrees_with_itself(fresh) -> None:
    w = join("cpu", 1)
    assert (w.rank, w.size, w.device, w.leader) == (0, 1, torch.device("cpu"), True)
    assert join("cpu", 1) is w and world.current() is w  # once per process
    assert w.broadcast({"a": 1}) == {"a": 1} and w.most(7) == 7 and w.gather("x") == ["x"]
    w.barrier()
    w.farewell()


def test_a_rank_with_no_signal_raises_the_one_another_rank_received(monkeypatch) -> None:
    """`agreed` asks the world's maximum; with a rank that noted SIGUSR1, this rank (nothing noted) gets it too."""
    monkeypatch.setattr(signals, "_pending", [])
    monkeypatch.setattr(signals, "_stopping", False)
    assert signals.agreed(World().most) is None
    other_rank = int(signal.SIGUSR1)
    assert signals.agreed(lambda mine: max(mine, other_rank)) == signal.SIGUSR1
    with pytest.raises(signals.Terminated) as raised:
        signals.raise_pending(signals.agreed(lambda mine: max(mine, other_rank)))
    assert raised.value.signum == signal.SIGUSR1
    # the run is stopping: a further signal (another rank ending first may send one) is only logged, not raised
    signals.raise_terminated(int(signal.SIGTERM), None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, port: int, out: dict) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    w = World(rank=rank, size=2, group=dist.new_group(backend="gloo"))
    world._joined[:] = [w]
    answer = w.broadcast(f"rank {rank}'s answer")
    most = w.most(10 * rank + 3)
    gathered = w.gather(rank * 11)
    w.barrier()
    # each rank draws its own stream; the checkpoint keeps both and each rank gets its own back
    torch.manual_seed(100 + rank)
    callback = ResumeState()
    saved = callback.state_dict()
    after_save = torch.rand(3)
    torch.manual_seed(999)
    callback.load_state_dict(saved)
    callback.on_train_start(None, None)
    restored = torch.rand(3)
    w.farewell()
    out[rank] = (answer, most, gathered, len(saved["rng_by_rank"]), torch.equal(after_save, restored))
    dist.destroy_process_group()


@pytest.mark.cli
def test_two_processes_agree() -> None:
    with mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(_worker, args=(_free_port(), out), nprocs=2, join=True)
        results = dict(out)
    for rank in (0, 1):
        answer, most, gathered, streams, own_stream = results[rank]
        assert answer == "rank 0's answer"
        assert most == 13 and gathered == [0, 11]
        assert streams == 2 and own_stream, rank


def test_a_checkpoint_of_another_process_count_continues_rank_0s_streams(fresh, caplog) -> None:
    torch.manual_seed(5)
    saved = ResumeState().state_dict()
    expected = torch.rand(2)
    saved["rng_by_rank"] = [saved["rng"], saved["rng"]]  # written by two processes, read by one
    callback = ResumeState()
    callback.load_state_dict(saved)
    callback.on_train_start(None, None)
    assert torch.equal(torch.rand(2), expected)
    assert "random streams of 2 processes, this run has 1" in caplog.text
