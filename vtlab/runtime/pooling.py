"""SPLADE pooling without materializing B×L×V tensors.

SPLADE's term weight is w[b, v] = max_i log1p(relu(logit[b, i, v])) over non-pad positions i. Because log1p∘relu is
monotone, this equals log1p(relu(max_i logit[b, i, v])): we take the max of *raw* logits first. The decoder matmul
runs one cache-sized tile at a time — a group of whole texts (or a run of positions of a long text) × a block of
vocabulary columns — and each tile is max-reduced straight into its texts' output rows while it is still in cache, so
peak memory is O(B·V + tile) instead of O(B·L·V), and the bias (constant over positions) is added once after the max.
Columns that are padding for the whole group are skipped; with length-sorted batches (SpladeEncoder.encode) that
leaves ~2% padding, whose rows are set to -inf before the max.

Why tiles over the vocabulary too: for small hidden sizes (SPLADE-tiny's 128) the logits GEMM is bound by writing its
output, not by arithmetic. A slab of whole rows × all 30k columns (hundreds of MB) goes to DRAM and the max reads it
back; a ~4 MiB tile stays in cache for the max, so the GEMM + max in tiles takes less time than the GEMM into slabs
alone.

A decoder other than a float weight matrix (the int8 one of vtlab.runtime.quantize) runs through the same tiles
(`tiled_max_logits`): it prepares each tile's hidden states once (quantizes them) for all of the tile's column blocks.

The backward pass only needs the argmax position of each (b, v): d max / d logit is one-hot there. The incoming
gradient is non-zero only where the term is active (relu'(z) = 0 elsewhere), typically a few hundred terms per text,
so backward recomputes the logits of just those terms over the positions to find the argmax, and the gradient w.r.t.
the hidden states and the decoder weight is a sparse scatter instead of a dense B×L×V product.

On an accelerator (any device but the CPU: `max_logits` picks the path by `device.type`) that design would be a
Python loop of small kernels with a host sync per tile (the all-pad checks, nonzero). There `block_max_logits` runs
the vocabulary in a few large column blocks, sized from the shapes alone by a memory budget (`block_columns`): per
block one GEMM over every position of the batch, the pad positions set to -inf, a max over positions that also
keeps the arg-max position. Backward scatters each block's incoming gradient to those positions (a [B, L, columns]
block that is zero elsewhere) and multiplies it by the weight block (gradient w.r.t. the hidden states) and by the
hidden states (w.r.t. the weight block): two GEMMs per block. Nothing reads a device value on the host, so a step
queues its kernels without waiting for the device.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import Tensor

from vtlab.runtime import fused
from vtlab.runtime.native import Kernel

# Bytes of one logits tile (rows × columns), reused for every tile of a call: small enough to stay in L2/L3.
DEFAULT_CHUNK_BYTES = 4 * 2**20
# Vocabulary columns per tile (fewer only when chunk_bytes is smaller than one such row).
TILE_COLUMNS = 2048
# Gradient entries processed at once in backward (bounds the K×H temporaries).
_BACKWARD_CHUNK = 65536
# The accelerator path (block_max_logits): bytes of one [B, L, columns] block of logits (forward) or of scattered
# gradient (backward), the one temporary of B·L rows it allocates.
BLOCK_BYTES = 256 * 2**20
# Column blocks are a multiple of this many columns (GEMM-friendly widths) where the budget allows that many.
BLOCK_ALIGN = 128
# The max over positions of a bf16 tile in C (vtlab/runtime/maxpool.c); torch's amax without it and for fp32, where
# torch's own (multi-threaded) amax is faster than one thread of the kernel.
MAX_KERNEL = Kernel(
    Path(__file__).with_name("maxpool.c"),
    ("-O3", "-shared", "-fPIC", "-fno-math-errno"),
    what="max-pooling kernel",
    fallback="SPLADE pooling takes the max with torch",
)


@functools.cache
def _bf16_max() -> Callable[..., None] | None:
    lib = MAX_KERNEL.load()
    if lib is None:
        return None
    i64, p = ctypes.c_int64, ctypes.c_void_p
    lib.vt_max_bf16.argtypes, lib.vt_max_bf16.restype = [p, i64, i64, i64, p, i64, i64], None
    return lib.vt_max_bf16


def _max_into(tile: Tensor, best: Tensor, b0: int, b1: int, v0: int, init: bool) -> None:
    """best[b0:b1, v0:v0+cols] = max(itself unless init, max over positions of tile [texts, positions, cols])."""
    texts, rows, cols = tile.shape
    target = best[b0:b1, v0 : v0 + cols]
    fast = tile.dtype == torch.bfloat16 and tile.device.type == "cpu" and best.dtype == torch.float32
    f = _bf16_max() if fast and tile.is_contiguous() and best.is_contiguous() else None
    if f is not None:
        f(tile.data_ptr(), texts, rows, cols, target.data_ptr(), best.shape[1], int(init))
    elif init:
        target.copy_(tile.amax(dim=1))
    else:
        torch.maximum(target, tile.amax(dim=1).to(target.dtype), out=target)


def tile_shape(length: int, vocab: int, element_size: int, chunk_bytes: int) -> tuple[int, int, int]:
    """(texts per tile, positions per tile, vocabulary columns per tile) for texts padded to `length`."""
    elems = max(1, chunk_bytes // element_size)
    cols = min(vocab, TILE_COLUMNS, elems)
    rows = max(1, elems // cols)
    return (max(1, rows // length), length, cols) if length <= rows else (1, rows, cols)


class TileLogits(Protocol):
    """A decoder the tiled max can run other than as an fp32/bf16 matmul (vtlab.runtime.quantize.Int8Decoder): the
    logits of one tile, from hidden states prepared once per tile (e.g. quantized) for all its column blocks."""

    bias: Tensor | None

    @property
    def vocab_size(self) -> int: ...

    def prepare(self, x: Tensor, real: Tensor | None = None) -> Any: ...

    def logits(self, prepared: Any, v0: int, v1: int, cols: int) -> Tensor: ...

    def fused_max(self, hidden: Tensor, mask: Tensor) -> Tensor | None:
        """The whole masked max [B, V] (no bias) in one fused kernel where this CPU has one; None: run the tiles."""
        ...


def _tiled_max(
    hidden: Tensor,
    mask: Tensor,
    vocab: int,
    chunk_bytes: int,
    prepare: Callable[[Tensor, Tensor | None], Any],
    logits: Callable[[Any, int, int, int, Tensor], Tensor],
) -> Tensor:
    """best[b, v] = max over positions with mask of logits(...)[row, v - v0], one cache-sized tile at a time (see the
    module). prepare(x [rows, H], real-row mask or None) runs once per tile of positions; logits(prepared, v0, v1,
    cols, out) returns the tile's [rows, v1 - v0] logits (in `out`, or a tensor of its own)."""
    B, L, H = hidden.shape
    V = vocab
    mask = mask.bool()
    group, step, cols = tile_shape(L, V, hidden.element_size(), chunk_bytes)
    buf = hidden.new_empty(min(group * step, B * L) * cols)
    # the running max is fp32 for bf16/fp16 logits too (exact: the max of widened values), fp64 for fp64
    best = hidden.new_full((B, V), float("-inf"), dtype=torch.promote_types(hidden.dtype, torch.float32))
    for b0 in range(0, B, group):
        b1 = min(b0 + group, B)
        real = mask[b0:b1].any(dim=0).nonzero()
        if real.numel() == 0:
            continue  # only padding: these rows stay -inf
        lo_col, hi_col = int(real[0]), int(real[-1]) + 1  # drop the group's all-pad columns (sorted batches)
        for p0 in range(lo_col, hi_col, step):
            p1 = min(p0 + step, hi_col)
            m = mask[b0:b1, p0:p1]
            if not bool(m.any()):
                continue
            x = hidden[b0:b1, p0:p1].reshape(-1, H)
            pad = None if bool(m.all()) else (~m).reshape(-1).nonzero().squeeze(1)
            prepared = prepare(x, None if pad is None else m.reshape(-1))
            for v0 in range(0, V, cols):
                v1 = min(v0 + cols, V)
                out = logits(prepared, v0, v1, cols, buf[: x.shape[0] * (v1 - v0)].view(x.shape[0], v1 - v0))
                if pad is not None:  # only the pad rows (a masked_fill would rewrite the whole tile)
                    out.index_fill_(0, pad, float("-inf"))
                _max_into(out.view(b1 - b0, p1 - p0, v1 - v0), best, b0, b1, v0, init=p0 == lo_col)
    return best


