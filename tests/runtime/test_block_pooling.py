"""The accelerator pooling path (block_max_logits) on CPU tensors: values and gradients against the dense float64
definition within the rounding bound vtlab.runtime.pooling_check derives, no host sync in forward or backward, and
the device-type choice of max_logits."""

import pytest
import torch

from vtlab.runtime import pooling
from vtlab.runtime.pooling import BLOCK_ALIGN, BLOCK_BYTES, block_columns, block_max_logits, max_logits
from vtlab.runtime.pooling_check import SMALL_CASES, HostSyncs, check_case, check_on, make_inputs


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("case", SMALL_CASES, ids=lambda c: c.name)
def test_values_and_gradients_within_the_rounding_bound(case, dtype):
    """Padded texts, an all-pad text, several column blocks with a vocabulary that is no multiple of the block, one
    block; fp64, fp32 and bf16 hidden states (fp32 weight)."""
    report = check_case(case, dtype, "cpu")
    assert report["ok"], report
    assert report["empty_rows_neginf"]


def test_fp64_equals_the_cpu_path_in_value_and_gradient():
    hidden, weight, bias, mask = make_inputs(SMALL_CASES[0], torch.float64, "cpu", seed=3)
    upstream = torch.randn(hidden.shape[0], weight.shape[0], dtype=torch.float64)
    block = block_max_logits(hidden, weight, bias, mask, 128 * 5 * 9 * 8)
    tiled = max_logits(hidden, weight, bias, mask)
    real = torch.isfinite(tiled)
    assert torch.equal(real, torch.isfinite(block)) and torch.allclose(block[real], tiled[real], atol=1e-12)
    upstream = torch.where(real, upstream, 0.0)
    for a, b in zip(
        torch.autograd.grad(block, (hidden, weight, bias), upstream),
        torch.autograd.grad(tiled, (hidden, weight, bias), upstream),
    ):
        assert torch.allclose(a, b, atol=1e-12)


def test_gradcheck():
    hidden, weight, bias, mask = make_inputs(SMALL_CASES[1], torch.float64, "cpu")
    mask[:, 0] = 1  # every text has a position: the all-pad -inf has no finite difference
    assert torch.autograd.gradcheck(
        lambda h, w, b: block_max_logits(h, w, b, mask, 7 * 3 * 7 * 8), (hidden, weight, bias)
    )


def test_no_host_sync_in_forward_or_backward():
    """Every operator the path dispatches, forward and backward, is one a device queues without the host waiting."""
    hidden, weight, bias, mask = make_inputs(SMALL_CASES[0], torch.float32, "cpu")
    with HostSyncs() as watch:
        out = block_max_logits(hidden, weight, bias, mask, 128 * 5 * 9 * 4)
        torch.autograd.grad(out, (hidden, weight, bias), torch.randn_like(out))
    assert watch.found == []
    assert {"mm", "max", "scatter_"} <= watch.seen  # backward ran inside the watch too


def test_the_watch_sees_the_cpu_paths_syncs():
    """The CPU path reads the mask on the host (its all-pad checks): the same watch reports that."""
    hidden, weight, bias, mask = make_inputs(SMALL_CASES[0], torch.float64, "cpu")
    with HostSyncs() as watch:
        max_logits(hidden, weight, bias, mask)
    assert any("nonzero" in op or "_local_scalar_dense" in op for op in watch.found)


def test_runs_on_meta_tensors():
    """Meta tensors hold no data, so a host read of a device value would fail: forward and backward run on shapes
    alone, and max_logits takes this path for any device but the CPU."""
    hidden, weight, bias, mask = (t.detach().to("meta") for t in make_inputs(SMALL_CASES[0], torch.float32, "cpu"))
    hidden.requires_grad_(), weight.requires_grad_(), bias.requires_grad_()
    out = max_logits(hidden, weight, bias, mask)
    assert out.device.type == "meta" and out.shape == (5, 300) and out.dtype == torch.float32
    out.sum().backward()
    assert hidden.grad.shape == hidden.shape and weight.grad.shape == weight.shape and bias.grad.shape == bias.shape


def test_bf16_autocast_casts_the_hidden_states_and_returns_fp32():
    hidden, weight, bias, mask = make_inputs(SMALL_CASES[2], torch.float32, "cpu")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = block_max_logits(hidden, weight, bias, mask)
    assert out.dtype == torch.float32
    assert torch.equal(out, block_max_logits(hidden.to(torch.bfloat16), weight, bias, mask))


def test_without_autograd_the_same_values():
    hidden, weight, bias, mask = make_inputs(SMALL_CASES[0], torch.float32, "cpu")
    with torch.inference_mode():
        untracked = block_max_logits(hidden, weight, bias, mask, 128 * 5 * 9 * 4)
    assert torch.equal(untracked, block_max_logits(hidden, weight, bias, mask, 128 * 5 * 9 * 4))


def test_block_columns_from_the_budget():
    # SPLADE-tiny's batch of 32 docs × 256 in bf16: 16,384 columns in 256 MiB (two blocks of 30,522)
    assert block_columns(32, 256, 30522, 2) == BLOCK_BYTES // (32 * 256 * 2) == 16384
    assert block_columns(32, 256, 30522, 2, 10**6 * 32 * 256 * 2) == 30522  # never past the vocabulary
    assert block_columns(3, 7, 50, 8, (BLOCK_ALIGN + 5) * 3 * 7 * 8) == 50
    assert block_columns(3, 7, 500, 8, (BLOCK_ALIGN + 5) * 3 * 7 * 8) == BLOCK_ALIGN  # rounded to the alignment
    assert block_columns(3, 7, 500, 8, 7 * 3 * 7 * 8) == 7  # below the alignment: as many as fit
    assert block_columns(3, 7, 500, 8, 1) == 1


def test_check_on_reports_every_case():
    report = check_on("cpu", dtypes=(torch.float32,), large=False)
    assert report.pop("ok") is True
    assert sorted(report) == sorted(f"{c.name}/float32" for c in SMALL_CASES)
    assert all(r["host_syncs"] == [] and r["value_ratio"] <= 1 for r in report.values())


def test_max_logits_keeps_the_cpu_path_on_cpu(monkeypatch):
    monkeypatch.setattr(pooling, "block_max_logits", lambda *a, **k: pytest.fail("block path on CPU"))
    hidden, weight, bias, mask = make_inputs(SMALL_CASES[2], torch.float32, "cpu")
    max_logits(hidden, weight, bias, mask)
