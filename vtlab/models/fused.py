"""SPLADE's max-pooled logits with the GEMM and the max fused in one C kernel, for bf16 (vtlab.models.pooling's bf16
path) and int8 (vtlab.models.quantize's decoder): the [tokens × vocabulary] logits are never written to memory, so the
head costs the dot products plus a max from L1 or registers.

Two kernels, the first whose CPU flags this machine has:
- Intel AMX (`amx_bf16`, `amx_int8`: Xeon since Sapphire Rapids), vtlab/models/amx.c: 16 × 16 tiles of logits. One
  thread, SPLADE-tiny's 30,522 × 128 decoder, 64 texts, 8,204 tokens, AMX Xeon: bf16 53 ms, vs 104 ms for oneDNN's
  bf16 GEMM alone (its output in bf16, before any max) and ~370 ms for fp32's GEMM.
- AVX-512 with `avx512_bf16` and `avx512_vnni` but no AMX (AMD Zen 4/5, Intel Cooper Lake), vtlab/models/avx512.c:
  8 tokens × 48 columns accumulated in registers by vdpbf16ps / vpdpbusd.

Each of torch's intra-op threads takes a share of the vocabulary columns for the whole batch (one ctypes call per
thread per batch: the GIL is released inside it). Both kernels read the weights in AMX's operand layout (`pack`),
packed once per weight version. Without a kernel (another CPU, no compiler that supports its instructions,
VTLAB_NATIVE=0, Linux refusing AMX state) the functions return None and the caller runs its tiled GEMM.
"""

from __future__ import annotations

import ctypes
import functools
import os
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from vtlab.models.precision import cpu_flags
from vtlab.native import Kernel


@dataclass(frozen=True)
class FusedKernel:
    """A C source defining vt_fused_max_bf16 and vt_fused_max_int8 (same signatures), the CPU flags it needs, and
    the function that must return 0 before it runs (AMX: permission to use tile state), if any."""

    name: str
    kernel: Kernel
    flags: frozenset[str]
    init: str | None = None


AMX = FusedKernel(
    "amx",
    Kernel(
        Path(__file__).with_name("amx.c"),
        ("-O3", "-shared", "-fPIC", "-fno-math-errno", "-mamx-tile", "-mamx-bf16", "-mamx-int8", "-mavx512f"),
        what="AMX pooling kernel",
        fallback="pooling uses its tiled GEMM",
    ),
    frozenset({"amx_tile", "amx_bf16", "amx_int8", "avx512f"}),
    init="vt_amx_init",
)
AVX512 = FusedKernel(
    "avx512",
    Kernel(
        Path(__file__).with_name("avx512.c"),
        ("-O3", "-shared", "-fPIC", "-fno-math-errno", "-mavx512f", "-mavx512bw", "-mavx512bf16", "-mavx512vnni"),
        what="AVX-512 pooling kernel",
        fallback="pooling uses its tiled GEMM",
    ),
    frozenset({"avx512f", "avx512bw", "avx512_bf16", "avx512_vnni"}),
)
KERNELS = (AMX, AVX512)  # preferred first
GROUP_TOKENS = 4096  # tokens whose hidden states (≤ 1 MiB at H 128) stay in L2 while every column block passes
MIN_BLOCKS_PER_THREAD = 64  # column blocks of 16: a thread takes at least 1,024 vocabulary columns

# id(weight) → (a weak reference to it, its version when packed, the packed copy, its per-column sums [V padded] for
# int8's zero points); a few entries (query and document networks), dropped with their weight
_packed: dict[int, tuple[weakref.ref, int, Tensor, Tensor | None]] = {}


@functools.cache
def open_kernel(fused: FusedKernel) -> ctypes.CDLL | None:
    """`fused`'s library, ready to call, or None where this CPU lacks its flags or it cannot be built or started."""
    if not fused.flags <= cpu_flags():
        return None
    lib = fused.kernel.load()
    if lib is None:
        return None
    i64, p = ctypes.c_int64, ctypes.c_void_p
    lib.vt_fused_max_bf16.argtypes = [p, p, i64, i64, p, i64, i64, p, i64, i64]
    lib.vt_fused_max_bf16.restype = None
    lib.vt_fused_max_int8.argtypes = [p, p, p, p, i64, i64, p, p, i64, i64, p, i64, i64]
    lib.vt_fused_max_int8.restype = None
    if fused.init is not None:
        init = getattr(lib, fused.init)
        init.argtypes, init.restype = [], i64
        if init() != 0:
            return None
    return lib


def runnable() -> tuple[FusedKernel, ...]:
    """The KERNELS that run on this machine, preferred first."""
    return tuple(k for k in KERNELS if open_kernel(k) is not None)


def in_use() -> str | None:
    """The name of the kernel the pooling uses here (None: its tiled GEMM)."""
    return next((k.name for k in runnable()), None)


def _kernel() -> ctypes.CDLL | None:
    """The first of KERNELS that runs here, or None."""
    return next((lib for k in KERNELS if (lib := open_kernel(k)) is not None), None)


def available() -> bool:
    return _kernel() is not None


@functools.cache
def _helpers(n: int, pid: int) -> ThreadPoolExecutor:
    """n helper threads of process `pid`: a child forked after they started does not have them (its copy of the
    executor would queue work no thread runs), so it gets its own."""
    return ThreadPoolExecutor(n, thread_name_prefix="vtlab-fused")