class MaskedMaxLogits(torch.autograd.Function):
    """z[b, v] = max over positions i with mask[b, i] of (hidden[b, i] · weight[v]) + bias[v]."""

    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, bias: Tensor | None, mask: Tensor, chunk_bytes: int) -> Tensor:
        mask = mask.bool()
        best = fused.max_logits(hidden, weight, mask)  # GEMM and max fused, where a kernel computes this dtype here
        if best is None:
            w = weight.to(hidden.dtype)
            best = _tiled_max(
                hidden,
                mask,
                w.shape[0],
                chunk_bytes,
                lambda x, real: x,
                lambda x, v0, v1, cols, out: torch.mm(x, w[v0:v1].t(), out=out),
            )
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


def block_columns(batch: int, length: int, vocab: int, element_size: int, block_bytes: int = BLOCK_BYTES) -> int:
    """Vocabulary columns per block of the accelerator path: as many as keep a [batch, length, columns] block of
    `element_size`-byte values within `block_bytes`, rounded down to a multiple of BLOCK_ALIGN where that leaves at
    least one multiple (at least 1, at most `vocab`)."""
    cols = block_bytes // max(1, batch * length * element_size)
    if cols >= BLOCK_ALIGN:
        cols -= cols % BLOCK_ALIGN
    return max(1, min(vocab, cols))


