"""The cached loss (model.cached_mini_batch, vtlab/models/cached_step.py) gives the gradient of the whole batch.

The reference is plain autograd over the whole batch's loss: the representations encoded mini-batch by mini-batch
(one pass per mini-batch, in the order the cached step draws its dropout masks) with every graph kept, one backward.
With dropout on, that reference only matches when the cached step replays each mini-batch's dropout masks and sends
each mini-batch its own rows of the cached gradient. With one mini-batch, or without dropout, the reference is the
uncached training step itself. Two processes (gloo, through DistributedDataParallel): the end of this file.
"""

from __future__ import annotations

import functools

import pytest
import pytorch_lightning as pl
import torch
from transformers import get_linear_schedule_with_warmup

from vtlab.bench.cached_check import (
    GROUP,
    LOSSES,
    VOCAB,
    B,
    bf16_step_grads,
    check_on,
    make_batch,
    reference_grads,
    step_grads,
    tiny_module,
    worst_error,
)
from vtlab.core.errors import ConfigError

pytestmark = pytest.mark.train

# ---- one process --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("loss", list(LOSSES))
def test_mini_batches_give_the_whole_batch_gradient_with_dropout(loss):
    batch = make_batch()
    ref_loss, ref = reference_grads(tiny_module(loss), batch, mini_batch=3)  # 3 + 3 + 2 queries: a ragged tail
    got_loss, got = step_grads(tiny_module(loss, cached=3), batch)
    assert got_loss == pytest.approx(ref_loss, rel=1e-6)
    assert worst_error(got, ref) <= 1e-5
    # dropout matters here: the one-pass step draws other masks, so the match above is the replay's doing
    _, one_pass = step_grads(tiny_module(loss), batch)
    assert worst_error(one_pass, ref) > 1e-2


@pytest.mark.parametrize("loss", list(LOSSES))
def test_one_mini_batch_is_the_uncached_step_with_dropout(loss):
    batch = make_batch()
    ref_loss, ref = step_grads(tiny_module(loss), batch)
    got_loss, got = step_grads(tiny_module(loss, cached=B), batch)
    assert got_loss == pytest.approx(ref_loss, rel=1e-6)
    assert worst_error(got, ref) <= 1e-5


def test_without_dropout_mini_batches_are_the_uncached_step():
    batch = make_batch()
    ref_loss, ref = step_grads(tiny_module("margin-mse+flops", dropout=0.0), batch)
    got_loss, got = step_grads(tiny_module("margin-mse+flops", cached=3, dropout=0.0), batch)
    assert got_loss == pytest.approx(ref_loss, rel=1e-6)
    assert worst_error(got, ref) <= 1e-5


def test_bf16_autocast_is_replayed():
    """Under the trainer's bf16 autocast the replay computes in bf16 too: the uncached step's gradients, not those
    of an fp32 re-encoding (which differ by bf16's rounding, ~1e-2)."""
    assert worst_error(bf16_step_grads(B, "cpu"), bf16_step_grads(None, "cpu")) <= 1e-5


def test_the_gpu_checks_claims_hold_on_the_cpu():
    """`make gpu-check`'s step on the CPU: every loss's fp32 error and the bf16 one within their tolerances."""
    report = check_on("cpu")
    assert report["passed"], report
    assert set(report["worst_error"]) == {*(f"fp32/{loss}" for loss in LOSSES), "bf16/infonce+flops"}


def test_the_step_keeps_the_module_contract():
    module = tiny_module(cached=3)
    loss = module.training_step(make_batch(), 0)
    assert loss.requires_grad and torch.isfinite(loss)
    last = module.last_batch
    assert last["q"].shape == (B, VOCAB) and last["d"].shape == (B * GROUP, VOCAB) and last["group_size"] == GROUP
    assert not last["q"].requires_grad


@pytest.mark.parametrize(("bad", "typed"), [(0, "0"), (-2, "-2"), (1.5, "1.5"), (True, "true"), ("8", "'8'")])
def test_a_bad_mini_batch_is_refused(bad, typed, compose):
    with pytest.raises(ConfigError, match="cached_mini_batch"):
        tiny_module(cached=bad)
    from vtlab.runs.checks import check_config

    with pytest.raises(ConfigError, match="model.cached_mini_batch"):
        check_config(compose([f"model.cached_mini_batch={typed}"]))
    check_config(compose(["model.cached_mini_batch=4"]))
    assert compose([]).model.cached_mini_batch is None


# ---- the optimizer: Lightning's automatic optimization, clipping, accumulation and schedule apply unchanged ----------


def fit_weights(cached: int | None, clip: float | None, accumulate: int) -> dict[str, torch.Tensor]:
    scheduler = functools.partial(get_linear_schedule_with_warmup, num_warmup_steps=1)
    module = tiny_module("infonce+flops", cached=cached, dropout=0.0, scheduler=scheduler)
    batches = [make_batch(seed=s) for s in range(2 * accumulate)]
    loader = torch.utils.data.DataLoader(batches, batch_size=None)
    pl.seed_everything(3)
    trainer = pl.Trainer(
        accelerator="cpu",
        max_steps=2,
        gradient_clip_val=clip,
        accumulate_grad_batches=accumulate,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
    )
    trainer.fit(module, train_dataloaders=loader)
    assert trainer.global_step == 2
    return {n: p.detach().clone() for n, p in module.named_parameters()}


@pytest.mark.parametrize(("clip", "accumulate"), [(None, 1), (0.05, 2)])
def test_two_optimizer_steps_give_the_same_weights(clip, accumulate):
    before = {n: p.detach().clone() for n, p in tiny_module(dropout=0.0).named_parameters()}
    ref = fit_weights(None, clip, accumulate)
    got = fit_weights(3, clip, accumulate)
    moved = torch.cat([(ref[n] - before[n]).flatten() for n in ref])
    got_moved = torch.cat([(got[n] - before[n]).flatten() for n in ref])
    # the whole update at once: AdamW scales each entry by its own gradient's size, so the rounding noise of a zero
    # gradient (the key biases, see worst_error) becomes a step of its own, tiny in absolute terms
    assert float((got_moved - moved).norm() / moved.norm()) <= 1e-5
    assert float(moved.abs().max()) > 1e-3  # the weights really moved


# ---- two processes (gloo), through DistributedDataParallel: vtlab.bench.cached_check.two_process_check, run by
# `make gpu-check-cpu`'s cached_loss_ddp step (tests/runs/test_gpu_check.py) -------------------------------------------
