"""int8 encoding (`model.encoder.precision=int8`, inference only): the MLM decoder in int8 (int8 weights, activations
quantized per call), the body in int8 or bf16.

What runs how (chosen by measurement, torch 2.13 CPU, SPLADE-tiny):
- the MLM decoder (hidden → 30,522 logits: most of SPLADE-tiny's fp32 encoding time), per-channel int8 weights:
  - on a CPU with AMX (`amx_int8`), AVX-512 VNNI (`avx512_vnni`) or AVX2: one C kernel fuses the int8 GEMM with the
    max over positions, activations quantized per token (vtlab.runtime.fused; the logits never reach memory);
  - elsewhere (no such CPU, no C compiler): oneDNN's int8 GEMM (`onednn::qlinear_pointwise`, fp32 output) on the
    pooling's cache-sized tiles (vtlab.runtime.pooling), one weight block pre-packed per tile width; the tile's
    activations are quantized once for all blocks (`torch._int_mm` instead runs slower than fp32).
- the body (attention, FFN, head transform): where the CPU computes bf16 natively, the fp32 network itself under bf16
  autocast — faster than int8 there (SPLADE-tiny's body: bf16 53 ms, fbgemm int8 106 ms, fp32 114 ms) and closer to
  fp32 (passage cosine 0.9998 vs 0.9989 with an int8 body); else
  fbgemm's dynamic int8 linear (`quantized::linear_dynamic`, what `torch.ao.quantization.quantize_dynamic` builds,
  built from the ops directly) in a copy of the network.
- weights: symmetric int8, one scale per output channel (row): s[v] = max|w[v]| / 127, so each weight is off by at
  most s[v] / 2. Activations: asymmetric uint8, range [min(x, 0), max(x, 0)], scale (max − min) / 255, so each is off
  by at most scale / 2 (fbgemm: its integer zero point can add half a step) — per token in the fused kernels, over
  the tile's real tokens in oneDNN's path, over the call's input in fbgemm's. No calibration data (dynamic
  quantization).
- CPUs without VNNI (`avx512_vnni` / `avx_vnni` / `amx_int8`) multiply u8×s8 through 16-bit saturating adds
  (vpmaddubsw), so activations get fewer bits: 7 (0..127, fbgemm's `reduce_range`) in the body and oneDNN's path, so
  no pair sum saturates (the body also where the CPU has only AVX-VNNI: fbgemm has no kernels for it); 6 (0..63) in
  the AVX2 fused kernels, which add two pair sums in int16 before widening them (vtlab/runtime/avx2.c: two widenings,
  the faster on this core timed and kept; built with AVX-VNNI it keeps 8). What the 6-bit grid gains and costs:
  docs/cpu-isa.md.

The fp32 network is never modified: an int8 body is a copy whose nn.Linear modules are replaced and whose other
tensors (embeddings, LayerNorms, the fp32 decoder the pooling bypasses) are shared with the original.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from vtlab.backbones import decoder_site
from vtlab.core.errors import VtlabError
from vtlab.runtime import fused
from vtlab.runtime.precision import BF16_NATIVE_FLAGS, cpu_flags

# quantized engines that pack fbgemm's dynamic linear (x86 = fbgemm/oneDNN by shape), in order of preference
ENGINES = ("x86", "fbgemm")


@contextlib.contextmanager
def _quiet_deprecation() -> Iterator[None]:
    # torch 2.13 warns that quantized-tensor constructors will go; fbgemm's packing still takes one (torch is pinned)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*(quantize_per|quantized tensor|torch\.ao\.quantization).*")
        yield


@contextlib.contextmanager
def _engine() -> Iterator[str]:
    """The quantized engine packed weights are made for (restored afterwards: it is process-global)."""
    engines = torch.backends.quantized.supported_engines
    engine = next((e for e in ENGINES if e in engines), None)
    if engine is None:
        raise VtlabError(
            f"model.encoder.precision=int8: this torch build has no x86/fbgemm quantized engine "
            f"(has {', '.join(engines) or 'none'}); use fp32 or bf16"
        )
    before = torch.backends.quantized.engine
    torch.backends.quantized.engine = engine
    try:
        yield engine
    finally:
        torch.backends.quantized.engine = before


def weight_scales(weight: Tensor) -> Tensor:
    """Per-output-channel symmetric scales, [out]: max|w[v]| / 127 (a zero row gets a tiny scale, not 0)."""
    return (weight.detach().float().abs().amax(dim=1) / 127).clamp_min(1e-12)


def quantize_weight(weight: Tensor) -> tuple[Tensor, Tensor]:
    """(int8 weight [out, in], fp32 scales [out]): per-channel symmetric, |w - q·s| ≤ s / 2 elementwise."""
    s = weight_scales(weight)
    q = torch.round(weight.detach().float() / s[:, None]).clamp_(-127, 127).to(torch.int8)
    return q, s


def activation_grid(x: Tensor, reduce_range: bool = False) -> tuple[float, int]:
    """(scale, zero point) of asymmetric uint8 over all of `x`, its range widened to include 0 (so 0 is exact);
    `reduce_range`: 7 bits (CPUs without VNNI, see the module)."""
    qmax = 127 if reduce_range else 255
    if x.numel() == 0:
        return 1.0, 0
    lo, hi = torch.aminmax(x)
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    scale = max((hi - lo) / qmax, 1e-12)
    return scale, min(qmax, max(0, round(-lo / scale)))


def quantize_activations(x: Tensor, scale: float, zp: int, reduce_range: bool = False) -> Tensor:
    """uint8 x on the grid (scale, zp): |x - (q - zp)·scale| ≤ scale / 2 for x inside the grid's range."""
    return torch.round(x.float() * (1.0 / scale)).add_(zp).clamp_(0, 127 if reduce_range else 255).to(torch.uint8)


