"""Checks of the accelerator pooling path (vtlab.runtime.pooling.block_max_logits) against the dense definition, on
any device: `check_on(device)` runs it at a few shapes and dtypes and reports, per case, the largest error of its
values and gradients (w.r.t. the hidden states, the decoder weight and bias) next to a rounding bound, and any host
sync it dispatched.

The reference materializes the [B, L, V] logits in float64 from the same inputs (the weight rounded to the hidden
states' dtype, as the path's GEMM reads it), sets the pad positions to -inf and takes the max; its gradients are
autograd's through that max. The bound on |path − reference| for one value z[b, v] is

    (ROUNDINGS · u + (H + 2) · u_acc) · (S[b, v] + |bias[v]|),    S[b, v] = max over real i of Σ_k |h[b,i,k]| |w[v,k]|

with u the unit roundoff 2^-p of the GEMM's operands (p bits of significand: bf16 2^-8, fp16 and TF32 2^-11, fp32
2^-24; fp32 GEMMs count as TF32 or bf16 when torch's float32 matmul precision allows those) and u_acc that of its fp32
accumulation (fp64: 2^-53). H · u_acc is the classical bound for a dot product of H terms, two more u_acc cover the
max's widening and the bias's addition, and ROUNDINGS = 5 roundings to u cover, for a value, the weight's cast, the
logit's output and up to two partial sums of a split reduction kept in reduced precision (cuBLAS's default for
bf16/fp16); for a gradient, the upstream gradient's cast, each block product's output, two split partial sums and the
final cast to hidden's dtype. The max of rounded values is the rounded max (rounding is monotone), so the max adds no
error of its own. A gradient entry sums n one-hot terms (n = V for the hidden states, B·L for the weight) the same
way: bound (ROUNDINGS · u + (n + blocks) · u_acc) · Σ |g| |operand|. Where two positions' logits of a (b, v) lie
within twice the value bound, the inputs do not determine the arg-max, so the check's upstream gradient is zero for
those terms.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode

from vtlab.runtime.pooling import BLOCK_BYTES, block_columns, block_max_logits

ROUNDINGS = 5
# Operators that read a device value on the host (or need one to size their output): each is a host sync on CUDA.
SYNC_OPS = frozenset(
    {
        "_local_scalar_dense",
        "item",
        "is_nonzero",
        "equal",
        "nonzero",
        "masked_select",
        "masked_scatter",
        "_unique",
        "_unique2",
        "unique_dim",
        "unique_consecutive",
        "repeat_interleave",
        "bincount",
        "histc",
    }
)


class HostSyncs(TorchDispatchMode):
    """Records the operators dispatched inside it that would make the host wait for the device (`found`): SYNC_OPS
    and copies from a non-CPU device to the CPU. Works on any device, meta and CPU tensors included."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []
        self.seen: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        self.seen.add(name)
        if name in SYNC_OPS or _copies_to_host(name, args, kwargs):
            self.found.append(str(func))
        return func(*args, **kwargs)


def _copies_to_host(name: str, args: tuple, kwargs: dict) -> bool:
    def device(x: Any) -> str | None:
        return x.device.type if isinstance(x, Tensor) else None

    if name == "_to_copy" and kwargs.get("device") is not None:
        return torch.device(kwargs["device"]).type == "cpu" and device(args[0]) not in (None, "cpu")
    if name == "copy_":
        return device(args[0]) == "cpu" and device(args[1]) not in (None, "cpu")
    return False


def unit_roundoff(dtype: torch.dtype) -> float:
    """The unit roundoff of a GEMM's operands in `dtype` here (fp32: TF32's or bf16's when torch's float32 matmul
    precision is `high` or `medium`)."""
    if dtype == torch.float32:
        return {"highest": 2.0**-24, "high": 2.0**-11}.get(torch.get_float32_matmul_precision(), 2.0**-8)
    return {torch.float64: 2.0**-53, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}[dtype]


def accumulation_roundoff(dtype: torch.dtype) -> float:
    """The unit roundoff of the accumulation of a GEMM in `dtype` (fp32 for every dtype but fp64)."""
    return 2.0**-53 if dtype == torch.float64 else 2.0**-24


