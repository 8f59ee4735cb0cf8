"""The C kernels of SPLADE's pooling against torch references: the bf16 tile max (vtlab/runtime/maxpool.c, any CPU with
a C compiler) and the kernels that fuse the logits GEMM with the max (vtlab/runtime/fused.py: amx.c, avx512.c, avx2.c,
the latter also built with AVX-VNNI), each kernel and precision that runs on this CPU — an AMX Xeon runs them all;
what this CPU cannot run is skipped, saying so."""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
from collections.abc import Iterator

import pytest
import torch

from vtlab.models.activation import splade_activation
from vtlab.runtime import fused, pooling
from vtlab.runtime.quantize import quantize_weight


@pytest.fixture(params=fused.KERNELS, ids=lambda k: k.name)
def kernel(request, monkeypatch) -> fused.FusedKernel:
    """Each fused kernel in turn as the only one the pooling may use (skipped where this CPU or compiler cannot run
    it; `use` skips a precision it does not provide here)."""
    if fused.open_kernel(request.param) is None:
        pytest.skip(f"the {request.param.name} kernel does not run here (needs {dict(request.param.provides)})")
    monkeypatch.setattr(fused, "KERNELS", (request.param,))
    return request.param


def use(kernel: fused.FusedKernel, dtype: torch.dtype) -> None:
    found = fused.kernel_for(dtype)
    if found is None:
        pytest.skip(f"the {kernel.name} kernel has no {dtype} function that runs here")
    assert found[0] is kernel