# any one: fbgemm (the int8 body's GEMM) has VNNI kernels for this CPU. It has none for AVX-VNNI (256-bit: Intel
# client CPUs since Alder Lake), where its AVX2 kernels run: there 8-bit activations saturate (max error 0.97 vs
# 0.08 on SPLADE-tiny's attention query layer with fbgemm held to AVX2; tests/runtime/test_precision_int8.py)
FBGEMM_VNNI_FLAGS = frozenset({"avx512_vnni", "amx_int8"})


def reduced_range() -> bool:
    """Whether activations must use 7 bits here: without fbgemm's VNNI kernels u8×s8 goes through vpmaddubsw, whose
    int16 pair sums saturate with 8-bit activations (fbgemm's int8 linears, and oneDNN's int8 GEMM where the CPU has
    no VNNI at all)."""
    return not (FBGEMM_VNNI_FLAGS & cpu_flags())


class Int8Linear(nn.Module):
    """nn.Linear with int8 per-channel weights and dynamic uint8 activations (fbgemm `quantized::linear_dynamic`);
    reduce_range: 7-bit activations (default: where this CPU needs them, `reduced_range`)."""

    def __init__(self, linear: nn.Linear, reduce_range: bool | None = None) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.reduce_range = reduced_range() if reduce_range is None else reduce_range
        s = weight_scales(linear.weight)
        bias = None if linear.bias is None else linear.bias.detach().float().clone()
        with _quiet_deprecation(), _engine():
            qw = torch.quantize_per_channel(
                linear.weight.detach().float(), s.double(), torch.zeros_like(s, dtype=torch.long), 0, torch.qint8
            )
            self._packed = torch.ops.quantized.linear_prepack(qw, bias)

    def forward(self, x: Tensor) -> Tensor:
        return torch.ops.quantized.linear_dynamic(x.float(), self._packed, self.reduce_range)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 per-channel"