class BlockMaxLogits(torch.autograd.Function):
    """MaskedMaxLogits for an accelerator: the same z[b, v], in large column blocks with no host sync (module)."""

    @staticmethod
    def forward(
        ctx, hidden: Tensor, weight: Tensor, bias: Tensor | None, mask: Tensor, block_bytes: int, track: bool
    ) -> Tensor:
        B, L, H = hidden.shape
        V = weight.shape[0]
        w = weight.to(hidden.dtype)  # the GEMM runs in hidden's dtype (bf16 under autocast), like the CPU path
        x = hidden.reshape(B * L, H)
        pad = ~mask.bool().reshape(B, L, 1)
        cols = block_columns(B, L, V, hidden.element_size(), block_bytes)
        buf = hidden.new_empty(B * L * cols)
        # the max of bf16/fp16 logits is exact; it and the bias after it are fp32 (fp64 for fp64)
        best = hidden.new_empty((B, V), dtype=torch.promote_types(hidden.dtype, torch.float32))
        pos = hidden.new_empty((B, V), dtype=torch.long) if track else None  # arg-max position, for backward
        for v0 in range(0, V, cols):
            v1 = min(v0 + cols, V)
            block = torch.mm(x, w[v0:v1].t(), out=buf[: B * L * (v1 - v0)].view(B * L, v1 - v0))
            block = block.view(B, L, v1 - v0).masked_fill_(pad, float("-inf"))
            if pos is None:
                best[:, v0:v1] = block.amax(dim=1)
            else:
                values, where = block.max(dim=1)
                best[:, v0:v1] = values
                pos[:, v0:v1] = where
        if bias is not None:
            best += bias.to(best.dtype)
        ctx.save_for_backward(hidden, w, pos)
        ctx.has_bias, ctx.block_bytes, ctx.weight_dtype = bias is not None, block_bytes, weight.dtype
        return best

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        hidden, w, pos = ctx.saved_tensors
        assert pos is not None  # a graph exists only when forward tracked (block_max_logits)
        B, L, H = hidden.shape
        V = w.shape[0]
        acc = torch.promote_types(hidden.dtype, torch.float32)
        x = hidden.reshape(B * L, H)
        g = grad_out.to(hidden.dtype)  # the scattered block is multiplied in the GEMM's dtype
        cols = block_columns(B, L, V, hidden.element_size(), ctx.block_bytes)
        buf = hidden.new_empty(B * L * cols)
        grad_hidden = x.new_zeros((B * L, H), dtype=acc) if ctx.needs_input_grad[0] else None
        grad_weight = x.new_empty((V, H), dtype=acc) if ctx.needs_input_grad[1] else None
        for v0 in range(0, V, cols):
            v1 = min(v0 + cols, V)
            # d z[b, v] / d logit[b, i, v] is one-hot at the arg-max position i = pos[b, v]
            onehot = buf[: B * L * (v1 - v0)].view(B, L, v1 - v0).zero_()
            onehot.scatter_(1, pos[:, None, v0:v1], g[:, None, v0:v1])
            flat = onehot.view(B * L, v1 - v0)
            if grad_hidden is not None:
                grad_hidden += flat @ w[v0:v1]
            if grad_weight is not None:
                grad_weight[v0:v1] = flat.t() @ x
        if grad_hidden is not None:
            grad_hidden = grad_hidden.view(B, L, H).to(hidden.dtype)
        if grad_weight is not None:
            grad_weight = grad_weight.to(ctx.weight_dtype)
        grad_bias = grad_out.sum(0) if (ctx.has_bias and ctx.needs_input_grad[2]) else None
        return grad_hidden, grad_weight, grad_bias, None, None, None


