"""The cached loss (model.cached_mini_batch, vtlab/models/cached_step.py) against plain autograd, on any device.

The reference is plain autograd over the whole batch's loss: the representations encoded mini-batch by mini-batch
(one pass per mini-batch, in the order the cached step draws its dropout masks) with every graph kept, one backward.
With dropout on, that reference only matches when the cached step replays each mini-batch's dropout masks and sends
each mini-batch its own rows of the cached gradient. tests/method/test_cached_loss.py holds the claims on the CPU;
`check_on` repeats the central one on an accelerator for `make gpu-check` (vtlab/bench/gpu_check.py).
"""

from __future__ import annotations

import functools
import os
import socket
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from transformers import BertConfig, BertForMaskedLM

from vtlab.losses import InfoNCE, KLDivergence, MarginMSE
from vtlab.models.encoder import SpladeEncoder
from vtlab.models.splade import SpladeModule
from vtlab.regularizers import Flops

B, GROUP, LENGTH, VOCAB = 8, 2, 12, 64
LOSSES = {
    "infonce+flops": (InfoNCE, {}),
    "margin-mse+flops": (MarginMSE, {}),
    "kl-div+flops-l0-per-group": (KLDivergence, {"threshold": 40, "normalize": "per_group"}),
}
# fp32 on every device (TF32 off): the two orders of summation agree to rounding; under bf16 autocast the replayed
# mini-batches compute in bf16 as the uncached step does, so the two agree to bf16's rounding of the same operations
FP32_TOLERANCE = 1e-5
BF16_TOLERANCE = 2**-8 * 8  # bf16's unit roundoff, over a handful of roundings on the way to a gradient


def tiny_module(
    loss: str = "infonce+flops", cached: int | None = None, dropout: float = 0.1, device: Any = "cpu", **kw: Any
) -> SpladeModule:
    """The same weights for every call (seeded), a 2-layer BERT MLM over a 64-term vocabulary, in training mode."""
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=VOCAB,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=32,
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
    )
    encoder = SpladeEncoder(BertForMaskedLM(config), None, query_max_length=16, doc_max_length=16, precision="fp32")
    loss_class, doc_reg = LOSSES[loss]
    module = SpladeModule(
        encoder,
        loss_class(),
        functools.partial(torch.optim.AdamW, lr=1e-2),
        query_regularizer=Flops(0.1),
        doc_regularizer=Flops(0.05, **doc_reg),
        cached_mini_batch=cached,
        **kw,
    )
    module.to(device)
    module.train()
    return module


def make_batch(queries: int = B, seed: int = 1, device: Any = "cpu") -> dict:
    g = torch.Generator().manual_seed(seed)

    def side(n: int) -> dict:
        lengths = torch.randint(3, LENGTH + 1, (n,), generator=g)
        mask = (torch.arange(LENGTH)[None] < lengths[:, None]).long()
        ids = torch.randint(5, VOCAB, (n, LENGTH), generator=g) * mask
        return {"input_ids": ids.to(device), "attention_mask": mask.to(device)}

    return {
        "query": side(queries),
        "docs": side(queries * GROUP),
        "teacher_scores": (3 * torch.randn(queries, GROUP, generator=g)).to(device),
    }


def step_grads(module: SpladeModule, batch: dict, seed: int = 5) -> tuple[float, dict[str, torch.Tensor]]:
    """One training step's loss and parameter gradients (backward as Lightning runs it: outside the step)."""
    torch.manual_seed(seed)
    module.zero_grad(set_to_none=True)
    loss = module.training_step(batch, 0)
    loss.backward()
    return float(loss.detach()), {n: p.grad.clone() for n, p in module.named_parameters()}


def reference_grads(module: SpladeModule, batch: dict, mini_batch: int, seed: int = 5):
    """Plain autograd of the whole batch's loss, representations encoded `mini_batch` queries at a time."""
    torch.manual_seed(seed)
    module.zero_grad(set_to_none=True)
    qs, ds = [], []
    for start in range(0, batch["query"]["input_ids"].shape[0], mini_batch):
        rows, doc_rows = slice(start, start + mini_batch), slice(start * GROUP, (start + mini_batch) * GROUP)
        qs.append(module.encode_batch({k: v[rows] for k, v in batch["query"].items()}, "query"))
        ds.append(module.encode_batch({k: v[doc_rows] for k, v in batch["docs"].items()}, "doc"))
    loss = module.objective(torch.cat(qs), torch.cat(ds), batch)
    loss.backward()
    return float(loss.detach()), {n: p.grad.clone() for n, p in module.named_parameters()}


def worst_error(got: dict[str, torch.Tensor], ref: dict[str, torch.Tensor]) -> float:
    """The largest per-parameter relative error. A parameter whose true gradient is 0 (the attention key biases: the
    softmax ignores a shift) holds rounding noise only: its error is measured against 1e-3 of the largest gradient."""
    floor = 1e-3 * max(float(r.norm()) for r in ref.values())
    assert set(got) == set(ref)
    return max(float((got[n] - ref[n]).norm()) / max(float(ref[n].norm()), floor) for n in ref)


