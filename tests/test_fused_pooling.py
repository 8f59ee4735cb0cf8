"""The C kernels of SPLADE's pooling against torch references: the bf16 tile max (vtlab/models/maxpool.c, any CPU
with a C compiler) and the kernels that fuse the logits GEMM with the max (vtlab/models/fused.py: amx.c where the CPU
has AMX, avx512.c where it has AVX-512 bf16 + VNNI), each that runs on this CPU — an AMX machine tests both; a kernel
this CPU cannot run is skipped, saying so."""

from __future__ import annotations

import pytest
import torch

from vtlab.models import fused, pooling
from vtlab.models.quantize import quantize_weight


@pytest.fixture(params=fused.KERNELS, ids=lambda k: k.name)
def kernel(request, monkeypatch) -> fused.FusedKernel:
    """Each fused kernel in turn as the one the pooling uses (skipped where this CPU or compiler cannot run it)."""
    lib = fused.open_kernel(request.param)
    if lib is None:
        pytest.skip(f"the {request.param.name} kernel does not run here (CPU flags {sorted(request.param.flags)})")
    monkeypatch.setattr(fused, "_kernel", lambda: lib)
    return request.param


def _masked_max(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[B, L, V] logits → [B, V] max over the masked positions (-inf for a text without any), the literal way."""
    return logits.masked_fill(~mask.bool()[:, :, None], float("-inf")).amax(dim=1)


def _batch(B: int, L: int, H: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(B, L, H, generator=g)
    lengths = torch.randint(1, L + 1, (B,), generator=g)
    lengths[0] = L  # one full text, one empty one, one of a single token
    if B > 2:
        lengths[1], lengths[2] = 0, 1
    mask = (torch.arange(L)[None, :] < lengths[:, None]).long()
    return hidden, mask


@pytest.mark.parametrize("init", [True, False])
def test_bf16_tile_max_kernel_equals_torch_amax_bit_for_bit(init):
    if pooling._bf16_max() is None:
        pytest.skip("no C compiler: the pooling takes torch's amax")
    g = torch.Generator().manual_seed(0)
    tile = torch.randn(3, 37, 70, generator=g).bfloat16()
    tile[1, 5:] = float("-inf")  # pad rows
    best = torch.randn(5, 100, generator=g)
    before = best.clone()
    pooling._max_into(tile, best, 1, 4, 20, init)
    expected = tile.float().amax(dim=1)
    if not init:
        expected = torch.maximum(expected, before[1:4, 20:90])
    assert torch.equal(best[1:4, 20:90], expected)
    # nothing outside the target block moved
    outside = torch.ones_like(best, dtype=torch.bool)
    outside[1:4, 20:90] = False
    assert torch.equal(best[outside], before[outside])


def test_pack_layouts_hold_each_weight_where_the_kernels_read_it():
    """AMX's B operand of tdpbf16ps / tdpbusd (which avx512.c reads as one zmm per k-unit): block c, k-step s, row r,
    column n, element i = w[16c + n, s·K + group·r + i] (K = 32 pairs of bf16, 64 quads of int8); rows past V are
    zero."""
    w = torch.arange(35 * 128, dtype=torch.float32).reshape(35, 128) % 251 - 125
    for dtype, group in ((torch.bfloat16, 2), (torch.int8, 4)):
        packed = fused.pack(w, dtype)
        k = 16 * group
        assert packed.shape == (3, 128 // k, 16, 16, group)
        for c, s, r, n, i in [(0, 0, 0, 0, 0), (1, 1, 7, 3, 1), (2, 0, 15, 2, group - 1), (0, 128 // k - 1, 9, 15, 0)]:
            assert float(packed[c, s, r, n, i]) == float(w[16 * c + n, s * k + group * r + i].to(dtype))
        assert not packed[2, :, :, 3:].any()  # columns 35..47: padding


@pytest.mark.parametrize("threads", [1, 2])
def test_fused_bf16_max_equals_the_bf16_reference(kernel, threads, monkeypatch):
    """The fused kernel's max of bf16 products accumulated in fp32 vs the same products summed by torch in fp32:
    equal up to the order of the fp32 sums (H = 128 terms: a few ulps of the largest |product| sum)."""
    monkeypatch.setattr(fused, "MIN_BLOCKS_PER_THREAD", 1)  # split the columns even for a small V
    hidden, mask = _batch(B=6, L=45, H=128, seed=1)
    weight = torch.randn(1000, 128) * 0.05  # V not a multiple of 16
    hb = hidden.bfloat16()
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        got = fused.max_logits(hb, weight, mask)
    finally:
        torch.set_num_threads(before)
    ref = _masked_max(hb.float() @ weight.bfloat16().float().t(), mask)
    assert got.shape == (6, 1000) and torch.equal(torch.isinf(got), torch.isinf(ref))
    assert bool(torch.isinf(got[1]).all())  # the empty text
    finite = torch.isfinite(ref)
    scale = (hb.float().abs() @ weight.bfloat16().float().abs().t()).amax()
    assert float((got[finite] - ref[finite]).abs().max()) <= 1e-6 * float(scale)


def test_fused_bf16_pooling_follows_an_updated_weight(kernel):
    """The packed weight is rebuilt when the weight changes in place (its version), not served stale."""
    hidden, mask = _batch(B=3, L=20, H=64, seed=2)
    weight = torch.randn(50, 64)
    hb = hidden.bfloat16()
    first = fused.max_logits(hb, weight, mask)
    weight.mul_(-1)
    second = fused.max_logits(hb, weight, mask)
    ref = _masked_max(hb.float() @ weight.bfloat16().float().t(), mask)
    assert not torch.allclose(first, second)
    finite = torch.isfinite(ref)
    assert torch.allclose(second[finite], ref[finite], atol=1e-4)


@pytest.mark.parametrize("threads", [1, 2])
def test_fused_int8_max_is_the_exact_integer_max(kernel, threads, monkeypatch):
    """Per-token uint8 activations × per-channel int8 weights: the kernel's integer dot products are exact, so its
    result equals the same quantities computed by torch in float64 up to one fp32 rounding of the product."""
    monkeypatch.setattr(fused, "MIN_BLOCKS_PER_THREAD", 1)  # split the columns even for a small V
    hidden, mask = _batch(B=5, L=40, H=128, seed=3)
    weight = torch.randn(300, 128) * 0.05
    w8, _ = quantize_weight(weight)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        got = fused.max_logits_int8(hidden, w8, mask)
    finally:
        torch.set_num_threads(before)
    x = hidden[mask.bool()]
    q, scale, zero = fused.quantize_tokens(x)
    assert float((scale[:, None] * (q.double() - zero[:, None]) - x).abs().max()) <= float(scale.max()) / 2 + 1e-6
    dots = q.double() @ w8.double().t() - zero.double()[:, None] * w8.double().sum(1)[None, :]
    per_token = scale.double()[:, None] * dots
    full = torch.full((5, 40, 300), float("-inf"), dtype=torch.float64)
    full[mask.bool()] = per_token
    ref = _masked_max(full, mask)
    finite = torch.isfinite(ref)
    assert torch.equal(torch.isinf(got), torch.isinf(ref))
    assert torch.allclose(got[finite].double(), ref[finite], rtol=1e-6, atol=1e-6)


def test_fused_paths_are_used_by_the_encoder_where_available(kernel, monkeypatch):
    """bf16 pooling and the int8 decoder go through the fused kernels on this CPU (not silently through the tiles)."""
    calls = []
    real_bf16, real_int8 = fused.max_logits, fused.max_logits_int8
    monkeypatch.setattr(fused, "max_logits", lambda *a: calls.append("bf16") or real_bf16(*a))
    monkeypatch.setattr(fused, "max_logits_int8", lambda *a: calls.append("int8") or real_int8(*a))
    hidden, mask = _batch(B=2, L=10, H=64, seed=4)
    weight, bias = torch.randn(40, 64), torch.zeros(40)
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        pooling.max_logits(hidden, weight, bias, mask)
    from vtlab.models.quantize import Int8Decoder

    with torch.inference_mode():
        pooling.tiled_max_logits(hidden, Int8Decoder(torch.nn.Linear(64, 40)), mask)
    assert calls == ["bf16", "int8"]
