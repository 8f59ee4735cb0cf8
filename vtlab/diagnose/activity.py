"""Output-space activity: what the model's SPLADE vectors look like on sample documents, before and after APC.

The max-logit statistics are APC's own (`APC.probe`, or `APC.calibrate` when an APC is configured: it shifts the bias
in place, so the encoder ends up calibrated). One more pass of `SpladeEncoder.max_logits` over the same documents,
after calibration, gives the per-document figures of both states at once: the shift is a constant, so "before" is
z + cutoff > 0, "after" is z > 0.

Per state: active dims per document, positive share, per-term activation frequency (dead: never active; always-on:
active in ≥ `always_on` of the documents), mean pairwise cosine of the SPLADE vectors (log1p∘relu; all-zero vectors
left out) — near 1 means every document gets the same vector.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from vtlab.apc.calibration import APC, STAT_KEYS
from vtlab.core.errors import VtlabError
from vtlab.models.activation import splade_activation

QUANTILES = np.linspace(0, 100, 101)
FREQ_BUCKETS = ("dead", "<1%", "1-10%", "10-50%", "50%-always", "always-on")


def mean_pairwise_cosine(unit_sum: np.ndarray, n: int) -> float:
    """Mean cosine over the n(n-1) ordered pairs of n unit vectors, from their sum: (|Σu|² − n) / (n(n − 1))."""
    if n < 2:
        return float("nan")
    return float((unit_sum @ unit_sum - n) / (n * (n - 1)))


def _quantiles(samples: torch.Tensor, shift: float = 0.0) -> list[float]:
    if samples.numel() == 0:
        return []
    return (np.percentile(samples.double().numpy(), QUANTILES) - shift).tolist()


class _State:
    """Running figures of one state (one activity threshold on the raw max-logits)."""

    def __init__(self, threshold: float, vocab_size: int) -> None:
        self.threshold = threshold
        self.doc_freq = torch.zeros(vocab_size, dtype=torch.long)
        self.unit_sum = torch.zeros(vocab_size, dtype=torch.float64)
        self.active: list[int] = []
        self.nonempty = 0

    def add(self, z: torch.Tensor, double_log: bool) -> None:
        active = z > self.threshold
        self.doc_freq += active.sum(0).cpu()
        self.active += active.sum(1).tolist()
        w = splade_activation(z - self.threshold, double_log).double()
        norms = w.norm(dim=1)
        keep = norms > 0
        self.unit_sum += (w[keep] / norms[keep, None]).sum(0).cpu()
        self.nonempty += int(keep.sum())

    def figures(self, always_on: float) -> dict[str, Any]:
        n, vocab = len(self.active), self.doc_freq.numel()
        active = np.asarray(self.active, dtype=np.int64)
        freq = self.doc_freq.double().numpy() / n
        edges = [0.0, 0.01, 0.1, 0.5, always_on]
        buckets = (
            [int((freq == 0).sum())]
            + [
                int(((freq > 0 if lo == 0 else freq >= lo) & (freq < hi)).sum())
                for lo, hi in zip(edges[:-1], edges[1:])
            ]
            + [int((freq >= always_on).sum())]
        )
        return {
            "mean_active_per_doc": float(active.mean()),
            "median_active_per_doc": float(np.median(active)),
            "p10_active_per_doc": float(np.percentile(active, 10)),
            "p90_active_per_doc": float(np.percentile(active, 90)),
            "positive_share": float(active.sum()) / (n * vocab),
            "dead_fraction": buckets[0] / vocab,
            "always_on_fraction": buckets[-1] / vocab,
            "activation_frequency_hist": dict(zip(FREQ_BUCKETS, buckets)),
            "mean_pairwise_cosine": mean_pairwise_cosine(self.unit_sum.numpy(), self.nonempty),
            "empty_docs": n - self.nonempty,
            "active_per_doc": active.tolist(),
        }


@torch.inference_mode()
def _states_pass(encoder, texts: Sequence[str], states: list[_State], batch_size: int, max_length: int) -> None:
    device = next(encoder.parameters()).device
    was_training, saved = encoder.training, encoder.max_length["doc"]
    encoder.eval()
    encoder.max_length["doc"] = max_length  # the probe's length, so both passes see the same tokens
    try:
        for start in range(0, len(texts), batch_size):
            enc = encoder.tokenize(texts[start : start + batch_size], side="doc")
            z = encoder.max_logits(enc["input_ids"].to(device), enc["attention_mask"].to(device), side="doc").float()
            for state in states:
                state.add(z, encoder.double_log)
    finally:
        encoder.max_length["doc"] = saved
        encoder.train(was_training)


def output_activity(encoder, texts: Sequence[str], apc: APC, always_on: float = 0.99) -> dict[str, Any]:
    """Activity of `encoder` on the first `apc.num_docs` texts, before and (when `apc` is enabled) after APC.

    With an enabled `apc` the encoder's output bias is shifted in place (it is left calibrated)."""
    if not 0.5 < always_on <= 1.0:
        raise VtlabError(f"diagnose.activity.always_on={always_on} must be in (0.5, 1]")
    texts = list(texts)[: apc.num_docs]
    if not texts:
        raise VtlabError("diagnose.activity: no documents to probe")
    if apc.enabled:
        report = apc.calibrate(encoder, texts)
        cutoff, samples = float(report["cutoff"]), report["samples"]
        probe = {"before": report["before"], "after": report["after"]}
    else:
        raw = apc.probe(encoder, texts)
        cutoff, samples = 0.0, raw["samples"]
        probe = {"before": {k: raw[k] for k in (*STAT_KEYS, "percentiles")}}
    states = {"before": _State(-cutoff, encoder.vocab_size)}
    if apc.enabled:
        states["after"] = _State(0.0, encoder.vocab_size)
    _states_pass(encoder, texts, list(states.values()), apc.batch_size, apc.max_length)
    out: dict[str, Any] = {
        "docs": len(texts),
        "vocab_size": encoder.vocab_size,
        "max_length": apc.max_length,
        "apc": {
            "name": apc.name,
            "enabled": apc.enabled,
            "cutoff": cutoff,
            "percentile": apc.percentile,
            "shift": apc.shift,
            "include_zeros": apc.include_zeros,
            "probe": probe,
        },
        "max_logit_quantiles": {"before": _quantiles(samples)},
    }
    if apc.enabled:
        out["max_logit_quantiles"]["after"] = _quantiles(samples, cutoff)
    for name, state in states.items():
        out[name] = state.figures(always_on)
    out["_samples"] = samples  # for apc.save_histogram; dropped before writing JSON
    return out
