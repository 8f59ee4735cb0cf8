"""APC on a model with switched-off output terms (vocab=lowercase-masked: cased rows at weight 0, bias MASKED_BIAS).

A tiny ModernBERT on the real OLMo BPE, its 13,028 cased output rows masked by vtlab.vocab.masked_outputs itself:
every form of APC leaves the masked biases at MASKED_BIAS and their SPLADE activation at 0, shifts the live terms
exactly as numpy's percentile of a fresh forward pass says (per term, or over the live values only), and reports how
many terms it left switched off."""

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from vtlab.apc.calibration import APC, OFF_LOGIT, summary_line, write_outputs
from vtlab.backbones import TinyModernBert
from vtlab.callbacks.apc import APCCallback
from vtlab.core.errors import VtlabError
from vtlab.data.corpora import boolq_passages
from vtlab.models.encoder import SpladeEncoder
from vtlab.vocab.masked_outputs import MASKED_BIAS, CasedOutputsMasked, cased_ids

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("shared_cache")]
DOC_LEN = 64
N_DOCS = 40


def masked_encoder() -> tuple[SpladeEncoder, list[int]]:
    """A fresh tiny ModernBERT with its cased output rows masked as vocab=lowercase-masked masks them."""
    backbone = TinyModernBert(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
    tokenizer = backbone.load_tokenizer()
    model = backbone.load_model()
    arm = CasedOutputsMasked("lowercase-masked")
    report = arm.derive_model(model, tokenizer)
    masked = cased_ids(tokenizer)
    assert report["masked_outputs"] == len(masked) > 10_000
    encoder = SpladeEncoder(model, tokenizer, preprocess=arm.preprocess, doc_max_length=DOC_LEN, precision="fp32")
    return encoder, masked


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return list(boolq_passages()[:N_DOCS])


@torch.inference_mode()
def fresh_pass(encoder: SpladeEncoder, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """A forward pass of its own (not APC's probe): raw max-logits z and SPLADE activations w, both [N, V]."""
    encoder.eval()
    enc = encoder.tokenize(texts, "doc")
    z = encoder.max_logits(enc["input_ids"], enc["attention_mask"], "doc")
    w = encoder(enc["input_ids"], enc["attention_mask"], "doc")
    return z.double().numpy(), w.double().numpy()


def live_terms(vocab: int, masked: list[int]) -> np.ndarray:
    keep = np.ones(vocab, dtype=bool)
    keep[masked] = False
    return keep


@pytest.mark.parametrize("percentile", [60, 99])
def test_per_term_apc_keeps_masked_terms_off_and_shifts_the_others_by_their_own_percentile(
    percentile: int, texts: list[str], tmp_path
):
    encoder, masked = masked_encoder()
    z, _ = fresh_pass(encoder, texts)
    live = live_terms(z.shape[1], masked)
    assert (z[:, masked] <= OFF_LOGIT).all() and (z[:, live] > OFF_LOGIT).all()  # the premise: masked rows read -1e4
    expected = np.percentile(z[:, live], percentile, axis=0)  # numpy's reference, one cutoff per live column
    bias_before = encoder.output_bias("doc").detach().clone().double().numpy()

    apc = APC(percentile=percentile, num_docs=N_DOCS, max_length=DOC_LEN, batch_size=8, per_term=True)
    report = apc.calibrate(encoder, texts)

    bias = encoder.output_bias("doc").detach()
    assert (bias[masked] == MASKED_BIAS).all()  # not lifted to its own percentile (about 0)
    np.testing.assert_allclose(bias_before[live] - bias.double().numpy()[live], expected, atol=1e-4)
    z_after, w_after = fresh_pass(encoder, texts)
    assert (w_after[:, masked] == 0).all() and (z_after[:, masked] <= OFF_LOGIT).all()
    # a live term is active exactly where its max-logit exceeds its own cutoff (up to float noise at the cutoff)
    margin = z[:, live] - expected
    active = w_after[:, live] > 0
    assert ((active == (margin > 0)) | (np.abs(margin) < 1e-6)).all() and active.any()
    # statistics over the live terms; the report says how many were left off
    assert report["switched_off"] == len(masked)
    assert report["after"]["positive_share"] == pytest.approx(float((margin > 0).mean()), abs=1e-3)
    assert report["cutoff"] == pytest.approx(expected.mean(), abs=1e-4)
    assert report["cutoff_per_term"]["min"] == pytest.approx(expected.min(), abs=1e-4)
    jpath, _ = write_outputs(report, tmp_path)
    assert json.loads(jpath.read_text())["switched_off"] == len(masked)
    assert f"{len(masked)} switched-off terms left off" in summary_line(report, "after")


def test_global_apc_percentile_counts_only_live_values(texts: list[str]):
    """With include_zeros the masked terms' -1e4 would be a quarter of the samples and pull p60 down to about p46 of
    the live values (a denser start than the same APC on an arm without masked rows): they are not sampled."""
    encoder, masked = masked_encoder()
    z, _ = fresh_pass(encoder, texts)
    live = live_terms(z.shape[1], masked)
    expected = float(np.percentile(z[:, live], 60))
    with_masked = float(np.percentile(z, 60))  # the distorted cutoff, for contrast
    live_share = live.mean()
    assert with_masked == pytest.approx(float(np.percentile(z[:, live], 100 - 40 / live_share)), abs=1e-3)
    assert expected - with_masked > 0.05 * z[:, live].std()
    bias_before = encoder.output_bias("doc").detach().clone()

    # caps above the number of values: every (doc, term) value is taken once, so the cutoff is exact
    apc = APC(percentile=60, num_docs=N_DOCS, max_length=DOC_LEN, per_batch_samples=10**9, max_samples=10**9)
    report = apc.calibrate(encoder, texts)

    assert report["cutoff"] == pytest.approx(expected, abs=1e-4)
    assert report["n_samples"] == N_DOCS * int(live.sum())
    bias = encoder.output_bias("doc").detach()
    assert (bias[masked] == MASKED_BIAS).all()
    keep = torch.from_numpy(live)
    assert torch.allclose(bias[keep], bias_before[keep] - report["cutoff"], atol=1e-6)
    z_after, w_after = fresh_pass(encoder, texts)
    assert (w_after[:, masked] == 0).all()
    share = float((z_after[:, live] > 0).mean())
    assert share == pytest.approx(0.40, abs=0.01)  # 40% of the live (doc, term) values, as APC p60 promises
    assert report["after"]["positive_share"] == pytest.approx(share, abs=1e-3)
    assert report["before"]["positive_share"] == pytest.approx(float((z[:, live] > 0).mean()), abs=1e-6)
    assert report["after"]["dead_fraction"] == pytest.approx(float((z_after[:, live].max(0) <= 0).mean()), abs=1e-6)
    assert report["switched_off"] == len(masked)


def test_fixed_shift_through_the_callback_leaves_masked_terms_off(texts: list[str], tmp_path):
    """A dense start (+30 on the biases) still leaves the masked terms where they are; the callback logs the count."""
    encoder, masked = masked_encoder()
    bias_before = encoder.output_bias("doc").detach().clone()
    seen: list[dict] = []
    recorder = SimpleNamespace(log_metrics=lambda metrics, step: seen.append(metrics))
    trainer = SimpleNamespace(
        loggers=[recorder],
        is_global_zero=True,
        default_root_dir=str(tmp_path),
        strategy=SimpleNamespace(root_device=torch.device("cpu")),
    )
    apc = APC(percentile=None, shift=30.0, num_docs=8, max_length=DOC_LEN)
    APCCallback(apc, texts=lambda: texts[:8]).setup(trainer, SimpleNamespace(encoder=encoder), "fit")
    bias = encoder.output_bias("doc").detach()
    live = torch.from_numpy(live_terms(bias.numel(), masked))
    assert (bias[masked] == MASKED_BIAS).all() and torch.allclose(bias[live], bias_before[live] + 30.0, atol=1e-5)
    _, w = fresh_pass(encoder, texts[:8])
    assert (w[:, masked] == 0).all() and (w[:, live.numpy()] > 0).all()
    assert seen[0]["apc/switched_off"] == len(masked)
    assert json.loads((tmp_path / "apc_report.json").read_text())["switched_off"] == len(masked)


class _FixedLogits(torch.nn.Module):
    """An 'encoder' whose per-document max-logits are the rows of z (APC.probe's interface), with a bias to shift."""

    def __init__(self, z: torch.Tensor) -> None:
        super().__init__()
        self.z = z
        self.bias = torch.nn.Parameter(torch.zeros(z.shape[1]))
        self.max_length = {"doc": 8}

    def tokenize(self, texts: list[str], side: str) -> dict[str, torch.Tensor]:
        ids = torch.tensor([[int(t)] for t in texts])
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}

    def max_logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, side: str) -> torch.Tensor:
        return self.z[input_ids[:, 0]] + self.bias

    def output_bias(self, side: str) -> torch.Tensor:
        return self.bias