def pack(weight: Tensor, dtype: torch.dtype) -> Tensor:
    """[V, H] → AMX's B operand per block of 16 columns and k-step: bf16 [V/16, H/32, 16, 16, 2] (row r of a step:
    the pairs 2r, 2r + 1 of the 16 columns, side by side) or int8 [V/16, H/64, 16, 16, 4] (quads); V padded to a
    multiple of 16 with zeros."""
    group = 2 if dtype == torch.bfloat16 else 4
    V, H = weight.shape
    Vp = -(-V // 16) * 16
    w = torch.zeros(Vp, H, dtype=dtype)
    w[:V] = weight.detach()
    return w.view(Vp // 16, 16, H // (16 * group), 16, group).permute(0, 2, 3, 1, 4).contiguous()


def _packed_weight(weight: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor | None]:
    """(pack(weight, dtype), for int8 the packed columns' sums in fp32), made once per weight version."""
    key = id(weight)
    version = -1 if weight.is_inference() else weight._version  # an inference tensor cannot change in place
    cached = _packed.get(key)
    if cached is None or cached[0]() is not weight or cached[1] != version:
        packed = pack(weight, dtype)
        sums = packed.sum(dim=(1, 2, 4), dtype=torch.int32).flatten().float() if dtype == torch.int8 else None
        cached = (weakref.ref(weight, lambda _: _packed.pop(key, None)), version, packed, sums)
        _packed[key] = cached
    return cached[2], cached[3]


def _tokens(hidden: Tensor, mask: Tensor) -> tuple[Tensor, Tensor, int]:
    """(the real tokens' hidden states [tokens + 16, H], zero rows after them: AMX loads whole 16-row tiles; the text
    of each token; the number of tokens)."""
    mask = mask.bool()
    lengths = mask.sum(dim=1)
    tokens = int(lengths.sum())
    x = hidden.new_zeros(tokens + 16, hidden.shape[2])
    x[:tokens] = hidden[mask]
    return x, torch.repeat_interleave(torch.arange(hidden.shape[0]), lengths.cpu()), tokens


def _split_columns(blocks: int, run: Callable[[int, int], None]) -> None:
    """run(first block, end block) on each of torch's intra-op threads' share of the column blocks."""
    parts = max(1, min(torch.get_num_threads(), blocks // MIN_BLOCKS_PER_THREAD))
    edges = [blocks * i // parts for i in range(parts + 1)]
    helpers = _helpers(parts - 1, os.getpid()) if parts > 1 else None
    pending = [helpers.submit(run, edges[i], edges[i + 1]) for i in range(1, parts)] if helpers else []
    run(edges[0], edges[1])
    for p in pending:
        p.result()


def max_logits(hidden: Tensor, weight: Tensor, mask: Tensor) -> Tensor | None:
    """[B, V] fp32: max over the positions with mask of hidden[b, i] · weight[v] in bf16 (no bias); None when the
    kernel cannot run here or for these shapes (H not a multiple of 32)."""
    B, _, H = hidden.shape
    if hidden.device.type != "cpu" or hidden.dtype != torch.bfloat16 or H % 32 or (lib := _kernel()) is None:
        return None
    x, text_of, tokens = _tokens(hidden, mask)
    w, _ = _packed_weight(weight, torch.bfloat16)
    best = torch.full((B, w.shape[0] * 16), float("-inf"))
    if tokens:
        args = (x.data_ptr(), text_of.data_ptr(), tokens, H, w.data_ptr())
        _split_columns(
            w.shape[0],
            lambda c0, c1: lib.vt_fused_max_bf16(*args, c0, c1, best.data_ptr(), best.shape[1], GROUP_TOKENS),
        )
    return best[:, : weight.shape[0]]


def quantize_tokens(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Per-token asymmetric uint8 (x ≈ scale · (q − zero)), each row's range widened to include 0: (q, scale, zero),
    the last two fp32; |x − scale · (q − zero)| ≤ scale / 2 inside the range."""
    x = x.float()
    lo = x.amin(dim=1).clamp_max(0)
    hi = x.amax(dim=1).clamp_min(0)
    scale = ((hi - lo) / 255).clamp_min(1e-12)
    zero = torch.round(-lo / scale)
    q = torch.round(x / scale[:, None]).add_(zero[:, None]).clamp_(0, 255).to(torch.uint8)
    return q, scale, zero


def max_logits_int8(hidden: Tensor, weight_int8: Tensor, mask: Tensor) -> Tensor | None:
    """[B, V] fp32: max over the positions with mask of the int8 logits without the weight's per-row scale,
    scale_t · (q_t · w_v − zero_t · Σ_k w_v,k), activations quantized per token (quantize_tokens); the caller
    multiplies by the weight scales (positive, so the max commutes). None when the kernel cannot run here."""
    B, _, H = hidden.shape
    if hidden.device.type != "cpu" or H % 64 or (lib := _kernel()) is None:
        return None
    x, text_of, tokens = _tokens(hidden.float(), mask)
    q, scale, zero = quantize_tokens(x)
    w, rowsum = _packed_weight(weight_int8, torch.int8)
    best = torch.full((B, w.shape[0] * 16), float("-inf"))
    if tokens:
        args = (q.data_ptr(), scale.data_ptr(), zero.data_ptr(), text_of.data_ptr(), tokens, H, w.data_ptr())
        _split_columns(
            w.shape[0],
            lambda c0, c1: lib.vt_fused_max_int8(
                *args, rowsum.data_ptr(), c0, c1, best.data_ptr(), best.shape[1], GROUP_TOKENS
            ),
        )
    return best[:, : weight_int8.shape[0]]
