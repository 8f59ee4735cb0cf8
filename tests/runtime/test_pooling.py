"""The fused SPLADE pooling equals the literal definition, in value and in gradient."""

import pytest
import torch

from vtlab.models.activation import splade_activation
from vtlab.runtime import pooling
from vtlab.runtime.pooling import DEFAULT_CHUNK_BYTES, max_logits


def splade_pool(hidden, weight, bias, mask, double_log=False, chunk_bytes=DEFAULT_CHUNK_BYTES):
    """SPLADE max pooling as the encoder composes it: w[b, v] = log1p(relu(max_i logit[b, i, v]))."""
    return splade_activation(max_logits(hidden, weight, bias, mask, chunk_bytes), double_log)


def literal(hidden, weight, bias, mask):
    """Reference: full B×L×V logits → log1p(relu) → zero the padding → max over positions."""
    logits = hidden @ weight.t() + bias
    return torch.log1p(torch.relu(logits)).masked_fill(~mask.bool().unsqueeze(-1), 0.0).amax(dim=1)


def _inputs(B=3, L=7, H=5, V=11, dtype=torch.double, seed=0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(B, L, H, generator=g, dtype=dtype, requires_grad=True)
    weight = torch.randn(V, H, generator=g, dtype=dtype, requires_grad=True)
    bias = torch.randn(V, generator=g, dtype=dtype, requires_grad=True)
    mask = torch.ones(B, L, dtype=torch.long)
    mask[1, 4:] = 0
    mask[2, 2:] = 0
    return hidden, weight, bias, mask


@pytest.mark.parametrize("chunk_bytes", [1, 64, 10**9])  # 1 position per chunk, a few, everything at once
def test_value_equals_literal(chunk_bytes):
    hidden, weight, bias, mask = _inputs()
    out = splade_pool(hidden, weight, bias, mask, chunk_bytes=chunk_bytes)
    assert torch.allclose(out, literal(hidden, weight, bias, mask), atol=1e-12)


def test_max_logits_gradcheck():
    hidden, weight, bias, mask = _inputs()
    assert torch.autograd.gradcheck(lambda h, w, b: max_logits(h, w, b, mask, 64), (hidden, weight, bias))


def test_gradient_equals_literal_through_activation():
    hidden, weight, bias, mask = _inputs(B=4, L=9, H=6, V=50, seed=1)
    upstream = torch.randn(4, 50, dtype=torch.double)
    grads_fused = torch.autograd.grad(
        (splade_pool(hidden, weight, bias, mask, chunk_bytes=200) * upstream).sum(), (hidden, weight, bias)
    )
    grads_ref = torch.autograd.grad((literal(hidden, weight, bias, mask) * upstream).sum(), (hidden, weight, bias))
    for a, b in zip(grads_fused, grads_ref):
        assert torch.allclose(a, b, atol=1e-10)


def test_double_log_is_l0_activation():
    hidden, weight, bias, mask = _inputs()
    single = splade_pool(hidden, weight, bias, mask)
    assert torch.allclose(splade_pool(hidden, weight, bias, mask, double_log=True), torch.log1p(single))


def test_float32_matches_reference():
    hidden, weight, bias, mask = _inputs(B=8, L=33, H=16, V=300, dtype=torch.float32, seed=2)
    out = splade_pool(hidden, weight, bias, mask, chunk_bytes=8 * 4 * 300 * 3)
    assert torch.allclose(out, literal(hidden, weight, bias, mask), atol=1e-5)


def test_mixed_precision_autocast():
    """Under bf16 autocast the vocabulary matmul runs in bf16 and the result stays close to the fp32 reference."""
    hidden, weight, bias, mask = _inputs(B=4, L=16, H=32, V=200, dtype=torch.float32, seed=3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = splade_pool(hidden, weight, bias, mask)
    assert out.dtype == torch.float32
    assert torch.allclose(out, literal(hidden, weight, bias, mask), atol=0.1, rtol=0.02)
    out.sum().backward()
    assert hidden.grad is not None and torch.isfinite(hidden.grad).all() and weight.grad.dtype == torch.float32


@pytest.mark.parametrize(
    "chunk_bytes,columns,shape",
    [
        (1, 2048, (1, 1, 1)),  # one logit per tile
        (8 * 4 * 3, 4, (1, 3, 4)),  # runs of 3 positions of one doc × 4 vocabulary columns (last tile 3)
        (8 * 4 * 18, 4, (2, 9, 4)),  # groups of 2 whole docs × 4 columns
        (10**9, 2048, (10**9 // 8 // 11 // 9, 9, 11)),  # everything in one tile
    ],
)
def test_tiles_with_empty_and_long_rows(chunk_bytes, columns, shape, monkeypatch):
    """Tiles over texts × vocabulary: an all-pad row gives -inf max-logits (weight 0); docs straddling tiles are
    exact, in value and gradient."""
    monkeypatch.setattr(pooling, "TILE_COLUMNS", columns)
    assert pooling.tile_shape(9, 11, 8, chunk_bytes) == shape
    hidden, weight, bias, mask = _inputs(B=4, L=9, H=6, V=11, seed=4)
    mask[0, :] = 0  # an empty row first
    mask[3, 1:] = 0  # a one-token row last
    z = max_logits(hidden, weight, bias, mask, chunk_bytes)
    assert torch.isneginf(z[0]).all()
    ref = literal(hidden, weight, bias, mask)
    assert torch.allclose(splade_pool(hidden, weight, bias, mask, chunk_bytes=chunk_bytes), ref, atol=1e-12)
    upstream = torch.randn(4, 11, dtype=torch.double)
    fused = torch.autograd.grad(
        (splade_pool(hidden, weight, bias, mask, chunk_bytes=chunk_bytes) * upstream).sum(), (hidden, weight, bias)
    )
    expected = torch.autograd.grad((ref * upstream).sum(), (hidden, weight, bias))
    for a, b in zip(fused, expected):
        assert torch.allclose(a, b, atol=1e-10)


class _ExactHead:
    """A TileLogits that is the float matmul itself: tiled_max_logits must then equal the fused fp32 pooling."""

    def __init__(self, weight, bias):
        self.weight, self.bias = weight.detach(), bias.detach()
        self.prepared = []  # (rows, real rows) per prepare() call

    @property
    def vocab_size(self):
        return self.weight.shape[0]

    def prepare(self, x, real=None):
        self.prepared.append((x.shape[0], x.shape[0] if real is None else int(real.sum())))
        return x

    def logits(self, x, v0, v1, cols):
        assert v0 % cols == 0 and v1 - v0 <= cols  # blocks start at multiples of the tile width (int8 packs them so)
        return x @ self.weight[v0:v1].t()

    def fused_max(self, hidden, mask):
        return None  # no fused kernel: the tiles run


@pytest.mark.parametrize("chunk_bytes,columns", [(8 * 4 * 3, 4), (8 * 4 * 18, 4), (10**9, 2048)])
def test_tiled_max_with_another_head_equals_literal(chunk_bytes, columns, monkeypatch):
    """The tile loop an int8 decoder runs through: same tiles, prepare() once per tile of positions with the tile's
    real (non-pad) rows marked, the bias after the max; empty rows stay -inf (weight 0)."""
    monkeypatch.setattr(pooling, "TILE_COLUMNS", columns)
    hidden, weight, bias, mask = _inputs(B=4, L=9, H=6, V=11, seed=4)
    mask[0, :] = 0
    mask[3, 1:] = 0
    head = _ExactHead(weight, bias)
    with torch.no_grad():
        z = pooling.tiled_max_logits(hidden.detach(), head, mask, chunk_bytes)
        assert torch.isneginf(z[0]).all()
        assert torch.allclose(torch.log1p(torch.relu(z)), literal(hidden, weight, bias, mask), atol=1e-12)
        assert torch.equal(z, max_logits(hidden.detach(), weight.detach(), bias.detach(), mask, chunk_bytes))
    assert sum(real for _, real in head.prepared) == int(mask.sum())  # every real token in exactly one tile
