"""SPLADE's max-pooled logits with the GEMM and the max fused in one C kernel, for fp32 and bf16 (vtlab.runtime.pooling)
and int8 (vtlab.runtime.quantize's decoder): the [tokens × vocabulary] logits are never written to memory, so the head
costs the dot products plus a max from L1 or registers. Why: for a small hidden size (SPLADE-tiny's 128) the logits
GEMM is bound by writing its output and reading it back for the max, not by arithmetic.

Five kernels; for each precision the first of them that provides it and whose CPU flags this machine has (of
INT8_RIVALS, the faster here):
- Intel AMX (`amx_bf16`, `amx_int8`: Xeon since Sapphire Rapids), vtlab/runtime/amx.c: bf16 and int8 in 16 × 16 tiles
  (one thread, SPLADE-tiny's decoder, 8,204 tokens: bf16 in half the time of oneDNN's bf16 GEMM alone, before any max).
- AVX-512, vtlab/runtime/avx512.c: 8 tokens × 48 columns accumulated in registers — fp32 with FMA (`avx512f`), bf16
  with vdpbf16ps (`avx512_bf16`) and int8 with vpdpbusd (`avx512_vnni`) where AMX is absent (AMD Zen 4/5).
- AVX2 (+ FMA), vtlab/runtime/avx2.c, for CPUs without AVX-512 (AMD Zen 2/3): fp32, 6 tokens × 16 columns in
  registers; int8 through vpmaddubsw with 6-bit activations (`activation_max`: two pair sums add in int16 unsaturated),
  4 tokens × 16 columns; where the CPU has AVX-VNNI (Intel client CPUs since Alder Lake) the same source built with
  vpdpbusd instead (`avx_vnni`: 8-bit activations). Built a third time (`avx2_shuffle`, 2 tokens × 16 columns), int8
  widens its int16 sums without a multiply instruction: the faster on cores with one vector integer multiply port
  (Zen 2, Haswell), the slower where two issue per cycle; the first int8 call times both (`faster_int8`).

Each of torch's intra-op threads takes a share of the vocabulary columns for the whole batch, in one OpenMP region of
torch's own threads (vtlab/runtime/parallel.c) where torch runs GNU OpenMP, else on Python threads (one ctypes call per
thread per batch: the GIL is released inside it). The weights are packed into each kernel's operand layout (`pack`)
once per weight version (during training: once per optimizer step, a copy of the decoder). Without a kernel (another
CPU, a compiler without its instructions, VTLAB_NATIVE=0, Linux refusing AMX state) the functions return None and
the caller runs its tiled GEMM.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import time
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from vtlab.runtime.cpu import cpu_flags
from vtlab.runtime.native import Kernel

log = logging.getLogger("vtlab")

# what a kernel computes: the torch dtype of its operands → the suffix of its C function vt_fused_max_<suffix>
SUFFIX = {torch.float32: "f32", torch.bfloat16: "bf16", torch.int8: "int8"}
# model.encoder.precision → the dtype its pooling kernel computes in
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "int8": torch.int8}
CFLAGS = ("-O3", "-shared", "-fPIC", "-fno-math-errno")


@dataclass(frozen=True)
class FusedKernel:
    """A C source defining vt_fused_max_<suffix> for the dtypes it `provides` (dtype suffix → the CPU flags that
    function needs), the number of columns per packed block (`lanes`: its vector width in fp32), and the function
    that must return 0 before any of them runs (AMX: permission to use tile state), if any."""

    name: str
    kernel: Kernel
    provides: tuple[tuple[str, frozenset[str]], ...]
    lanes: int = 16
    init: str | None = None
    activation_max: int = 255  # int8: activations on 0..activation_max (63: the kernel adds u8×s8 pair sums in int16)
    weight_offset: int = 0  # int8: added to each packed weight (128: the kernel reads them as uint8)
    keeps_nan: bool = True  # False: a NaN logit may be dropped from the max, so non-finite hidden states go elsewhere

    def needs(self, suffix: str) -> frozenset[str] | None:
        """The CPU flags vt_fused_max_<suffix> needs; None: not provided."""
        return dict(self.provides).get(suffix)


def _fused(name: str, source: str, cflags: tuple[str, ...], provides: dict[str, set[str]], **kw) -> FusedKernel:
    kernel = Kernel(
        Path(__file__).with_name(source),
        CFLAGS + cflags,
        what=f"{name} pooling kernel",
        fallback="pooling uses its tiled GEMM",
    )
    return FusedKernel(name, kernel, tuple((k, frozenset(v)) for k, v in provides.items()), **kw)


AMX = _fused(
    "amx",
    "amx.c",
    ("-mamx-tile", "-mamx-bf16", "-mamx-int8", "-mavx512f"),
    {"bf16": {"amx_tile", "amx_bf16", "avx512f"}, "int8": {"amx_tile", "amx_int8", "avx512f"}},
    init="vt_amx_init",
    keeps_nan=False,
)
AVX512 = _fused(
    "avx512",
    "avx512.c",
    ("-mavx512f", "-mavx512bw", "-mavx512bf16", "-mavx512vnni"),
    # avx512bw for each: the compiler may use it anywhere in the library (bf16 and VNNI instructions come only from
    # their functions' intrinsics); every AVX-512 CPU since Skylake-X has it
    {
        "f32": {"avx512f", "avx512bw"},
        "bf16": {"avx512f", "avx512bw", "avx512_bf16"},
        "int8": {"avx512f", "avx512bw", "avx512_vnni"},
    },
)
AVX2 = _fused(
    "avx2", "avx2.c", ("-mavx2", "-mfma"), {"f32": {"avx2", "fma"}, "int8": {"avx2", "fma"}}, lanes=8, activation_max=63
)
# the same source's int8 with vpdpbusd on 256-bit registers (8-bit activations): Intel client CPUs since Alder Lake
AVX_VNNI = _fused(
    "avx_vnni",
    "avx2.c",
    ("-mavx2", "-mfma", "-mavxvnni", "-DVT_AVX_VNNI"),
    {"int8": {"avx2", "fma", "avx_vnni"}},
    lanes=8,
)
# the same source's int8 widened by adds and a shuffle instead of vpmaddwd, the weights stored as uint8 (avx2.c)
AVX2_SHUFFLE = _fused(
    "avx2_shuffle",
    "avx2.c",
    ("-mavx2", "-mfma", "-DVT_WIDEN_SHUFFLE"),
    {"int8": {"avx2", "fma"}},
    lanes=8,
    activation_max=63,
    weight_offset=128,
)
KERNELS = (AMX, AVX512, AVX_VNNI, AVX2, AVX2_SHUFFLE)  # preferred first
# int8 kernels with the same results bit for bit and different instruction mixes, which is faster depending on the
# core (modelled by llvm-mca: avx2 on Zen 3 and Skylake, avx2_shuffle on Zen 2 and Haswell): where more than one runs,
# the first int8 call times them and keeps the faster (faster_int8)
INT8_RIVALS = (AVX2, AVX2_SHUFFLE)
GROUP_BYTES = 2**20  # hidden states of a group of tokens that stays in L2 while every column block passes
MIN_BLOCKS_PER_THREAD = 64  # column blocks of 16: a thread takes at least 1,024 vocabulary columns (of 8: 512)

# (id(weight), dtype, the kernel's lanes and weight offset) → (a weak reference to the weight, its version when
# packed, the packed copy, for int8 its per-column sums [V padded] for the zero points); a few entries (query and
# document networks, a precision check's fp32 and bf16), dropped with their weight
_packed: dict[tuple[int, torch.dtype, int, int], tuple[weakref.ref, int, Tensor, Tensor | None]] = {}


@functools.cache
def open_kernel(fused: FusedKernel) -> ctypes.CDLL | None:
    """`fused`'s library, ready to call, or None where this CPU lacks the flags of all its functions or it cannot be
    built or started."""
    flags = cpu_flags()
    if not any(need <= flags for _, need in fused.provides):
        return None
    lib = fused.kernel.load()
    if lib is None:
        return None
    i64, p = ctypes.c_int64, ctypes.c_void_p
    for suffix, _ in fused.provides:
        f = getattr(lib, f"vt_fused_max_{suffix}")
        f.restype = None
        f.argtypes = (
            [p, p, p, p, i64, i64, p, p, i64, i64, p, i64, i64]
            if suffix == "int8"
            else [p, p, i64, i64, p, i64, i64, p, i64, i64]
        )
    if fused.init is not None:
        init = getattr(lib, fused.init)
        init.argtypes, init.restype = [], i64
        if init() != 0:
            return None
    return lib


def _computes_here(fused: FusedKernel, suffix: str | None) -> bool:
    need = fused.needs(suffix) if suffix else None
    return need is not None and need <= cpu_flags() and open_kernel(fused) is not None


def kernel_for(dtype: torch.dtype) -> tuple[FusedKernel, Callable[..., None]] | None:
    """The first of KERNELS that computes `dtype` on this machine (for int8, of the INT8_RIVALS that do, the faster)
    and its C function; None: none does."""
    suffix = SUFFIX.get(dtype)
    for fused in KERNELS:
        if _computes_here(fused, suffix):
            if dtype == torch.int8 and fused in INT8_RIVALS:
                fused = faster_int8(tuple(k for k in INT8_RIVALS if k in KERNELS and _computes_here(k, suffix)))
            return fused, getattr(open_kernel(fused), f"vt_fused_max_{suffix}")
    return None


@functools.cache
def faster_int8(rivals: tuple[FusedKernel, ...]) -> FusedKernel:
    """Of int8 kernels that run here, the one with the shortest time (best of 5, interleaved) on one thread for a
    fixed head of 64 tokens × 128 × 8,192 columns (~67 M multiply-adds: ~10 ms in all)."""
    if len(rivals) == 1:
        return rivals[0]
    g = torch.Generator().manual_seed(0)
    H, tokens, V = 128, 64, 8192
    weight = torch.randint(-127, 128, (V, H), generator=g, dtype=torch.int8)
    text_of = torch.arange(tokens) // 16
    scale, zero = torch.ones(tokens + 16), torch.zeros(tokens + 16)
    best: dict[FusedKernel, float] = {}
    calls = []
    for fused in rivals:
        x = torch.randint(0, fused.activation_max + 1, (tokens + 16, H), generator=g, dtype=torch.uint8)
        x[tokens:] = 0
        w, rowsum = _packed_weight(weight, torch.int8, fused)
        out = torch.empty(tokens // 16, w.shape[0] * fused.lanes)
        before, after = _int8_operands(x, scale, zero, text_of, tokens, w, rowsum, out, group_tokens=tokens)
        f = getattr(open_kernel(fused), "vt_fused_max_int8")
        calls.append((fused, f, (*before, 0, w.shape[0], *after), (x, w, rowsum, out)))
    for _ in range(5):
        for fused, f, args, _keep in calls:
            t = time.perf_counter()
            f(*args)
            best[fused] = min(best.get(fused, float("inf")), time.perf_counter() - t)
    chosen = min(rivals, key=best.__getitem__)
    log.info("int8 pooling kernel: %s (%s)", chosen.name, ", ".join(f"{k.name} {best[k] * 1e3:.2f} ms" for k in rivals))
    return chosen


def in_use() -> dict[str, str | None]:
    """Which kernel pools each precision here ({"fp32": "avx512", "bf16": "amx", ...}; None: the tiled GEMM)."""
    return {name: (found[0].name if (found := kernel_for(dtype)) else None) for name, dtype in DTYPES.items()}


@functools.cache
def _helpers(n: int, pid: int) -> ThreadPoolExecutor:
    """n helper threads of process `pid`: a child forked after they started does not have them (its copy of the
    executor would queue work no thread runs), so it gets its own."""
    return ThreadPoolExecutor(n, thread_name_prefix="vtlab-fused")


def pack(weight: Tensor, dtype: torch.dtype, lanes: int = 16, offset: int = 0) -> Tensor:
    """[V, H] → [V/lanes column blocks, H/g k-units, lanes columns, g]: in each block, the `lanes` columns' values of
    k-unit u (g = 1 fp32, a pair of bf16 or a quad of int8: 4 bytes) side by side, one vector register per unit; for
    bf16 and int8 with 16 lanes this is also AMX's B operand (its k-steps are 16 consecutive units). V is padded to a
    multiple of `lanes` with zeros. int8 with `offset` (128): each value + offset, stored as uint8."""
    group = 4 // torch.empty(0, dtype=dtype).element_size()
    V, H = weight.shape
    Vp = -(-V // lanes) * lanes
    w = torch.zeros(Vp, H, dtype=dtype)
    w[:V] = weight.detach()
    if offset:
        w = w.to(torch.int16).add_(offset).to(torch.uint8)
    return w.view(Vp // lanes, lanes, H // group, group).permute(0, 2, 1, 3).contiguous()


def _packed_weight(weight: Tensor, dtype: torch.dtype, fused: FusedKernel) -> tuple[Tensor, Tensor | None]:
    """(pack(weight, dtype) for `fused`, for int8 the columns' sums (without the offset) in fp32 [V padded]), made
    once per weight version."""
    offset = fused.weight_offset if dtype == torch.int8 else 0
    key = (id(weight), dtype, fused.lanes, offset)
    version = -1 if weight.is_inference() else weight._version  # an inference tensor cannot change in place
    cached = _packed.get(key)
    if cached is None or cached[0]() is not weight or cached[1] != version:
        packed = pack(weight, dtype, fused.lanes, offset)
        sums = None
        if dtype == torch.int8:
            sums = packed.sum(dim=(1, 3), dtype=torch.int32).sub_(offset * weight.shape[1]).flatten().float()
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


# The column split in one OpenMP region whose team is torch's intra-op threads (parallel.c). Why: after the encoder's
# ops torch's GNU OpenMP threads spin a while waiting for the next region, and Python helper threads share cores with
# them meanwhile; short calls (queries) lose most to that (docs/kernels.md).
OPENMP = Kernel(
    Path(__file__).with_name("parallel.c"),
    CFLAGS + ("-fopenmp",),
    what="OpenMP column split",
    fallback="the columns are split over Python threads",
)
RUNNER_ARGS = {"f32": "f32", "bf16": "f32", "int8": "int8"}  # kernel function suffix → parallel.c's vt_parallel_<...>


def _libgomp_mapped() -> list[str]:
    """The GNU OpenMP runtimes in this process (Linux; [] elsewhere)."""
    try:
        with open("/proc/self/maps") as maps:
            return sorted({line.split()[-1] for line in maps if "libgomp" in line.rsplit("/", 1)[-1]})
    except OSError:
        return []


@functools.cache
def openmp_runner() -> ctypes.CDLL | None:
    """parallel.c's library where torch's OpenMP runtime is GNU's under the name it binds to (libgomp.so.1), so that
    loading it adds no second runtime; None elsewhere (Intel OpenMP, no compiler, VTLAB_NATIVE=0, not Linux)."""
    torch.get_num_threads()  # torch's runtime is loaded with torch; this makes sure its pool exists
    runtimes = _libgomp_mapped()
    if len(runtimes) != 1 or Path(runtimes[0]).name != "libgomp.so.1":
        return None
    lib = OPENMP.load()
    if lib is None or _libgomp_mapped() != runtimes:
        return None  # (a second runtime now loaded would be unused: the Python threads run the split)
    i64, p = ctypes.c_int64, ctypes.c_void_p
    lib.vt_parallel_f32.argtypes = [p, ctypes.c_int, i64, p, p, i64, i64, p, p, i64, i64]
    lib.vt_parallel_int8.argtypes = [p, ctypes.c_int, i64, p, p, p, p, i64, i64, p, p, p, i64, i64]
    lib.vt_parallel_f32.restype = lib.vt_parallel_int8.restype = None
    return lib


def _split_columns(f: Callable[..., None], suffix: str, blocks: int, before: tuple, after: tuple) -> None:
    """f(*before, first block, end block, *after) on each of torch's intra-op threads' share of the column blocks."""
    parts = max(1, min(torch.get_num_threads(), blocks // MIN_BLOCKS_PER_THREAD))
    runner = openmp_runner() if parts > 1 else None
    if runner is not None:
        run = getattr(runner, f"vt_parallel_{RUNNER_ARGS[suffix]}")
        run(ctypes.cast(f, ctypes.c_void_p), parts, blocks, *before, *after)
        return
    edges = [blocks * i // parts for i in range(parts + 1)]
    helpers = _helpers(parts - 1, os.getpid()) if parts > 1 else None
    pending = [helpers.submit(f, *before, edges[i], edges[i + 1], *after) for i in range(1, parts)] if helpers else []
    f(*before, edges[0], edges[1], *after)
    for p in pending:
        p.result()


def _group_tokens(row_bytes: int) -> int:
    return max(16, GROUP_BYTES // row_bytes)


def _drops_nan(fused: FusedKernel, x: Tensor) -> bool:
    """Whether `fused` could drop a NaN logit from the max of these tokens' logits, as torch's max would not: its
    reduction keeps none and a hidden state is not finite (a NaN, or an inf times a 0 weight). The caller then pools
    with the tiled GEMM, so a broken model still shows. aminmax propagates a NaN and shows an inf: one pass over
    [tokens, H] (~0.15 ms for 10k tokens × 128; isfinite(x).all() takes 4-9 ms). Not covered: finite states whose
    fp32 sums overflow both ways (inf − inf), which needs |x| · |w| · H past 3.4e38."""
    return not fused.keeps_nan and not all(bool(torch.isfinite(v)) for v in torch.aminmax(x))


def max_logits(hidden: Tensor, weight: Tensor, mask: Tensor) -> Tensor | None:
    """[B, V] fp32: max over the positions with mask of hidden[b, i] · weight[v] (no bias), in hidden's dtype (fp32,
    or bf16 products accumulated in fp32); None when no kernel computes that here or for these shapes (H not a
    multiple of 32)."""
    B, _, H = hidden.shape
    if hidden.device.type != "cpu" or H % 32 or (found := kernel_for(hidden.dtype)) is None:
        return None
    fused, f = found
    x, text_of, tokens = _tokens(hidden.detach(), mask)
    if _drops_nan(fused, x):
        return None
    w, _ = _packed_weight(weight, hidden.dtype, fused)
    best = torch.full((B, w.shape[0] * fused.lanes), float("-inf"))
    if tokens:
        args = (x.data_ptr(), text_of.data_ptr(), tokens, H, w.data_ptr())
        group = _group_tokens(x.shape[1] * x.element_size())
        _split_columns(f, SUFFIX[hidden.dtype], w.shape[0], args, (best.data_ptr(), best.shape[1], group))
    return best[:, : weight.shape[0]]


def _int8_operands(
    q: Tensor,
    scale: Tensor,
    zero: Tensor,
    text_of: Tensor,
    tokens: int,
    w: Tensor,
    rowsum: Tensor,
    best: Tensor,
    group_tokens: int,
) -> tuple[tuple, tuple]:
    """vt_fused_max_int8's arguments before and after its column range (cb0, cb1)."""
    before = (q.data_ptr(), scale.data_ptr(), zero.data_ptr(), text_of.data_ptr(), tokens, q.shape[1], w.data_ptr())
    return (*before, rowsum.data_ptr()), (best.data_ptr(), best.shape[1], group_tokens)