def dense_reference(hidden: Tensor, weight: Tensor, bias: Tensor | None, mask: Tensor) -> Tensor:
    """z[b, v] = max over positions i with mask of hidden[b, i] · weight[v] + bias[v], from the full [B, L, V] logits
    in float64 (pad positions -inf); the weight rounded to hidden's dtype first, as the pooling's GEMM reads it.
    Differentiable w.r.t. hidden, weight and bias."""
    w = weight.to(hidden.dtype).double()
    logits = hidden.double() @ w.t()
    if bias is not None:
        logits = logits + bias.double()
    return logits.masked_fill(~mask.bool().unsqueeze(-1), float("-inf")).amax(dim=1)


@dataclass(frozen=True)
class Case:
    """One shape: B texts of at most L positions, hidden size H, vocabulary V; `columns`: the block width to force
    (None: BLOCK_BYTES's); `empty_row`: the last text is all padding."""

    name: str
    B: int
    L: int
    H: int
    V: int
    columns: int | None = None
    empty_row: bool = False

    def block_bytes(self, element_size: int) -> int:
        return BLOCK_BYTES if self.columns is None else self.columns * self.B * self.L * element_size


SMALL_CASES = (
    Case("padded-3-blocks", B=5, L=9, H=16, V=300, columns=128, empty_row=True),  # 128 + 128 + 44 columns
    Case("narrow-blocks", B=3, L=7, H=8, V=50, columns=7),  # below BLOCK_ALIGN: 7 per block, the last 1
    Case("one-block", B=4, L=16, H=32, V=500),
)
LARGE_CASES = (
    Case("splade-tiny-batch", B=32, L=256, H=128, V=30522),
    Case("splade-tiny-batch-4096-blocks", B=32, L=256, H=128, V=30522, columns=4096),
    Case("base-model-batch", B=16, L=256, H=768, V=50368),
)


def make_inputs(case: Case, dtype: torch.dtype, device: str | torch.device, seed: int = 0):
    """(hidden [B, L, H] in dtype, weight [V, H] and bias [V] in fp32 (fp64 for fp64), mask [B, L]) on `device`,
    all leaves that require grad; each text padded after a seeded length (the first full, the last empty with
    case.empty_row)."""
    g = torch.Generator().manual_seed(seed)
    param = torch.promote_types(dtype, torch.float32)
    hidden = torch.randn(case.B, case.L, case.H, generator=g).to(dtype)
    weight = torch.randn(case.V, case.H, generator=g, dtype=param) / math.sqrt(case.H)
    bias = torch.randn(case.V, generator=g, dtype=param)
    lengths = torch.randint(1, case.L + 1, (case.B,), generator=g)
    lengths[0] = case.L
    if case.empty_row:
        lengths[-1] = 0
    mask = (torch.arange(case.L)[None, :] < lengths[:, None]).long()
    leaves = [t.to(device).requires_grad_() for t in (hidden, weight, bias)]
    return (*leaves, mask.to(device))


@contextlib.contextmanager
def cuda_syncs(device: torch.device, found: list[str]) -> Iterator[None]:
    """On CUDA: appends to `found` the warning of each synchronizing CUDA call made inside
    (torch.cuda.set_sync_debug_mode("warn")); on other devices nothing."""
    if device.type != "cuda":
        yield
        return
    before = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield
        finally:
            torch.cuda.set_sync_debug_mode(before)
    found.extend(str(w.message) for w in caught if "synchroniz" in str(w.message))


def _ratio(err: Tensor, bound: Tensor) -> float:
    """The largest err / bound (an error where the bound is 0: inf; no error: 0)."""
    ratio = torch.where(bound > 0, err / bound.clamp_min(torch.finfo(bound.dtype).tiny), math.inf)
    return float(torch.where(err > 0, ratio, 0.0).max())


