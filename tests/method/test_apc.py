"""Activation Potential Calibration on SPLADE-tiny: the ~40%-positive criterion, positives-only cutoff, fixed shifts,
the Lightning callback inside a real fit, config validation."""

import json
import logging
from types import SimpleNamespace

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from helpers import CONF, compose_config
from hydra.utils import instantiate
from omegaconf import OmegaConf

from vtlab.apc.calibration import APC
from vtlab.backbones import Backbone
from vtlab.callbacks.apc import APCCallback
from vtlab.core import progress as progress_module
from vtlab.core.errors import VtlabError
from vtlab.core.progress import INTERVAL_ENV
from vtlab.data.corpora import boolq_passages
from vtlab.models.encoder import SpladeEncoder

pytestmark = pytest.mark.usefixtures("shared_cache")
# shorter than the default 256: same statistics (39.8% vs 39.9% positive at 128), a quarter of the CPU time
DOC_LEN = 64


def splade_tiny(doc_len: int = DOC_LEN) -> SpladeEncoder:
    return SpladeEncoder.from_backbone(Backbone("asset:splade-tiny"), doc_max_length=doc_len)


@torch.inference_mode()
def real_max_logits(encoder: SpladeEncoder, texts, batch_size: int = 50) -> torch.Tensor:
    """A fresh forward pass (not APC's shortcut): [N, V] raw max-logits."""
    encoder.eval()
    rows = []
    for i in range(0, len(texts), batch_size):
        enc = encoder.tokenize(texts[i : i + batch_size], "doc")
        rows.append(encoder.max_logits(enc["input_ids"], enc["attention_mask"], "doc"))
    return torch.cat(rows)


@pytest.mark.slow
def test_p60_with_zeros_leaves_about_40_percent_positive():
    texts = list(boolq_passages()[:200])
    encoder = splade_tiny()
    bias_before = encoder.output_bias("doc").detach().clone()
    report = APC(percentile=60, include_zeros=True, num_docs=200, max_length=DOC_LEN).calibrate(encoder, texts)
    assert report["n_docs"] == 200 and report["n_samples"] > 0
    assert report["before"]["positive_share"] < 0.05  # trained SPLADE: sparse before APC
    # the bias moved by exactly -cutoff (the decoder bias is one tied Parameter: shifted once)
    assert torch.allclose(encoder.output_bias("doc").detach(), bias_before - report["cutoff"], atol=1e-6)
    z = real_max_logits(encoder, texts)
    share = float((z > 0).float().mean())
    assert share == pytest.approx(0.40, abs=0.02)
    # APC's after-stats (derived without a second pass) agree with the real pass
    assert report["after"]["positive_share"] == pytest.approx(share, abs=1e-3)
    assert report["after"]["mean_active_per_doc"] == pytest.approx(float((z > 0).sum(1).float().mean()), rel=1e-2)
    assert report["after"]["dead_fraction"] == pytest.approx(float((z.amax(0) <= 0).float().mean()), abs=1e-3)


def test_positives_only_cutoff_is_the_percentile_of_positive_values():
    texts = list(boolq_passages()[:16])
    encoder = splade_tiny()
    z = real_max_logits(encoder, texts, batch_size=16).numpy()
    expected = np.percentile(z[z > 0].astype(np.float64), 60)
    # Caps above the number of positives: APC takes every positive once instead of resampling with replacement
    # (resampling a pool smaller than its quota only adds noise), so the cutoff is exact, not approximate.
    apc = APC(
        percentile=60, include_zeros=False, num_docs=16, max_length=64, per_batch_samples=10**8, max_samples=10**9
    )
    report = apc.calibrate(encoder, texts)
    assert report["n_samples"] == int((z > 0).sum())
    assert report["cutoff"] > 0  # the 60th percentile of positives is positive: fewer terms survive
    assert report["cutoff"] == pytest.approx(expected, abs=1e-4)  # only batch padding/order differ: float noise
    assert report["after"]["positive_share"] == pytest.approx(0.4 * report["before"]["positive_share"], rel=0.02)


