"""SPLADE pooling without materializing B×L×V tensors.

SPLADE's term weight is w[b, v] = max_i log1p(relu(logit[b, i, v])) over non-pad positions i. Because log1p∘relu is
monotone, this equals log1p(relu(max_i logit[b, i, v])): we take the max of *raw* logits first. The decoder matmul
runs one slab at a time into one reused buffer — a group of whole texts, or a run of positions of a text longer than a
slab — and each slab is max-reduced straight into its texts' output rows, so peak memory is O(B·V + slab) instead of
O(B·L·V), and the bias (constant over positions) is added once after the max. Columns that are padding for the whole
group are skipped; with length-sorted batches (SpladeEncoder.encode) that leaves ~2% padding, whose rows are set to
-inf before the max.

Why groups of whole texts rather than packed real tokens: torch's CPU max over the leading dim of one text's
[len, V] slice ran ~8x slower than the batched max over dim 1 of [texts, len, V] on the dev machine (AMD EPYC), which
cost more than the ~2% padding it would save.

The backward pass only needs the argmax position of each (b, v): d max / d logit is one-hot there. The incoming
gradient is non-zero only where the term is active (relu'(z) = 0 elsewhere), typically a few hundred terms per text,
so backward recomputes the logits of just those terms over the positions to find the argmax, and the gradient w.r.t.
the hidden states and the decoder weight is a sparse scatter instead of a dense B×L×V product.
"""
from __future__ import annotations

import torch
from torch import Tensor

# Size of one logits slab: 256 MiB ≈ 2,200 positions × 30,522 terms in fp32. The decoder GEMM is far more
# efficient with many rows: on the 2-core AMD EPYC dev machine (64 docs × 128 tokens, H 128, CPU seconds) GEMM alone
# took 1.39 / 1.14 / 1.02 / 1.06 s with slabs of 256 / 512 / 1024 / 2048 rows, GEMM + per-doc max 1.92 / 1.43 /
# 1.25 / 1.12 s. The slab is allocated once per call and reused, never B×L×V.
DEFAULT_CHUNK_BYTES = 256 * 2**20
# Gradient entries processed at once in backward (bounds the K×H temporaries).
_BACKWARD_CHUNK = 65536