def check_case(case: Case, dtype: torch.dtype, device: str | torch.device, seed: int = 0) -> dict[str, Any]:
    """block_max_logits at one shape and dtype on `device` against dense_reference (module): the largest absolute
    error of the values and of each gradient (`*_err`), the largest ratio of error to its bound (`*_ratio`, ≤ 1 to
    pass), the host syncs dispatched in forward and backward (`host_syncs`), and `ok`."""
    device = torch.device(device)
    hidden, weight, bias, mask = make_inputs(case, dtype, device, seed)
    u, u_acc = unit_roundoff(dtype), accumulation_roundoff(dtype)
    B, L, H, V = case.B, case.L, case.H, case.V
    block_bytes = case.block_bytes(hidden.element_size())
    blocks = math.ceil(V / block_columns(B, L, V, hidden.element_size(), block_bytes))

    # the reference: values, arg-max gaps, the value bound
    h64 = hidden.detach().double().requires_grad_()
    w64 = weight.detach().to(dtype).double().requires_grad_()
    b64 = bias.detach().double().requires_grad_()
    real = mask.bool().unsqueeze(-1)
    with torch.no_grad():
        logits = (h64 @ w64.t()).masked_fill(~real, float("-inf"))
        scale = (h64.abs() @ w64.abs().t()).masked_fill(~real, 0.0).amax(dim=1)
        value_bound = (ROUNDINGS * u + (H + 2) * u_acc) * (scale + b64.abs())
        top = logits.topk(min(2, L), dim=1).values
        gap = top[:, 0] - top[:, -1] if L > 1 else torch.full_like(top[:, 0], math.inf)
        gap = torch.where(torch.isneginf(top[:, -1]), math.inf, gap)
        ref_pos = logits.argmax(dim=1)
        del logits
    ref = dense_reference(h64, w64, b64, mask)
    upstream = torch.randn(B, V, generator=torch.Generator().manual_seed(seed + 1), dtype=torch.float64).to(device)
    upstream = torch.where((gap > 2 * value_bound) & torch.isfinite(ref.detach()), upstream, 0.0)
    ref_grads = torch.autograd.grad(ref, (h64, w64, b64), upstream)

    # the path: forward and backward watched for host syncs, after one unwatched run (first-use setup)
    g = upstream.to(torch.promote_types(dtype, torch.float32))
    torch.autograd.grad(block_max_logits(hidden, weight, bias, mask, block_bytes), (hidden, weight, bias), g)
    cuda_found: list[str] = []
    with HostSyncs() as syncs, cuda_syncs(device, cuda_found):
        out = block_max_logits(hidden, weight, bias, mask, block_bytes)
        grads = torch.autograd.grad(out, (hidden, weight, bias), g)

    with torch.no_grad():
        ref = ref.detach()
        both_empty = torch.isneginf(ref) & torch.isneginf(out)
        value_err = torch.where(both_empty, 0.0, (out.double() - ref).abs())
        # |upstream| at each reference arg-max position: the terms each gradient entry sums
        onehot = torch.zeros(B, L, V, dtype=torch.float64, device=device)
        onehot.scatter_(1, ref_pos[:, None], upstream.abs()[:, None])
        bounds = (
            (ROUNDINGS * u + (V + blocks) * u_acc) * (onehot @ w64.abs()),
            (ROUNDINGS * u + (B * L + blocks) * u_acc) * torch.einsum("blv,blh->vh", onehot, h64.abs()),
            (B + 1) * u_acc * upstream.abs().sum(0),
        )
        report: dict[str, Any] = {"value_err": float(value_err.max()), "value_ratio": _ratio(value_err, value_bound)}
        for name, got, want, bound in zip(("hidden", "weight", "bias"), grads, ref_grads, bounds):
            err = (got.double() - want).abs()
            report[f"grad_{name}_err"] = float(err.max())
            report[f"grad_{name}_ratio"] = _ratio(err, bound)
    report["host_syncs"] = sorted(set(syncs.found + cuda_found))
    report["empty_rows_neginf"] = bool(torch.isneginf(out[~mask.bool().any(dim=1)]).all())
    report["ok"] = (
        all(v <= 1.0 for k, v in report.items() if k.endswith("_ratio"))
        and not report["host_syncs"]
        and report["empty_rows_neginf"]
    )
    return report


def check_on(
    device: str | torch.device = "cuda",
    dtypes: tuple[torch.dtype, ...] = (torch.float32, torch.bfloat16),
    large: bool = True,
    seed: int = 0,
) -> dict[str, Any]:
    """block_max_logits on `device` against the dense float64 reference (module docstring): for each case of
    SMALL_CASES (and LARGE_CASES with `large`: batch shapes of SPLADE-tiny and of a base model) × `dtypes`, the report
    of check_case under "<case>/<dtype>"; "ok": every case passed."""
    cases = SMALL_CASES + (LARGE_CASES if large else ())
    report: dict[str, Any] = {}
    for case in cases:
        for dtype in dtypes:
            report[f"{case.name}/{str(dtype).removeprefix('torch.')}"] = check_case(case, dtype, device, seed)
    report["ok"] = all(r["ok"] for r in report.values())
    return report