def bf16_step_grads(cached: int | None, device: Any) -> dict[str, torch.Tensor]:
    """One step under bf16 autocast (as the trainer's bf16-mixed runs it), backward outside autocast."""
    module = tiny_module(cached=cached, device=device)
    torch.manual_seed(5)
    with torch.autocast(torch.device(device).type, dtype=torch.bfloat16):
        loss = module.training_step(make_batch(device=device), 0)
    loss.backward()
    return {n: p.grad.clone() for n, p in module.named_parameters()}


def check_on(device: Any) -> dict[str, Any]:
    """The cached step against the whole batch's autograd on `device`, with dropout on: fp32 (TF32 off) for every
    loss, and bf16 autocast against the uncached bf16 step. Returns each worst error, its tolerance and `passed`."""
    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        errors = {}
        for loss in LOSSES:
            batch = make_batch(device=device)
            _, ref = reference_grads(tiny_module(loss, device=device), batch, mini_batch=3)
            _, got = step_grads(tiny_module(loss, cached=3, device=device), batch)
            errors[f"fp32/{loss}"] = worst_error(got, ref)
        errors["bf16/infonce+flops"] = worst_error(bf16_step_grads(B, device), bf16_step_grads(None, device))
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32
    tolerance = {k: BF16_TOLERANCE if k.startswith("bf16") else FP32_TOLERANCE for k in errors}
    return {
        "device": str(device),
        "worst_error": errors,
        "tolerance": tolerance,
        "passed": all(errors[k] <= tolerance[k] for k in errors),
    }


# ---- two processes: the cached step through DistributedDataParallel --------------------------------------------------
DDP_LOSSES = ("infonce+flops", "margin-mse+flops")


class _Step(torch.nn.Module):
    """What Lightning's DDP wraps: a forward that is the training step."""

    def __init__(self, module: SpladeModule) -> None:
        super().__init__()
        self.module = module

    def forward(self, batch: dict) -> torch.Tensor:
        return self.module.training_step(batch, 0)


def _shard(batch: dict, rank: int, world: int) -> dict:
    n = batch["query"]["input_ids"].shape[0] // world
    rows, doc_rows = slice(rank * n, (rank + 1) * n), slice(rank * n * GROUP, (rank + 1) * n * GROUP)
    return {
        "query": {k: v[rows] for k, v in batch["query"].items()},
        "docs": {k: v[doc_rows] for k, v in batch["docs"].items()},
        "teacher_scores": batch["teacher_scores"][rows],
    }


def _averaged(grads: dict[str, torch.Tensor], world: int) -> dict[str, torch.Tensor]:
    for g in grads.values():  # what DDP does to parameter gradients
        dist.all_reduce(g)
        g /= world
    return grads


def _rank_grads(loss: str, rank: int, world: int, device: torch.device) -> tuple[dict, dict, dict]:
    """(cached DDP gradients, the whole batch's averaged reference, cached DDP gradients without dropout)."""
    shard = _shard(make_batch(device=device), rank, world)
    seed = 5 + rank  # each process draws its own dropout masks
    ids = None if device.type == "cpu" else [device.index]
    ddp = torch.nn.parallel.DistributedDataParallel(_Step(tiny_module(loss, cached=3, device=device)), device_ids=ids)
    torch.manual_seed(seed)
    ddp(shard).backward()
    got = {n.removeprefix("module."): p.grad.clone().cpu() for n, p in ddp.module.named_parameters()}
    _, ref = reference_grads(tiny_module(loss, device=device), shard, mini_batch=3, seed=seed)  # 3 + 1 per process
    off = _Step(tiny_module(loss, cached=3, dropout=0.0, device=device))
    ddp_off = torch.nn.parallel.DistributedDataParallel(off, device_ids=ids)
    ddp_off(shard).backward()
    no_dropout = {n.removeprefix("module."): p.grad.clone().cpu() for n, p in ddp_off.module.named_parameters()}
    return got, {n: g.cpu() for n, g in _averaged(ref, world).items()}, no_dropout


def _worker(rank: int, port: int, device_type: str, out: dict) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    device = torch.device(device_type, rank) if device_type == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=rank, world_size=2)
    torch.set_num_threads(1)
    for loss in DDP_LOSSES:
        out[rank, loss] = _rank_grads(loss, rank, 2, device)
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def two_process_check(device_type: str = "cpu") -> dict[str, Any]:
    """The cached step on two processes (gloo on the CPU, NCCL on two GPUs), each with its half of the batch: every
    rank's gradient equals the whole batch's (the reference encoded by each rank, averaged as DDP averages), with
    dropout on; without dropout it equals the uncached one-process step's on the whole batch (on the CPU)."""
    with mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(_worker, args=(_free_port(), device_type, out), nprocs=2, join=True)
        results = dict(out)
    errors = {}
    for loss in DDP_LOSSES:
        _, one_process = step_grads(tiny_module(loss, dropout=0.0), make_batch())  # uncached, whole batch, 1 process
        for rank in (0, 1):
            got, ref, no_dropout = results[rank, loss]
            errors[f"dropout/{loss}/rank{rank}"] = worst_error(got, ref)
            errors[f"no-dropout/{loss}/rank{rank}"] = worst_error(
                no_dropout, {n: g.cpu() for n, g in one_process.items()}
            )
    return {"worst_error": errors, "tolerance": FP32_TOLERANCE, "passed": max(errors.values()) <= FP32_TOLERANCE}