def test_a_model_with_every_term_switched_off_is_refused():
    z = torch.full((4, 6), MASKED_BIAS)
    with pytest.raises(VtlabError, match="every one of the 6 terms is switched off"):
        APC(percentile=60, num_docs=4).calibrate(_FixedLogits(z), [str(i) for i in range(4)])


def test_a_term_at_the_threshold_is_off_and_the_live_terms_are_calibrated_alone():
    """A term is off when every probe max-logit is at or below OFF_LOGIT (MASKED_BIAS / 10)."""
    assert OFF_LOGIT == MASKED_BIAS / 10
    g = torch.Generator().manual_seed(0)
    z = torch.randn(20, 5, generator=g)
    z[:, 3] = MASKED_BIAS  # off
    z[:, 4] = OFF_LOGIT  # at the threshold: off
    texts = [str(i) for i in range(20)]
    encoder = _FixedLogits(z)
    report = APC(percentile=60, num_docs=20, per_term=True).calibrate(encoder, texts)
    assert report["switched_off"] == 2
    expected = np.percentile(z[:, :3].double().numpy(), 60, axis=0)
    np.testing.assert_allclose(-encoder.bias.detach()[:3].double().numpy(), expected, atol=1e-5)
    assert (encoder.bias.detach()[3:] == 0).all()