def _outside_autocast(apply: Callable[..., Tensor], hidden: Tensor, *args: Any) -> Tensor:
    """apply(hidden, *args), with hidden cast to the autocast dtype where autocast is on for its device: autocast does
    not reach inside a custom Function (and refuses out= matmuls)."""
    device = hidden.device.type
    if torch.amp.is_autocast_available(device) and torch.is_autocast_enabled(device):
        dtype = torch.get_autocast_dtype(device)
        with torch.autocast(device, enabled=False):
            return apply(hidden.to(dtype), *args)
    return apply(hidden, *args)


def max_logits(
    hidden: Tensor, weight: Tensor, bias: Tensor | None, mask: Tensor, chunk_bytes: int = DEFAULT_CHUNK_BYTES
) -> Tensor:
    """Masked max over positions of the MLM logits, shape [B, V], without a B×L×V tensor: on the CPU in cache-sized
    tiles of `chunk_bytes` (or a fused kernel), on any other device in large column blocks (block_max_logits)."""
    if hidden.device.type != "cpu":
        return block_max_logits(hidden, weight, bias, mask)
    return _outside_autocast(MaskedMaxLogits.apply, hidden, weight, bias, mask, chunk_bytes)


def block_max_logits(
    hidden: Tensor, weight: Tensor, bias: Tensor | None, mask: Tensor, block_bytes: int = BLOCK_BYTES
) -> Tensor:
    """max_logits as an accelerator computes it (the path max_logits takes off the CPU; callable on any device): one
    GEMM and one masked max per block of `block_columns` vocabulary columns, no host sync in forward or backward."""
    track = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (hidden, weight, bias))
    return _outside_autocast(BlockMaxLogits.apply, hidden, weight, bias, mask, block_bytes, track)


def tiled_max_logits(hidden: Tensor, head: TileLogits, mask: Tensor, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> Tensor:
    """max_logits for a decoder that is no fp32 weight matrix (int8: vtlab.runtime.quantize), inference only: the
    same tiles (or `head`'s fused kernel), the max on `head`'s logits of each tile, the bias added after the max."""
    best = head.fused_max(hidden, mask)
    if best is None:
        best = _tiled_max(
            hidden,
            mask,
            head.vocab_size,
            chunk_bytes,
            head.prepare,
            lambda prepared, v0, v1, cols, out: head.logits(prepared, v0, v1, cols),
        )
    return best if head.bias is None else best + head.bias
