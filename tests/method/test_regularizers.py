"""Regularizers: hand-computed values, the λ schedule, and FLOPS invariance to the number of processes."""

import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from vtlab.regularizers import L1, Flops

W = torch.tensor([[1.0, 0.0, 2.0, 0.0], [3.0, 0.0, 0.0, 0.0], [0.0, 0.0, 1.0, 1.0]])


def test_flops_value():
    # column means of |W|: [4/3, 0, 1, 1/3] → squares summed: 16/9 + 1 + 1/9 = 26/9
    assert Flops(1.0).penalty(W).item() == pytest.approx(26 / 9)


def test_flops_l0_threshold_only_penalizes_dense_rows():
    # active counts per row: 2, 1, 2 → threshold 1 keeps rows 0 and 2 only (row 1 zeroed, still in the mean)
    # column means: [1/3, 0, 1, 1/3] → 1/9 + 1 + 1/9
    assert Flops(1.0, threshold=1).penalty(W).item() == pytest.approx(11 / 9)
    assert Flops(1.0, threshold=5).penalty(W).item() == 0.0


def test_l1_value():
    # row sums 3, 3, 2 → mean 8/3
    assert L1(1.0).penalty(W).item() == pytest.approx(8 / 3)


def test_quadratic_warmup_with_delay():
    reg = Flops(weight=2.0, warmup_steps=10, delay_steps=5)
    assert reg.weight_at(0) == 0.0
    assert reg.weight_at(5) == 0.0
    assert reg.weight_at(10) == pytest.approx(2.0 * (5 / 10) ** 2)
    assert reg.weight_at(15) == pytest.approx(2.0)
    assert reg.weight_at(1000) == pytest.approx(2.0)
    weighted, raw, lam = reg(W, step=10)
    assert lam == pytest.approx(0.5) and weighted.item() == pytest.approx(0.5 * raw.item())
    assert Flops(weight=1.0).weight_at(0) == 1.0  # no warm-up: full weight at once


@pytest.mark.parametrize("bad", [dict(weight=-1.0), dict(weight=1.0, warmup_steps=-1), dict(weight=1.0, threshold=-3)])
def test_bad_arguments(bad):
    with pytest.raises(ValueError, match="regularizer"):
        Flops(**bad)


# ---- FLOPS under data parallelism: same value and same (DDP-averaged) gradient as one process on the whole batch ----


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _full_batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(8, 5, generator=g)
    p = torch.randn(5, 12, generator=g)
    return x, p


def _flops_and_grad(x, p, threshold=None):
    p = p.clone().requires_grad_(True)
    reps = torch.relu(x @ p)  # sparse-ish non-negative "representations" from a shared parameter
    value = Flops(1.0, threshold=threshold)(reps, step=0)[0]
    value.backward()
    return value.detach(), p.grad


def _worker(rank, world, port, threshold, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    x, p = _full_batch()
    shard = x.chunk(world)[rank]
    value, grad = _flops_and_grad(shard, p, threshold)
    dist.all_reduce(grad)  # what DDP does to parameter gradients: average over ranks
    grad /= world
    out[rank] = (value, grad)
    dist.destroy_process_group()


@pytest.mark.cli
@pytest.mark.parametrize("threshold", [None, 6])
def test_flops_same_with_one_or_two_processes(threshold):
    x, p = _full_batch()
    ref_value, ref_grad = _flops_and_grad(x, p, threshold)
    with mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(_worker, args=(2, _free_port(), threshold, out), nprocs=2, join=True)
        results = dict(out)
    for rank in (0, 1):
        value, grad = results[rank]
        assert torch.allclose(value, ref_value, atol=1e-6)
        assert torch.allclose(grad, ref_grad, atol=1e-6)
    # and a naive per-process FLOPS would differ: the invariance is not trivial
    naive = sum(_flops_and_grad(s, p, threshold)[0] for s in x.chunk(2)) / 2
    assert not torch.allclose(naive, ref_value, atol=1e-3)