def quantize_tokens(x: Tensor, top: int = 255) -> tuple[Tensor, Tensor, Tensor]:
    """Per-token asymmetric uint8 on 0..top (x ≈ scale · (q − zero)), each row's range widened to include 0: (q, scale,
    zero), the last two fp32; |x − scale · (q − zero)| ≤ scale / 2 inside the range."""
    x = x.float()
    lo = x.amin(dim=1).clamp_max(0)
    hi = x.amax(dim=1).clamp_min(0)
    scale = ((hi - lo) / top).clamp_min(1e-12)
    zero = torch.round(-lo / scale)
    q = torch.round(x / scale[:, None]).add_(zero[:, None]).clamp_(0, top).to(torch.uint8)
    return q, scale, zero


def max_logits_int8(hidden: Tensor, weight_int8: Tensor, mask: Tensor) -> Tensor | None:
    """[B, V] fp32: max over the positions with mask of the int8 logits without the weight's per-row scale,
    scale_t · (q_t · w_v − zero_t · Σ_k w_v,k), activations quantized per token (quantize_tokens); the caller
    multiplies by the weight scales (positive, so the max commutes). None when the kernel cannot run here."""
    B, _, H = hidden.shape
    if hidden.device.type != "cpu" or H % 64 or (found := kernel_for(torch.int8)) is None:
        return None
    fused, f = found
    x, text_of, tokens = _tokens(hidden.float(), mask)
    if _drops_nan(fused, x):
        return None
    q, scale, zero = quantize_tokens(x, fused.activation_max)
    w, rowsum = _packed_weight(weight_int8, torch.int8, fused)
    best = torch.full((B, w.shape[0] * fused.lanes), float("-inf"))
    if tokens:
        before, after = _int8_operands(q, scale, zero, text_of, tokens, w, rowsum, best, _group_tokens(H))
        _split_columns(f, "int8", w.shape[0], before, after)
    return best[:, : weight_int8.shape[0]]