@contextlib.contextmanager
def _threads(n: int) -> Iterator[None]:
    """torch's intra-op threads set to n (the fused kernels split the vocabulary over them), restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


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


@pytest.mark.parametrize("init", [True, False])
def test_bf16_tile_max_keeps_a_nan_as_torch_amax_does(init):
    """A NaN anywhere in a text's positions (first, middle, after the max) makes its max NaN, like torch's amax."""
    if pooling._bf16_max() is None:
        pytest.skip("no C compiler: the pooling takes torch's amax")
    tile = torch.randn(3, 9, 40, generator=torch.Generator().manual_seed(1)).bfloat16()
    tile[0, 0, 3] = tile[1, 4, 7] = tile[2, 8, 39] = float("nan")
    best = torch.zeros(3, 40)
    pooling._max_into(tile, best, 0, 3, 0, init)
    expected = tile.float().amax(dim=1)
    if not init:
        expected = torch.maximum(expected, torch.zeros(3, 40))
    assert torch.equal(best.isnan(), expected.isnan()) and int(best.isnan().sum()) == 3
    assert torch.equal(best[~best.isnan()], expected[~expected.isnan()])


def test_pack_layouts_hold_each_weight_where_the_kernels_read_it():
    """Block c, k-unit u, column n, element i = w[lanes·c + n, g·u + i] (g = 1 fp32, 2 bf16, 4 int8 values per
    4-byte unit; with 16 lanes AMX's B operand, whose k-step s holds units 16s..16s+15); columns past V are zero."""
    w = torch.arange(35 * 128, dtype=torch.float32).reshape(35, 128) % 251 - 125
    for dtype, group in ((torch.float32, 1), (torch.bfloat16, 2), (torch.int8, 4)):
        for lanes in (16, 8):
            packed = fused.pack(w, dtype, lanes)
            blocks = -(-35 // lanes)
            assert packed.shape == (blocks, 128 // group, lanes, group) and packed.is_contiguous()
            for c, u, n, i in [(0, 0, 0, 0), (1, 17, 3, group - 1), (blocks - 1, 5, 2, 0), (0, 128 // group - 1, 7, 0)]:
                assert float(packed[c, u, n, i]) == float(w[lanes * c + n, group * u + i].to(dtype))
            assert not packed[blocks - 1, :, 35 - lanes * (blocks - 1) :].any()  # padding columns
    # int8 stored with an offset (avx2_shuffle reads the weights as uint8): each value + 128, padding 128
    w8 = (w % 128).to(torch.int8)
    w8[::3] *= -1
    plain, shifted = fused.pack(w8, torch.int8, 8), fused.pack(w8, torch.int8, 8, offset=128)
    assert shifted.dtype == torch.uint8 and torch.equal(shifted.long(), plain.long() + 128)


@pytest.mark.parametrize("threads", [1, 2])
def test_fused_bf16_max_equals_the_bf16_reference(kernel, threads, monkeypatch):
    """The fused kernel's max of bf16 products accumulated in fp32 vs the same products summed by torch in fp32:
    equal up to the order of the fp32 sums (H = 128 terms: a few ulps of the largest |product| sum)."""
    use(kernel, torch.bfloat16)
    monkeypatch.setattr(fused, "MIN_BLOCKS_PER_THREAD", 1)  # split the columns even for a small V
    hidden, mask = _batch(B=6, L=45, H=128, seed=1)
    weight = torch.randn(1000, 128) * 0.05  # V not a multiple of 16
    hb = hidden.bfloat16()
    with _threads(threads):
        got = fused.max_logits(hb, weight, mask)
    ref = _masked_max(hb.float() @ weight.bfloat16().float().t(), mask)
    assert got.shape == (6, 1000) and torch.equal(torch.isinf(got), torch.isinf(ref))
    assert bool(torch.isinf(got[1]).all())  # the empty text
    finite = torch.isfinite(ref)
    scale = (hb.float().abs() @ weight.bfloat16().float().abs().t()).amax()
    assert float((got[finite] - ref[finite]).abs().max()) <= 1e-6 * float(scale)


def test_fused_bf16_pooling_follows_an_updated_weight(kernel):
    """The packed weight is rebuilt when the weight changes in place (its version), not served stale."""
    use(kernel, torch.bfloat16)
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
    use(kernel, torch.int8)
    monkeypatch.setattr(fused, "MIN_BLOCKS_PER_THREAD", 1)  # split the columns even for a small V
    hidden, mask = _batch(B=5, L=40, H=128, seed=3)
    weight = torch.randn(300, 128) * 0.05
    w8, _ = quantize_weight(weight)
    with _threads(threads):
        got = fused.max_logits_int8(hidden, w8, mask)
    x = hidden[mask.bool()]
    q, scale, zero = fused.quantize_tokens(x, kernel.activation_max)
    assert float((scale[:, None] * (q.double() - zero[:, None]) - x).abs().max()) <= float(scale.max()) / 2 + 1e-6
    dots = q.double() @ w8.double().t() - zero.double()[:, None] * w8.double().sum(1)[None, :]
    per_token = scale.double()[:, None] * dots
    full = torch.full((5, 40, 300), float("-inf"), dtype=torch.float64)
    full[mask.bool()] = per_token
    ref = _masked_max(full, mask)
    finite = torch.isfinite(ref)
    assert torch.equal(torch.isinf(got), torch.isinf(ref))
    assert torch.allclose(got[finite].double(), ref[finite], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int8], ids=["fp32", "bf16", "int8"])
def test_the_openmp_split_equals_the_python_threads_bit_for_bit(dtype, monkeypatch):
    """The column split in one OpenMP region of torch's threads (parallel.c) runs the same kernel function on the same
    shares as the Python threads: the same logits bit for bit, 2 and 3 threads (a share per thread, uneven)."""
    if fused.openmp_runner() is None:
        pytest.skip("no OpenMP split here (torch's OpenMP runtime is not GNU's libgomp.so.1, or no compiler)")
    if fused.kernel_for(dtype) is None:
        pytest.skip(f"no fused {dtype} kernel here")
    monkeypatch.setattr(fused, "MIN_BLOCKS_PER_THREAD", 1)
    hidden, mask = _batch(B=6, L=37, H=128, seed=11)
    weight = torch.randn(1003, 128) * 0.05
    if dtype == torch.int8:
        w8, _ = quantize_weight(weight)
        run = lambda: fused.max_logits_int8(hidden, w8, mask)  # noqa: E731
    else:
        run = lambda: fused.max_logits(hidden.to(dtype), weight, mask)  # noqa: E731
    for threads in (2, 3):
        with _threads(threads):
            omp = run()
            with monkeypatch.context() as m:
                m.setattr(fused, "openmp_runner", lambda: None)
                python_threads = run()
        assert torch.equal(omp.isinf(), python_threads.isinf())
        assert torch.equal(omp[omp.isfinite()], python_threads[python_threads.isfinite()])


def test_the_openmp_split_adds_no_second_openmp_runtime():
    """parallel.c's library binds to the OpenMP runtime torch loaded (one libgomp in the process after loading it):
    its team is torch's own threads, not a second pool competing with them for the cores."""
    if fused.openmp_runner() is None:
        pytest.skip("no OpenMP split here")
    mapped = fused._libgomp_mapped()
    assert len(mapped) == 1 and mapped[0].endswith("/libgomp.so.1"), mapped


def test_int8_rivals_give_the_same_logits_bit_for_bit(monkeypatch):
    """avx2 and avx2_shuffle (vtlab/runtime/avx2.c) differ only in how they widen exact integer sums, so which one the
    timing picks never changes a result: their logits are equal bit for bit, for hidden sizes the models use, with
    weights at -128 (stored as 0 by avx2_shuffle) and 127 among them."""
    rivals = [k for k in fused.INT8_RIVALS if fused.open_kernel(k) is not None]
    if len(rivals) < 2:
        pytest.skip("fewer than two int8 rival kernels run here")
    monkeypatch.setattr(fused, "MIN_BLOCKS_PER_THREAD", 1)
    for H in (64, 128, 384):
        hidden, mask = _batch(B=5, L=33, H=H, seed=H)
        w8, _ = quantize_weight(torch.randn(1001, H) * 0.05)
        w8[::7, ::5], w8[1::7, ::3] = -128, 127
        got = []
        for kernel in rivals:
            monkeypatch.setattr(fused, "KERNELS", (kernel,))
            with _threads(2):
                got.append(fused.max_logits_int8(hidden, w8, mask))
        assert all(torch.equal(got[0].isinf(), g.isinf()) for g in got[1:])
        assert all(torch.equal(got[0][got[0].isfinite()], g[g.isfinite()]) for g in got[1:])


def test_the_faster_int8_rival_is_kept(monkeypatch):
    """faster_int8 times each rival on its packed weights and keeps the fastest; a single kernel is taken untimed.
    Two stand-in kernels (the same AVX2 layout, C functions replaced by Python ones taking fixed times) make the
    ordering known."""
    import dataclasses
    import time

    calls: dict[str, int] = {}

    def lib(name: str, seconds: float):
        def f(*args):
            calls[name] = calls.get(name, 0) + 1
            time.sleep(seconds)

        return type("Lib", (), {"vt_fused_max_int8": staticmethod(f)})

    slow = dataclasses.replace(fused.AVX2, name="slow")
    quick = dataclasses.replace(fused.AVX2_SHUFFLE, name="quick")
    libs = {"slow": lib("slow", 0.004), "quick": lib("quick", 0.0)}
    monkeypatch.setattr(fused, "open_kernel", lambda k: libs.get(k.name))
    fused.faster_int8.cache_clear()
    try:
        assert fused.faster_int8((slow, quick)) is quick and fused.faster_int8((quick, slow)) is quick
        assert calls == {"slow": 10, "quick": 10}  # five timed calls each, per ordering
        assert fused.faster_int8((slow,)) is slow and calls["slow"] == 10  # alone: not timed
    finally:
        fused.faster_int8.cache_clear()


@pytest.mark.parametrize("sign", [1, -1])
def test_fused_int8_sums_at_the_extremes_of_the_grids_are_exact(kernel, sign):
    """The largest integer sums the kernels meet: every activation at the top of its grid (activation_max, zero point
    0) times weights at ±127 in every column. AVX2 adds u8×s8 pair sums in int16 (vpmaddubsw, vpaddw) before
    widening: with more activation bits than its grid allows they would saturate or wrap, and this sum would be off
    by thousands. All positive hidden values equal: each token quantizes to activation_max exactly, scale =
    max / activation_max."""
    use(kernel, torch.int8)
    H, V, top = 128, 40, kernel.activation_max
    hidden = torch.full((2, 8, H), 0.5)
    mask = torch.ones(2, 8, dtype=torch.long)
    w8 = torch.full((V, H), 127 * sign, dtype=torch.int8)
    w8[::2, ::3] = -127 * sign  # mixed signs in some columns: the pair sums cancel part of the way
    got = fused.max_logits_int8(hidden, w8, mask)
    q, scale, zero = fused.quantize_tokens(hidden[0], top)
    assert int(q.min()) == int(q.max()) == top and float(zero.abs().max()) == 0.0
    exact = float(scale[0]) * (top * w8.double().sum(1))  # the integer dot product, then the token's scale
    assert torch.allclose(got.double(), exact.expand(2, V), rtol=1e-6, atol=0)


@pytest.mark.parametrize("threads", [1, 2])
def test_fused_fp32_max_equals_the_fp32_reference(kernel, threads, monkeypatch):
    """fp32 FMAs in the kernel's order vs torch's fp32 GEMM: each logit's two sums of H products differ by at most
    ~2·H·2⁻²⁴ of the sum of |products| (the standard bound on a recursive sum), so the max too."""
    use(kernel, torch.float32)
    monkeypatch.setattr(fused, "MIN_BLOCKS_PER_THREAD", 1)
    hidden, mask = _batch(B=6, L=45, H=96, seed=5)
    weight = torch.randn(1001, 96) * 0.05  # V not a multiple of 16 or 8, an odd number of blocks
    with _threads(threads):
        got = fused.max_logits(hidden, weight, mask)
    ref = _masked_max(hidden.double() @ weight.double().t(), mask)
    assert got.shape == (6, 1001) and got.dtype == torch.float32 and torch.equal(torch.isinf(got), torch.isinf(ref))
    finite = torch.isfinite(ref)
    bound = 2 * 96 * 2.0**-24 * float((hidden.abs() @ weight.abs().t()).amax())
    assert float((got[finite].double() - ref[finite]).abs().max()) <= bound


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_fused_max_keeps_a_nan_as_torch_does(kernel, dtype, monkeypatch):
    """A NaN logit makes its (text, column) max NaN, as torch's amax does on the tiles — wherever the NaN token sits
    in the text and however the columns are split — so training's non-finite-loss guard sees it."""
    use(kernel, dtype)
    monkeypatch.setattr(fused, "MIN_BLOCKS_PER_THREAD", 1)
    hidden, mask = _batch(B=4, L=30, H=64, seed=7)
    hidden[0, 0, 3] = float("nan")  # the first token of text 0 (then 29 finite ones)
    hidden[3, int(mask[3].sum()) - 1, 5] = float("nan")  # the last real token of text 3
    weight = torch.randn(300, 64) * 0.1
    weight[7, 3] = weight[7, 5] = 0.0  # 0 · NaN is NaN: every column stays NaN for those tokens
    hidden = hidden.to(dtype)
    with _threads(2):
        got = fused.max_logits(hidden, weight, mask)
    if not kernel.keeps_nan:  # AMX: declines, so the pooling takes the tiled GEMM (test_a_kernel_that_drops_a_nan…)
        assert got is None
        return
    ref = _masked_max(hidden.float() @ weight.to(dtype).float().t(), mask)
    assert bool(torch.isnan(ref[0]).all()) and bool(torch.isnan(ref[3]).all())
    assert torch.equal(torch.isnan(got), torch.isnan(ref))
    finite = torch.isfinite(ref)
    assert torch.allclose(got[finite], ref[finite], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("int8", [False, True], ids=["bf16", "int8"])
def test_the_amx_reductions_equal_torchs_max(int8):
    """amx.c's max over a text's rows of the stored tiles, run alone (AVX-512, no tile instruction, so CPUs without
    AMX check it too): equal to torch's max of the same values — int8's dequantized as sx·(C − zp·rowsum) with one
    rounding per operation, as the FMA and the product do — and of what best already holds."""
    if not {"avx512f", "avx512bw"} <= fused.cpu_flags():
        pytest.skip("the AMX reductions need AVX-512 (this CPU lacks it)")
    lib = fused.AMX.kernel.load()
    if lib is None:
        pytest.skip("amx.c cannot be built here (no C compiler with AMX support)")
    g = torch.Generator().manual_seed(11)
    nc, r0, r1 = 3, 2, 13
    if int8:
        scratch = torch.randint(-(2**20), 2**20, (nc, 16, 16), generator=g, dtype=torch.int32)
        sx, zp = torch.rand(16, generator=g) * 0.01, torch.randint(0, 64, (16,), generator=g).float()
        rowsum = torch.randint(-4000, 4000, (nc * 16,), generator=g).float()
        c = scratch.double() - zp.double()[None, :, None] * rowsum.double().view(nc, 1, 16)
        values = (c.float().double() * sx.double()[None, :, None]).float()  # [nc, rows, 16]
    else:
        scratch = torch.randn(nc, 16, 16, generator=g)
        sx = zp = rowsum = torch.zeros(0)
        values = scratch
    run_max = values[:, r0:r1].amax(dim=1).reshape(-1)
    f = lib.vt_amx_reduce_run
    f.restype, f.argtypes = None, [ctypes.c_int64, ctypes.c_void_p, *[ctypes.c_int64] * 3, *[ctypes.c_void_p] * 4]
    fresh = torch.full((nc * 16,), float("-inf"))  # best as the caller fills it
    held = run_max + torch.randn(nc * 16, generator=g) * float(values.std())  # about half the lanes above the run's
    for dst in (fresh, held):
        expected = torch.maximum(run_max, dst)
        f(int(int8), scratch.data_ptr(), r0, r1, nc, sx.data_ptr(), zp.data_ptr(), rowsum.data_ptr(), dst.data_ptr())
        assert torch.equal(dst, expected)
    assert bool((held > run_max).any()) and bool((held == run_max).any())  # both sides of the max taken


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int8], ids=["fp32", "bf16", "int8"])
def test_a_kernel_that_drops_a_nan_gets_no_non_finite_hidden_state(dtype, monkeypatch):
    """A kernel whose reduction keeps no NaN (AMX; here the kernel that runs, marked so) is not given a text with a
    NaN or an inf hidden state: fused declines (None) and the pooling's tiled GEMM keeps the NaN, as torch's max does;
    finite hidden states still go to the kernel."""
    found = fused.kernel_for(dtype)
    if found is None:
        pytest.skip(f"no fused {dtype} kernel runs here")
    monkeypatch.setattr(fused, "KERNELS", (dataclasses.replace(found[0], keeps_nan=False),))
    hidden, mask = _batch(B=4, L=30, H=64 if dtype != torch.int8 else 128, seed=8)
    weight = torch.randn(200, hidden.shape[2]) * 0.1
    if dtype == torch.int8:
        w8, _ = quantize_weight(weight)
        call = lambda h: fused.max_logits_int8(h, w8, mask)  # noqa: E731
    else:
        hidden = hidden.to(dtype)
        call = lambda h: fused.max_logits(h, weight, mask)  # noqa: E731
    assert call(hidden) is not None
    for bad in (float("nan"), float("inf")):
        broken = hidden.clone()
        broken[3, int(mask[3].sum()) - 1, 5] = bad  # the last real token of text 3
        assert call(broken) is None
        padded = hidden.clone()
        padded[1, 0, 0] = bad  # text 1 is empty: a pad position is not pooled
        assert call(padded) is not None
    if dtype != torch.int8:
        broken = hidden.clone()
        broken[0, 0, 3] = float("nan")
        pooled = pooling.max_logits(broken, weight, None, mask)
        assert bool(torch.isnan(pooled[0]).all()) and not bool(torch.isnan(pooled[2]).any())


def test_fused_fp32_pooling_trains_like_the_tiled_gemm(kernel, monkeypatch):
    """SPLADE pooling in training (fp32, autograd through MaskedMaxLogits) gives the same values and gradients with
    the fused forward as with the tiled GEMM (the backward recomputes the argmax either way)."""
    use(kernel, torch.float32)
    hidden, mask = _batch(B=4, L=30, H=64, seed=6)
    weight, bias = torch.randn(500, 64) * 0.1, torch.randn(500) * 0.1

    def run() -> tuple[torch.Tensor, ...]:
        h, w, b = (t.clone().requires_grad_() for t in (hidden, weight, bias))
        out = splade_activation(pooling.max_logits(h, w, b, mask))
        (out * torch.linspace(0, 1, 500)).sum().backward()
        return out.detach(), h.grad, w.grad, b.grad

    fused_run = run()
    monkeypatch.setattr(fused, "KERNELS", ())  # the tiled GEMM
    tiled_run = run()
    for a, b in zip(fused_run, tiled_run):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)


def test_fused_paths_are_used_by_the_pooling_where_available(kernel, monkeypatch):
    """fp32 and bf16 pooling and the int8 decoder are computed by the fused kernel wherever it provides them on this
    CPU (not silently by the tiles)."""
    computed = {}

    def spy(name, real):
        def wrapped(*args):
            out = real(*args)
            computed[name] = out is not None
            return out

        return wrapped

    monkeypatch.setattr(fused, "max_logits", spy("max", fused.max_logits))
    monkeypatch.setattr(fused, "max_logits_int8", spy("int8", fused.max_logits_int8))
    hidden, mask = _batch(B=2, L=10, H=64, seed=4)
    weight, bias = torch.randn(40, 64), torch.zeros(40)
    from vtlab.runtime.quantize import Int8Decoder

    got = {}
    with torch.inference_mode():
        for name, bf16 in (("fp32", False), ("bf16", True)):
            computed.clear()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                pooling.max_logits(hidden, weight, bias, mask)
            got[name] = computed["max"]
        pooling.tiled_max_logits(hidden, Int8Decoder(torch.nn.Linear(64, 40)), mask)
        got["int8"] = computed["int8"]
    flags = fused.cpu_flags()
    expected = {p: (need := kernel.needs(fused.SUFFIX[fused.DTYPES[p]])) is not None and need <= flags for p in got}
    assert got == expected and any(expected.values())


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ({"avx2", "fma"}, {"fp32": "avx2", "bf16": None, "int8": "avx2|avx2_shuffle"}),  # AMD Zen 2/3: the faster
        ({"avx2", "fma", "avx_vnni"}, {"fp32": "avx2", "bf16": None, "int8": "avx_vnni"}),  # Intel Alder Lake+
        ({"avx2", "fma", "avx512f", "avx512bw", "avx512_vnni"}, {"fp32": "avx512", "bf16": None, "int8": "avx512"}),
        (set(), {"fp32": None, "bf16": None, "int8": None}),  # no x86 flags (e.g. Arm): the tiled GEMM
    ],
    ids=["avx2-only", "avx2-vnni", "avx512-vnni-no-bf16", "none"],
)
def test_each_precision_goes_to_the_first_kernel_the_cpu_flags_allow(flags, expected, monkeypatch):
    """The dispatch by CPU flags alone (a kernel whose flags the CPU lacks is never built or called), with faked flags
    of CPUs this suite may not run on; "a|b": either, whichever of the int8 rivals is faster here (timed: the avx2
    ones run only where the real CPU has AVX2, which every CPU that builds them for this suite has)."""
    monkeypatch.setattr(fused, "cpu_flags", lambda: frozenset(flags))
    fused.open_kernel.cache_clear()  # opened under the faked flags only for this test
    try:
        for names in set(expected.values()) - {None}:
            for name in names.split("|"):
                if fused.open_kernel(next(k for k in fused.KERNELS if k.name == name)) is None:
                    pytest.skip(f"the {name} kernel cannot be built here")
        got = fused.in_use()
        assert set(got) == set(expected)
        for precision, names in expected.items():
            assert got[precision] in (names.split("|") if names else [None]), precision
    finally:
        fused.open_kernel.cache_clear()