@pytest.mark.slow
@pytest.mark.parametrize("percentile", [60, 99])
def test_per_term_cutoff_is_each_terms_own_percentile(percentile, tmp_path):
    texts = list(boolq_passages()[:40])
    encoder = splade_tiny()
    z = real_max_logits(encoder, texts).double().numpy()
    expected = np.percentile(z, percentile, axis=0)  # numpy's reference, one cutoff per vocabulary column
    bias_before = encoder.output_bias("doc").detach().clone()
    # batch_size 8 < the 17 top values p60 of 40 needs: the streamed top-k is merged across several batches
    apc = APC(percentile=percentile, include_zeros=True, num_docs=40, max_length=DOC_LEN, batch_size=8, per_term=True)
    report = apc.calibrate(encoder, texts)
    shift = (bias_before - encoder.output_bias("doc").detach()).double().numpy()
    np.testing.assert_allclose(shift, expected, atol=1e-4)
    after = z - expected
    assert report["after"]["positive_share"] == pytest.approx(float((after > 1e-4).mean()), abs=2e-3)
    # every term active in about (100 - p)% of the documents, whatever its offset was
    per_term = (after > 1e-4).mean(axis=0)
    assert np.abs(per_term - (100 - percentile) / 100).max() <= 1 / 40 + 1e-9
    assert report["name"] == f"p{percentile}-term" and report["cutoff"] == pytest.approx(expected.mean(), abs=1e-4)
    png = _write_report(report, tmp_path)
    assert png.stat().st_size > 0


def _write_report(report, out):
    from vtlab.apc.calibration import write_outputs

    jpath, png = write_outputs(report, out)
    assert json.loads(jpath.read_text())["per_term"] is True
    return png


def test_per_term_needs_a_percentile_over_every_value():
    with pytest.raises(VtlabError, match=r"apc\.per_term"):
        APC(percentile=99, include_zeros=False, per_term=True)
    with pytest.raises(VtlabError, match=r"apc\.per_term"):
        APC(percentile=None, shift=1.0, per_term=True)


@pytest.mark.parametrize("recipe", ["dead", "dense"])
def test_shift_recipes_make_dead_or_dense_starts(recipe, tmp_path):
    texts = list(boolq_passages()[200:208])
    # the dead start uses separate query/doc networks: both biases must move (by the same constant)
    encoder = SpladeEncoder.from_backbone(
        Backbone("asset:splade-tiny"), shared=recipe != "dead", doc_max_length=DOC_LEN
    )
    query_bias = encoder.output_bias("query").detach().clone()
    cfg = OmegaConf.load(CONF / "start" / f"{recipe}.yaml")
    apc: APC = instantiate(cfg, num_docs=8, max_length=DOC_LEN)
    seen: list[dict] = []
    recorder = SimpleNamespace(log_metrics=lambda metrics, step: seen.append({"step": step, **metrics}))
    trainer = SimpleNamespace(
        loggers=[recorder],
        is_global_zero=True,
        default_root_dir=str(tmp_path),
        strategy=SimpleNamespace(root_device=torch.device("cpu")),
    )
    callback = APCCallback(apc, texts=lambda: texts)
    callback.setup(trainer, SimpleNamespace(encoder=encoder), "fit")
    assert callback.report["cutoff"] == -apc.shift
    assert torch.allclose(encoder.output_bias("query").detach(), query_bias + apc.shift, atol=1e-5)
    assert seen and seen[0]["step"] == 0 and seen[0]["apc/cutoff"] == -apc.shift
    assert (tmp_path / "apc_report.json").exists() and (tmp_path / "apc_hist.png").exists()
    with torch.inference_mode():
        enc = encoder.tokenize(texts, "doc")
        active = (encoder(enc["input_ids"], enc["attention_mask"], "doc") > 0).sum(1).float()
    if recipe == "dead":
        assert active.max() == 0 and callback.report["after"]["dead_fraction"] == 1.0
    else:
        assert active.min() >= 0.9 * encoder.vocab_size
        assert callback.report["after"]["positive_share"] >= 0.9


class _BiasSnapshot(pl.Callback):
    """Listed after APCCallback: the doc bias right after calibration, before any optimizer step."""

    def setup(self, trainer, pl_module, stage):
        self.bias = pl_module.encoder.output_bias("doc").detach().clone()