def _positions_per_chunk(batch: int, vocab: int, element_size: int, chunk_bytes: int) -> int:
    return max(1, chunk_bytes // max(1, batch * vocab * element_size))


class MaskedMaxLogits(torch.autograd.Function):
    """z[b, v] = max over positions i with mask[b, i] of (hidden[b, i] · weight[v]) + bias[v]."""

    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, bias: Tensor | None, mask: Tensor, chunk_bytes: int) -> Tensor:
        B, L, H = hidden.shape
        V = weight.shape[0]
        w = weight.to(hidden.dtype)
        mask = mask.bool()
        rows = max(1, _positions_per_chunk(1, V, hidden.element_size(), chunk_bytes))
        # A slab is a group of whole docs (short texts) or a run of positions of one doc (texts longer than a slab).
        group, step = (max(1, rows // L), L) if L <= rows else (1, rows)
        buf = hidden.new_empty((min(rows, B * L), V))
        best = hidden.new_full((B, V), float("-inf"))
        for b0 in range(0, B, group):
            b1 = min(b0 + group, B)
            cols = mask[b0:b1].any(dim=0).nonzero()
            if cols.numel() == 0:
                continue  # only padding: these rows stay -inf
            lo_col, hi_col = int(cols[0]), int(cols[-1]) + 1  # drop the group's all-pad columns (sorted batches)
            for p0 in range(lo_col, hi_col, step):
                p1 = min(p0 + step, hi_col)
                m = mask[b0:b1, p0:p1]
                if not bool(m.any()):
                    continue
                out = buf[: (b1 - b0) * (p1 - p0)]
                torch.mm(hidden[b0:b1, p0:p1].reshape(-1, H), w.t(), out=out)
                logits = out.view(b1 - b0, p1 - p0, V)
                if not bool(m.all()):  # set only the pad rows (a masked_fill would rewrite the whole slab)
                    out.index_fill_(0, (~m).reshape(-1).nonzero().squeeze(1), float("-inf"))
                if p0 == lo_col:
                    torch.amax(logits, dim=1, out=best[b0:b1])
                else:
                    torch.maximum(best[b0:b1], logits.amax(dim=1), out=best[b0:b1])
        # the running max may be bf16/fp16 (mixed precision); the bias and everything after it are fp32
        best = best.to(torch.promote_types(hidden.dtype, torch.float32))
        if bias is not None:
            best = best + bias.to(best.dtype)
        ctx.save_for_backward(hidden, weight, mask)
        ctx.has_bias = bias is not None
        return best

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        hidden, weight, mask = ctx.saved_tensors
        B, L, H = hidden.shape
        acc = torch.promote_types(hidden.dtype, torch.float32)  # accumulate in fp32 (fp64 when given fp64)
        g_all = grad_out.to(acc)
        # nonzero() is row-major, so the (b, v) pairs come grouped by b
        b_idx, v_idx = torch.nonzero(g_all, as_tuple=True)
        # Recover the arg-max position of each active (b, v) by recomputing only those K×L logits
        # (K ≈ a few hundred per text) instead of tracking a B×V argmax through every forward chunk.
        w = weight.to(hidden.dtype)
        pos = torch.empty_like(v_idx)
        offsets = torch.zeros(B + 1, dtype=torch.long)
        offsets[1:] = torch.cumsum(torch.bincount(b_idx, minlength=B), 0).cpu()
        for b in range(B):
            lo, hi = int(offsets[b]), int(offsets[b + 1])
            if lo == hi:
                continue
            scores = w[v_idx[lo:hi]] @ hidden[b].t()  # [k_b, L]
            scores.masked_fill_(~mask[b].unsqueeze(0), float("-inf"))
            pos[lo:hi] = scores.argmax(dim=1)
        grad_hidden = grad_weight = None
        if ctx.needs_input_grad[0]:
            grad_hidden = torch.zeros((B * L, H), dtype=acc, device=hidden.device)
        if ctx.needs_input_grad[1]:
            grad_weight = torch.zeros(weight.shape, dtype=acc, device=weight.device)
        flat_hidden = hidden.reshape(B * L, H)
        for s in range(0, b_idx.numel(), _BACKWARD_CHUNK):
            b = b_idx[s : s + _BACKWARD_CHUNK]
            v = v_idx[s : s + _BACKWARD_CHUNK]
            g = g_all[b, v].unsqueeze(1)
            flat_pos = b * L + pos[s : s + _BACKWARD_CHUNK]
            if grad_hidden is not None:
                grad_hidden.index_add_(0, flat_pos, g * weight[v].to(acc))
            if grad_weight is not None:
                grad_weight.index_add_(0, v, g * flat_hidden[flat_pos].to(acc))
        if grad_hidden is not None:
            grad_hidden = grad_hidden.view(B, L, H).to(hidden.dtype)
        if grad_weight is not None:
            grad_weight = grad_weight.to(weight.dtype)
        grad_bias = grad_out.sum(0) if (ctx.has_bias and ctx.needs_input_grad[2]) else None
        return grad_hidden, grad_weight, grad_bias, None, None


def max_logits(
    hidden: Tensor, weight: Tensor, bias: Tensor | None, mask: Tensor, chunk_bytes: int = DEFAULT_CHUNK_BYTES
) -> Tensor:
    """Masked max over positions of the MLM logits, shape [B, V], without a B×L×V tensor."""
    device = hidden.device.type
    if torch.is_autocast_enabled(device):
        # autocast does not reach inside a custom Function (and refuses out= matmuls): cast explicitly instead
        dtype = torch.get_autocast_dtype(device)
        with torch.autocast(device, enabled=False):
            return MaskedMaxLogits.apply(hidden.to(dtype), weight, bias, mask, chunk_bytes)
    return MaskedMaxLogits.apply(hidden, weight, bias, mask, chunk_bytes)


def splade_activation(z: Tensor, double_log: bool = False) -> Tensor:
    """log1p(relu(z)); `double_log` adds the second log1p of the ℓ0-approximating activation (OpenSearch `use_l0`)."""
    w = torch.log1p(torch.relu(z))
    return torch.log1p(w) if double_log else w


def splade_pool(
    hidden: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    mask: Tensor,
    double_log: bool = False,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
) -> Tensor:
    """SPLADE max pooling: w[b, v] = max_i log1p(relu(logit[b, i, v])) over non-pad positions."""
    return splade_activation(max_logits(hidden, weight, bias, mask, chunk_bytes), double_log)
