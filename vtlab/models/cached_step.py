"""The cached (GradCache) SPLADE training step: the loss of the whole batch at the memory of a mini-batch.

Gao et al., "Scaling Deep Contrastive Learning Batch Size under Memory Limited Setup" (2021). In-batch negatives and
FLOPS couple every row of the batch, so gradient accumulation changes the objective; caching does not:

1. the batch's queries are split into mini-batches of `mini_batch` queries, each with its whole document group; each
   mini-batch is encoded and only its representations are kept (the graph is dropped at once), after recording the
   random number generators' state (CPU and the encoder's accelerator) so that dropout can be replayed;
2. the module's objective (ranking loss over the gathered batch + FLOPS, its logging and its non-finite check) runs on
   those representations as leaf tensors, and autograd gives d(total)/d(representations);
3. during the backward pass Lightning runs on the returned loss, each mini-batch is encoded again from its recorded
   generator state, under the autocast the step ran in, and its slice of that gradient is pushed through it.

Step 3 runs inside the backward of one autograd node that takes the trainable parameters as inputs and returns their
summed gradients, so each parameter receives its gradient once per step: Lightning's automatic optimization stays in
charge (gradient clipping, gradient accumulation, loss scaling, the learning-rate schedule, checkpoints), and under
DDP the reducer sees one ready signal per parameter and synchronizes once per step. The price is one buffer the size
of the trainable parameters' gradients during the backward pass.

Step 1 encodes with autograd on: vtlab.runtime.body runs the network in row chunks when autograd is off on CPU, which
would draw other dropout masks than the replay, which has autograd on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import Tensor, nn

Encode = Callable[[dict[str, Tensor], str], Tensor]
Objective = Callable[[Tensor, Tensor, dict[str, Any]], Tensor]


def mini_batches(batch: dict[str, Any], size: int) -> list[tuple[dict[str, Tensor], dict[str, Tensor]]]:
    """(query inputs, document inputs) of consecutive groups of `size` queries, each query with its whole group."""
    queries, docs = batch["query"], batch["docs"]
    n = queries["input_ids"].shape[0]
    group = docs["input_ids"].shape[0] // n
    return [
        (_rows(queries, start, start + size), _rows(docs, start * group, (start + size) * group))
        for start in range(0, n, size)
    ]


def _rows(enc: dict[str, Tensor], start: int, stop: int) -> dict[str, Tensor]:
    return {k: v[start:stop] if isinstance(v, Tensor) else v for k, v in enc.items()}


class GeneratorStates:
    """The state of the generators dropout draws from (CPU, and the accelerator `device` when it has one)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cpu = torch.get_rng_state()
        self.accelerator = _module(device).get_rng_state(device) if _module(device) is not None else None

    @contextlib.contextmanager
    def restored(self) -> Iterator[None]:
        """Inside: the generators as recorded; after: as they were before entering (the step's stream goes on)."""
        accelerator = _module(self.device)
        devices = [self.device] if accelerator is not None else []
        with torch.random.fork_rng(devices=devices, device_type=self.device.type if devices else "cuda"):
            torch.set_rng_state(self.cpu)
            if accelerator is not None:
                accelerator.set_rng_state(self.accelerator, self.device)
            yield


def _module(device: torch.device) -> Any:
    """torch.cuda (or the accelerator's module) for a device with its own generator; None on CPU."""
    if device.type == "cpu":
        return None
    return getattr(torch, device.type, None)


class Autocast:
    """The autocast state of `device_type` when recorded, re-entered by `active()` (backward runs outside it)."""

    def __init__(self, device_type: str) -> None:
        self.device_type = device_type
        self.enabled = torch.is_autocast_enabled(device_type)
        self.dtype = torch.get_autocast_dtype(device_type)
        self.cache = torch.is_autocast_cache_enabled()

    def active(self) -> contextlib.AbstractContextManager[Any]:
        return torch.autocast(self.device_type, dtype=self.dtype, enabled=self.enabled, cache_enabled=self.cache)