@pytest.mark.train
def test_callback_calibrates_inside_a_fast_dev_run_fit(tmp_path):
    cfg = compose_config(
        [
            "backbone=splade-tiny",
            "logger=none",
            f"paths.run_dir={tmp_path}",
            "+trainer.fast_dev_run=true",
            "data.batch_size=4",
            "data.doc_max_length=64",
            "data.dev.dev_size=10",
            "data.dev.max_docs=50",
            "data.eval_batch_size=32",
            "apc=p60",
            "apc.percentile=55",
            "apc.num_docs=48",
            "apc.max_length=64",
        ]
    )
    module = instantiate(cfg.model)
    datamodule = instantiate(cfg.data, tokenizer=module.encoder.tokenizer, preprocess=None)
    apc = instantiate(cfg.apc)
    assert apc.percentile == 55.0  # the `apc.percentile=55` override reaches the object
    bias_before = module.encoder.output_bias("doc").detach().clone()
    callback, snapshot = APCCallback(apc), _BiasSnapshot()
    trainer = instantiate(cfg.trainer, callbacks=[callback, snapshot], logger=False, enable_progress_bar=False)
    trainer.fit(module, datamodule=datamodule)
    assert trainer.global_step == 1
    report = json.loads((tmp_path / "apc_report.json").read_text())
    assert (tmp_path / "apc_hist.png").stat().st_size > 0
    assert "samples" not in report and report["n_docs"] == 48 and report["percentile"] == 55.0
    assert report["after"]["positive_share"] == pytest.approx(0.45, abs=0.05)
    assert torch.allclose(snapshot.bias, bias_before - report["cutoff"], atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize(
    "accelerator",
    ["cpu", pytest.param("gpu", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"))],
)
def test_the_callback_probes_on_the_trainers_root_device(accelerator, empty_cache, tmp_path):
    """The probe's forward passes run on trainer.strategy.root_device (the callback runs in `setup`, before the
    strategy moves the module there); the encoder is back where it was afterwards, its bias shifted."""
    encoder = splade_tiny()
    bias_before = encoder.output_bias("doc").detach().clone()
    trainer = pl.Trainer(
        accelerator=accelerator, devices=1, logger=False, default_root_dir=tmp_path, enable_progress_bar=False
    )
    seen = []
    hook = encoder.model.register_forward_hook(
        lambda net, args, kwargs, out: seen.append((kwargs["input_ids"].device, out.logits.device)), with_kwargs=True
    )
    apc = APC(percentile=60, num_docs=16, batch_size=8, max_length=DOC_LEN)
    callback = APCCallback(apc, texts=lambda: list(boolq_passages()[:16]))
    try:
        callback.setup(trainer, SimpleNamespace(encoder=encoder), "fit")
    finally:
        hook.remove()
    root = trainer.strategy.root_device
    assert len(seen) == 2 and all(ids == root and hidden == root for ids, hidden in seen)
    assert {p.device.type for p in encoder.parameters()} == {"cpu"}
    assert torch.allclose(encoder.output_bias("doc").detach(), bias_before - callback.report["cutoff"], atol=1e-6)


def test_off_and_validation():
    assert not instantiate(OmegaConf.load(CONF / "apc" / "off.yaml")).enabled
    assert APC().enabled and APC(percentile=None, shift=-1.0).enabled
    for bad in (0, 100, 150, -5):
        with pytest.raises(VtlabError, match=r"apc\.percentile"):
            APC(percentile=bad)
    with pytest.raises(VtlabError, match=r"apc\.percentile.*apc\.shift"):
        APC(percentile=60, shift=-30)
    # the callback does nothing (no probe, no files) when APC is off
    callback = APCCallback(APC(percentile=None), texts=lambda: pytest.fail("probed while off"))
    callback.setup(SimpleNamespace(), SimpleNamespace(), "fit")
    assert callback.report is None


@pytest.mark.slow
def test_a_calibration_is_computed_once_and_reused_bit_for_bit(empty_cache, caplog):
    from vtlab.callbacks.apc import calibrate_cached

    texts = boolq_passages()[:40]
    apc = APC(percentile=99.0, include_zeros=True, per_term=True, num_docs=40, max_length=64)
    first, second, other = splade_tiny(), splade_tiny(), splade_tiny()
    report = calibrate_cached(apc, first, texts)
    with caplog.at_level("INFO", logger="vtlab"):
        again = calibrate_cached(apc, second, texts)
    assert "cached calibration" in caplog.text
    assert torch.equal(first.output_bias("doc"), second.output_bias("doc"))
    assert not torch.equal(first.output_bias("doc"), splade_tiny().output_bias("doc"))  # it did shift
    assert again["cutoff"] == report["cutoff"] and torch.equal(again["samples_after"], report["samples_after"])
    # other probe texts or other weights are another calibration
    caplog.clear()
    with caplog.at_level("INFO", logger="vtlab"):
        calibrate_cached(apc, other, boolq_passages()[40:80])
    assert "cached calibration" not in caplog.text
    assert len([p for p in empty_cache.glob("apc/p99-term-*") if p.is_dir()]) == 2


def test_the_probe_says_how_far_it_got(monkeypatch, caplog):
    """Off a terminal (VTLAB_PROGRESS_INTERVAL=0: a line per batch), the probe counts the documents it has read."""
    monkeypatch.setattr(progress_module, "interactive", lambda: False)
    monkeypatch.setenv(INTERVAL_ENV, "0")
    texts = [f"passage {i} on rivers, lakes and the sea, number {i}." for i in range(10)]
    with caplog.at_level(logging.INFO, logger="vtlab"):
        APC(percentile=60, include_zeros=True, num_docs=10, batch_size=4, max_length=16).probe(splade_tiny(16), texts)
    lines = [r.getMessage().split(", ")[0] for r in caplog.records if r.getMessage().startswith("apc: probing")]
    assert lines == [f"apc: probing: {n}/10 documents ({n * 10}%)" for n in (4, 8, 10)]
