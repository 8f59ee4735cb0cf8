"""The cached loss (model.cached_mini_batch, vtlab/models/cached_step.py) against plain autograd, on any device.

The reference is plain autograd over the whole batch's loss: the representations encoded mini-batch by mini-batch
(one pass per mini-batch, in the order the cached step draws its dropout masks) with every graph kept, one backward.
With dropout on, that reference only matches when the cached step replays each mini-batch's dropout masks and sends
each mini-batch its own rows of the cached gradient. tests/method/test_cached_loss.py holds the claims on the CPU;
`check_on` repeats the central one on an accelerator for `make gpu-check` (vtlab/bench/gpu_check.py).
"""

from __future__ import annotations

import functools
from typing import Any

import torch
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