class CachedEncodings:
    """Step 1 (`encode`) and step 3 (`replay`) over the mini-batches of one training batch."""

    def __init__(self, encode: Encode, batch: dict[str, Any], mini_batch: int, device: torch.device) -> None:
        self.encode_fn = encode
        self.parts = mini_batches(batch, mini_batch)
        self.device = device
        self.states: list[GeneratorStates] = []
        self.autocast = Autocast(device.type)
        self.rows: list[tuple[int, int]] = []  # (queries, documents) of each mini-batch

    def _forward(self, queries: dict[str, Tensor], docs: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        return self.encode_fn(queries, "query"), self.encode_fn(docs, "doc")

    def encode(self) -> tuple[Tensor, Tensor]:
        """The representations of the whole batch, detached, with each mini-batch's generator state recorded."""
        qs, ds = [], []
        with torch.enable_grad():
            for queries, docs in self.parts:
                self.states.append(GeneratorStates(self.device))
                q, d = self._forward(queries, docs)
                qs.append(q.detach())
                ds.append(d.detach())
                self.rows.append((q.shape[0], d.shape[0]))
        return torch.cat(qs), torch.cat(ds)

    def replay(self, grad_q: Tensor, grad_d: Tensor, params: list[nn.Parameter]) -> list[Tensor | None]:
        """Σ over mini-batches of the parameters' gradients, each mini-batch encoded again as in `encode` and given
        its rows of (grad_q, grad_d)."""
        total: list[Tensor | None] = [None] * len(params)
        q_slices = grad_q.split([nq for nq, _ in self.rows])
        d_slices = grad_d.split([nd for _, nd in self.rows])
        for (queries, docs), states, gq, gd in zip(self.parts, self.states, q_slices, d_slices, strict=True):
            with states.restored(), self.autocast.active(), torch.enable_grad():
                q, d = self._forward(queries, docs)
            pairs = [(r, g.to(r.dtype)) for r, g in ((q, gq), (d, gd)) if r.requires_grad]
            if not pairs:  # e.g. an inference-free query side without a trainable IDF, and frozen documents
                continue
            grads = torch.autograd.grad([r for r, _ in pairs], params, [g for _, g in pairs], allow_unused=True)
            for i, g in enumerate(grads):
                if g is not None:
                    total[i] = g if total[i] is None else total[i] + g
        return total


class _Replay(torch.autograd.Function):
    """A zero in the forward pass; in the backward pass, the parameters' gradients by replay (step 3)."""

    @staticmethod
    def forward(ctx: Any, cache: CachedEncodings, grad_q: Tensor, grad_d: Tensor, *params: Tensor) -> Tensor:
        ctx.cache, ctx.grad_q, ctx.grad_d = cache, grad_q, grad_d
        ctx.params = params
        return grad_q.new_zeros((), dtype=torch.float32)

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Any, ...]:
        # grad_out carries what Lightning scales the loss by (1 / accumulate_grad_batches, an fp16 loss scale)
        grad_q = (ctx.grad_q * grad_out).to(ctx.grad_q.dtype)
        grad_d = (ctx.grad_d * grad_out).to(ctx.grad_d.dtype)
        grads = ctx.cache.replay(grad_q, grad_d, list(ctx.params))
        ctx.cache = ctx.params = None
        return (None, None, None, *grads)


def cached_step(
    encode: Encode, objective: Objective, batch: dict[str, Any], mini_batch: int, params: list[nn.Parameter]
) -> Tensor:
    """The step's total loss (its value), whose backward gives `params` the gradient of the uncached step."""
    cache = CachedEncodings(encode, batch, mini_batch, params[0].device)
    q, d = cache.encode()
    q.requires_grad_(True)
    d.requires_grad_(True)
    total = objective(q, d, batch)
    grad_q, grad_d = torch.autograd.grad(total, (q, d), allow_unused=True)
    grad_q = torch.zeros_like(q) if grad_q is None else grad_q
    grad_d = torch.zeros_like(d) if grad_d is None else grad_d
    return total.detach() + _Replay.apply(cache, grad_q, grad_d, *params)