class Int8Decoder:
    """The MLM decoder in int8 for the tiled pooling: per-channel int8 weights packed once per block of vocabulary
    columns (the pooling's tile width), oneDNN's int8 GEMM with fp32 output; the bias is added by the pooling after
    the max, as in fp32."""

    def __init__(self, decoder: nn.Linear, reduce_range: bool | None = None) -> None:
        self.weight_int8, self.scales = quantize_weight(decoder.weight)
        self.bias = None if decoder.bias is None else decoder.bias.detach().float().clone()
        self.reduce_range = reduced_range() if reduce_range is None else reduce_range
        self._blocks: dict[int, list[tuple[Tensor, Tensor, Tensor]]] = {}

    @property
    def vocab_size(self) -> int:
        return self.weight_int8.shape[0]

    def _packed(self, cols: int) -> list[tuple[Tensor, Tensor, Tensor]]:
        """(packed weight, scales, zero points) per block of `cols` columns, packed on first use of that width."""
        if cols not in self._blocks:
            V = self.vocab_size
            self._blocks[cols] = [
                (
                    torch.ops.onednn.qlinear_prepack(self.weight_int8[v0 : v0 + cols].contiguous(), None),
                    self.scales[v0 : v0 + cols].contiguous(),
                    torch.zeros(min(cols, V - v0), dtype=torch.long),
                )
                for v0 in range(0, V, cols)
            ]
        return self._blocks[cols]

    def prepare(self, x: Tensor, real: Tensor | None = None) -> tuple[Tensor, float, int]:
        """Quantize a tile's hidden states [rows, H] once for all its column blocks; the range comes from the `real`
        (non-pad) rows only, when given (pad rows are clamped into it: their logits are discarded)."""
        scale, zp = activation_grid(x if real is None else x[real], self.reduce_range)
        return quantize_activations(x, scale, zp, self.reduce_range), scale, zp

    def fused_max(self, hidden: Tensor, mask: Tensor) -> Tensor | None:
        """Where a fused kernel runs: the masked max of the int8 logits in one C kernel (vtlab.runtime.fused;
        activations quantized per token there), times the per-channel weight scales (positive: the max commutes)."""
        best = fused.max_logits_int8(hidden, self.weight_int8, mask)
        return None if best is None else best * self.scales

    def logits(self, prepared: tuple[Tensor, float, int], v0: int, v1: int, cols: int) -> Tensor:
        """fp32 logits (no bias) [rows, v1 - v0] of a prepared tile for the block starting at v0 (a multiple of
        cols)."""
        q, scale, zp = prepared
        packed, scales, zps = self._packed(cols)[v0 // cols]
        if zps.numel() != v1 - v0:
            raise ValueError(f"block [{v0}, {v1}) does not match the packed width {cols}")
        return torch.ops.onednn.qlinear_pointwise(
            q, scale, zp, packed, scales, zps, None, 1.0, 0, torch.float32, "none", [], ""
        )


@dataclass
class Int8Network:
    """A network's int8 form: `net` (an int8 body: a copy whose nn.Linear modules are Int8Linear, the decoder left fp32
    and bypassed; a bf16 body: the fp32 network itself, run under bf16 autocast) and the decoder for the pooling."""

    net: nn.Module
    decoder: Int8Decoder
    version: tuple[tuple[int, int], ...] = field(default=())  # of the source's parameters when copied
    body_bf16: bool = False

    def body(self) -> contextlib.AbstractContextManager[Any]:
        """What the body's forward pass runs under: bf16 autocast for a bf16 body, nothing for an int8 one."""
        return torch.autocast("cpu", dtype=torch.bfloat16) if self.body_bf16 else contextlib.nullcontext()


def weights_version(module: nn.Module) -> tuple[tuple[int, int], ...]:
    """(id, version counter) of every parameter: changes when any weight is replaced or updated in place (an
    optimizer step, load_state_dict), so an int8 copy or a precision choice made before is known to be stale."""
    return tuple((id(p), p._version) for p in itertools.chain(module.parameters(), module.buffers()))


BODIES = ("int8", "bf16")


def quantize_network(net: nn.Module, reduce_range: bool | None = None, body: str | None = None) -> Int8Network:
    """The int8 form of a masked-LM (see the module); `net` itself is left as it was. reduce_range: default 7-bit
    activations unless this CPU has VNNI. body: default bf16 where the CPU computes bf16 natively (there the bf16 body
    is both faster than fbgemm's int8 one and ~5x closer to fp32: SPLADE-tiny's passage cosine to fp32 0.9998 vs
    0.9989), else int8."""
    require_int8()
    if reduce_range is None:
        reduce_range = reduced_range()
    if body is None:
        body = "bf16" if BF16_NATIVE_FLAGS & cpu_flags() else "int8"
    if body not in BODIES:
        raise ValueError(f"body={body!r}: expected one of {', '.join(BODIES)}")
    version = weights_version(net)
    if body == "bf16":
        parent, attr = decoder_site(net)
        return Int8Network(net, Int8Decoder(getattr(parent, attr), reduce_range), version, body_bf16=True)
    shared = {id(t): t for t in itertools.chain(net.parameters(), net.buffers())}  # copy modules, not tensors
    copied = copy.deepcopy(net, shared)
    parent, attr = decoder_site(copied)
    decoder = getattr(parent, attr)
    for name, module in list(copied.named_modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, nn.Linear) and child is not decoder:
                setattr(module, child_name, Int8Linear(child, reduce_range))
    copied.eval()
    return Int8Network(copied, Int8Decoder(decoder, reduce_range), version)


_AVAILABLE: list[str | None] = []  # memo of int8_unavailable(): [reason or None]


def int8_unavailable() -> str | None:
    """Why this torch build cannot run int8 encoding (None when it can): a tiny layer of each kind, run once."""
    if not _AVAILABLE:
        reason = None
        try:
            with torch.inference_mode():
                lin = nn.Linear(8, 4)
                Int8Linear(lin)(torch.randn(3, 8))
                dec = Int8Decoder(lin)
                dec.logits(dec.prepare(torch.randn(3, 8)), 0, 4, 4)
        except VtlabError as e:
            reason = str(e)
        except (RuntimeError, AttributeError, NotImplementedError) as e:
            reason = (
                f"model.encoder.precision=int8: this torch build cannot run int8 linear layers "
                f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); use fp32 or bf16"
            )
        _AVAILABLE.append(reason)
    return _AVAILABLE[0]


def require_int8() -> None:
    reason = int8_unavailable()
    if reason is not None:
        raise VtlabError(reason)
