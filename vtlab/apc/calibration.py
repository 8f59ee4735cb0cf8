"""Activation Potential Calibration (APC): one constant shift of the MLM output bias before sparse fine-tuning.

Following the authors' probe_activation_percentiles.py: for each probe document take the max over non-pad positions of
the RAW MLM logits, z[d, v]; sample those values (with replacement, capped per batch and in total; all (doc, term)
values with `include_zeros`, else only z > 0); cutoff = percentile(samples); `decoder.bias -= cutoff`, once.
With include_zeros and percentile 60, about 40% of (doc, term) max-logits are > 0 right after the shift: the model
starts neither dead (ReLU(z) = 0 everywhere, no gradient) nor dense (everything active, collapse).

`per_term=True` (our extension, not the authors'): one cutoff per vocabulary term, the percentile of that term's
max-logits over the probe documents, `decoder.bias[v] -= cutoff[v]`. A weakly pretrained MLM (e.g. a small model
pretrained from random init) puts a large document-independent offset on each frequent term, so every document
activates the same terms (doc-doc cosine > 0.95) and no single constant shift separates them; the per-term shift
removes that offset, leaving each term active in (100 - percentile)% of the probe documents.

Switched-off terms: a term whose every probe max-logit is at or below OFF_LOGIT (a tenth of
vtlab.vocab.masked_outputs.MASKED_BIAS: far below any logit a live term reaches, far above a masked one) is one the
model has switched off, e.g. a cased token's row under vocab=lowercase-masked. APC calibrates the terms the model can
activate and leaves a switched-off term's bias as it is, in every form: a per-term percentile of its max-logits
(about MASKED_BIAS) would lift it back to about 0 and revive it. Its max-logits are not sampled either: with
include_zeros they would make up the switched-off share of every sample, all at about MASKED_BIAS, so p60 would be
the percentile 60 - 100·off/V of the live values instead of 60 (about p46 with ModernBERT's 13,028 masked cased rows
of 50,368), a denser start than the same APC gives an arm without masked rows. Excluded, the cutoff is the
percentile of the live (doc, term) values, and the statistics (positive_share, dead_fraction) are over the live
terms; the report counts the switched-off ones (`switched_off`).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from vtlab.core.atomic import atomic_write_bytes, write_json
from vtlab.core.errors import VtlabError
from vtlab.core.progress import counted
from vtlab.vocab.masked_outputs import MASKED_BIAS

log = logging.getLogger("vtlab")

PERCENTILES = (10, 20, 30, 40, 50, 60, 70, 80, 90)
STAT_KEYS = ("mean_active_per_doc", "dead_fraction", "positive_share")
# Fixed-width histogram of every probed z (bins of 1/64 over ±256, plus under/overflow): it gives the "after" counts
# of z > cutoff without a second pass or keeping the N×V matrix; the error is at most one bin's count.
_HIST_RANGE, _HIST_WIDTH = 256.0, 1.0 / 64
# At or below this a max-logit is a switched-off term's (module docstring); below the histogram's range, so every such
# value lands in its underflow bin.
OFF_LOGIT = MASKED_BIAS / 10
assert OFF_LOGIT < -_HIST_RANGE


class APC:
    """Activation Potential Calibration settings (Hydra target `vtlab.apc.calibration.APC`, conf/apc/*.yaml).

    percentile: the cutoff percentile of the sampled max-logits (authors: 60); None with shift None = off.
    shift: a fixed offset ADDED to the bias instead (no percentile), for deliberately dead (<0) or dense (>0) starts.
    """

    def __init__(
        self,
        percentile: float | None = 60.0,
        include_zeros: bool = True,
        num_docs: int = 20000,
        batch_size: int = 32,
        max_length: int = 256,
        per_batch_samples: int = 20000,
        max_samples: int = 1_000_000,
        shift: float | None = None,
        seed: int = 42,
        name: str | None = None,
        per_term: bool = False,
    ) -> None:
        if percentile is not None and shift is not None:
            raise VtlabError(
                f"apc.percentile={percentile} and apc.shift={shift} are mutually exclusive; set one to null"
            )
        if percentile is not None and not 0.0 < float(percentile) < 100.0:
            raise VtlabError(f"apc.percentile={percentile} must be in (0, 100) (or null to disable APC)")
        for key, value in (
            ("num_docs", num_docs),
            ("batch_size", batch_size),
            ("max_length", max_length),
            ("per_batch_samples", per_batch_samples),
            ("max_samples", max_samples),
        ):
            if int(value) <= 0:
                raise VtlabError(f"apc.{key}={value} must be > 0")
        if per_term and (percentile is None or not include_zeros):
            raise VtlabError(
                "apc.per_term=true needs apc.percentile set and apc.include_zeros=true (a per-term "
                "percentile over every probe document)"
            )
        self.per_term = bool(per_term)
        self.percentile = None if percentile is None else float(percentile)
        self.shift = None if shift is None else float(shift)
        self.include_zeros = bool(include_zeros)
        self.num_docs, self.batch_size, self.max_length = int(num_docs), int(batch_size), int(max_length)
        self.per_batch_samples, self.max_samples, self.seed = int(per_batch_samples), int(max_samples), int(seed)
        self.name = name or (
            "off"
            if not self.enabled
            else f"p{self.percentile:g}{'-term' if self.per_term else ''}"
            if self.percentile is not None
            else f"shift{self.shift:+g}"
        )

    @property
    def enabled(self) -> bool:
        return self.percentile is not None or self.shift is not None

    def key_settings(self) -> dict[str, Any]:
        """The settings the calibration cache is keyed by (vtlab.core.cache_keys): every attribute `__init__` sets."""
        return dict(vars(self))

    def __repr__(self) -> str:
        return (
            f"APC(name={self.name!r}, percentile={self.percentile}, shift={self.shift}, "
            f"include_zeros={self.include_zeros}, per_term={self.per_term})"
        )

    # ---- probing --------------------------------------------------------------------------------------------------

    def probe(self, encoder, texts: Sequence[str]) -> dict[str, Any]:
        """Stream the first `num_docs` texts through `encoder` (doc side) and summarize their raw max-logits.

        Returns stats (mean_active_per_doc, dead_fraction, positive_share, percentiles of the samples; over the live
        terms), the sampled values of the live terms ("samples", 1-D float32 CPU tensor), the switched-off terms
        ("off", [V] bool; "switched_off", their number) and the state needed to re-evaluate stats at a shifted bias
        ("term_max" [V], "hist" of the live terms' values), so `calibrate` never runs a second pass.
        """
        texts = list(texts)[: self.num_docs]
        if not texts:
            raise VtlabError("apc: no probe documents")
        device, n_docs = next(encoder.parameters()).device, len(texts)
        # longest first: similar lengths per batch waste less padding (characters are a good enough proxy)
        order = sorted(range(n_docs), key=lambda i: -len(texts[i]))
        gen = torch.Generator().manual_seed(self.seed)
        edges = torch.arange(-_HIST_RANGE, _HIST_RANGE + _HIST_WIDTH / 2, _HIST_WIDTH, device=device)
        hist = torch.zeros(len(edges) + 1, dtype=torch.long, device=device)
        term_max: Tensor | None = None
        n_positive, samples, sample_terms, n_sampled = 0, [], [], 0
        # per_term: each term's largest max-logits, as many as its percentile needs (merged in rounds, not per batch)
        keep = _top_needed(self.percentile, n_docs) if self.per_term else 0
        top: Tensor | None = None
        pending: list[Tensor] = []
        was_training = encoder.training
        encoder.eval()  # a plain forward pass: no dropout
        saved_length = encoder.max_length["doc"]
        encoder.max_length["doc"] = self.max_length
        try:
            with torch.inference_mode():
                batches = (order[start : start + self.batch_size] for start in range(0, n_docs, self.batch_size))
                for rows in counted(batches, n_docs, "documents", "apc: probing", size=len):
                    batch = [texts[i] for i in rows]
                    enc = encoder.tokenize(batch, side="doc")
                    z = encoder.max_logits(enc["input_ids"].to(device), enc["attention_mask"].to(device), side="doc")
                    z = z.float()
                    positive = z > 0
                    n_positive += int(positive.sum())
                    batch_max = z.amax(dim=0)
                    term_max = batch_max if term_max is None else torch.maximum(term_max, batch_max)
                    if keep:
                        pending.append(z)
                        if sum(len(t) for t in pending) >= keep:
                            top = _merge_top(top, pending, keep)
                            pending = []
                    hist += torch.bincount(torch.bucketize(z.flatten(), edges, right=True), minlength=len(hist))
                    # Quotas scale with the batch's size, so every document weighs the same: the total cap never
                    # leaves the later (shorter, since sorted) documents unsampled, and a short last batch is not
                    # oversampled (with a fixed 20k per batch, p60 on 200 BoolQ docs gave 41% positive, not 40%).
                    quota = min(
                        math.ceil(self.per_batch_samples * len(batch) / self.batch_size),
                        math.ceil(self.max_samples * len(batch) / n_docs),
                        self.max_samples - n_sampled,
                    )
                    pool = z.flatten() if self.include_zeros else z[positive]
                    if quota <= 0 or pool.numel() == 0:
                        continue
                    if pool.numel() <= quota:
                        # the quota covers every value: take them all (exact) instead of resampling with replacement
                        picked = pool
                        idx = torch.arange(pool.numel())
                    else:
                        idx = torch.randint(pool.numel(), (quota,), generator=gen)
                        picked = pool[idx.to(pool.device)]
                    samples.append(picked.cpu())
                    if self.include_zeros:  # pool is z.flatten(), so the term is the column
                        sample_terms.append(idx % z.shape[1])
                    n_sampled += picked.numel()
        finally:
            encoder.max_length["doc"] = saved_length
            encoder.train(was_training)
        assert term_max is not None
        term_max = term_max.cpu()
        off = term_max <= OFF_LOGIT  # switched off: every probe max-logit at or below OFF_LOGIT
        vocab, n_off = int(term_max.numel()), int(off.sum())
        live = vocab - n_off
        if live == 0:
            raise VtlabError(
                f"apc: every one of the {vocab} terms is switched off (max-logit <= {OFF_LOGIT:g} on every probe "
                "document): nothing to calibrate"
            )
        sample = torch.cat(samples) if samples else torch.empty(0)
        terms = torch.cat(sample_terms) if sample_terms else torch.empty(0, dtype=torch.long)
        if n_off and self.include_zeros:  # without zeros only positive values are sampled: never a switched-off one
            kept = ~off[terms]
            sample, terms = sample[kept], terms[kept]
        hist = hist.cpu()
        hist[0] -= n_off * n_docs  # their values, all <= OFF_LOGIT < -_HIST_RANGE, sit in the underflow bin
        per_term = {}
        if keep:
            top = _merge_top(top, pending, keep).cpu() if pending else top.cpu()
            per_term = {"term_top": top, "sample_terms": terms}
        return {
            **per_term,
            "n_docs": n_docs,
            "vocab_size": vocab,
            "switched_off": n_off,
            "off": off,
            "n_samples": int(sample.numel()),
            "samples": sample,
            "term_max": term_max,
            "hist": hist,
            "mean_active_per_doc": n_positive / n_docs,
            "dead_fraction": float((term_max[~off] <= 0).float().mean()),
            "positive_share": n_positive / (n_docs * live),
            "percentiles": _percentiles(sample),
        }

    # ---- calibration ----------------------------------------------------------------------------------------------

    def cutoff(self, samples: Tensor) -> float:
        """The bias offset to subtract: percentile(samples), or -shift."""
        if self.shift is not None:
            return -self.shift
        if self.percentile is None:
            raise VtlabError("apc is off (apc.percentile and apc.shift are null): nothing to calibrate")
        if samples.numel() == 0:
            raise VtlabError("apc: the probe sampled no values (no positive max-logits; try apc.include_zeros=true)")
        # numpy's default linear interpolation, in float64 (torch.quantile refuses inputs over 16M values)
        return float(np.percentile(samples.double().numpy(), self.percentile))

    def calibrate(self, encoder, texts: Sequence[str]) -> dict[str, Any]:
        """Probe, subtract the cutoff from the doc (and a separate query) network's MLM output bias, report.

        Only the live terms' biases move: a switched-off term keeps its bias (module docstring)."""
        t0 = time.perf_counter()
        before = self.probe(encoder, texts)
        if self.per_term:
            return self._calibrate_per_term(encoder, before, t0)
        cut = self.cutoff(before["samples"])
        live = ~before["off"]
        self._shift(encoder, torch.where(live, cut, 0.0))
        # The shift is a constant on the live terms, so their "after" z on the same documents is exactly z - cutoff:
        # the after-stats come from the probe's per-term max and value histogram instead of a second forward pass.
        n_values = before["n_docs"] * int(live.sum())
        after_positive = _count_above(before["hist"], cut)
        after = {
            "mean_active_per_doc": after_positive / before["n_docs"],
            "dead_fraction": float((before["term_max"][live] <= cut).float().mean()),
            "positive_share": after_positive / n_values,
            "percentiles": {k: v - cut for k, v in before["percentiles"].items()},
        }
        return self._report(before, cut, after, before["samples"] - cut, t0)

    def _calibrate_per_term(self, encoder, before: dict[str, Any], t0: float) -> dict[str, Any]:
        """bias[v] -= percentile of term v's max-logits, for every live v; after-stats exact from the kept top
        values."""
        assert self.percentile is not None
        live = ~before["off"]
        cuts = torch.where(live, _term_percentile(before["term_top"], self.percentile, before["n_docs"]), 0.0)
        self._shift(encoder, cuts)
        after_positive = float((before["term_top"][:, live] > cuts[live]).sum())
        samples_after = before["samples"] - cuts[before["sample_terms"]]
        after = {
            "mean_active_per_doc": after_positive / before["n_docs"],
            "dead_fraction": float((before["term_max"][live] <= cuts[live]).float().mean()),
            "positive_share": after_positive / (before["n_docs"] * int(live.sum())),
            "percentiles": _percentiles(samples_after),
        }
        live_cuts = cuts[live]
        report = self._report(before, float(live_cuts.mean()), after, samples_after, t0)
        report["cutoff_per_term"] = {
            "min": float(live_cuts.min()),
            "median": float(live_cuts.median()),
            "max": float(live_cuts.max()),
            "std": float(live_cuts.std()) if live_cuts.numel() > 1 else 0.0,
        }
        return report

    def _shift(self, encoder, cuts: Tensor) -> None:
        """bias[v] -= cuts[v] on the doc (and a separate query) network's MLM output bias."""
        for bias in self._biases(encoder):
            with torch.no_grad():
                bias.sub_(cuts.to(bias.device))  # in the cuts' float32, rounded once to the bias's dtype

    @staticmethod
    def _biases(encoder) -> list[Tensor]:
        biases = [encoder.output_bias("doc")]
        if encoder.output_bias("query") is not biases[0]:  # separate query network: the same constant shift
            biases.append(encoder.output_bias("query"))
        if any(b is None for b in biases):
            raise VtlabError("apc: the MLM decoder has no output bias to shift (decoder built with bias=False)")
        return biases

    def _report(
        self, before: dict[str, Any], cut: float, after: dict[str, Any], samples_after: Tensor, t0: float
    ) -> dict[str, Any]:
        return {
            "name": self.name,
            "cutoff": cut,
            "percentile": self.percentile,
            "shift": self.shift,
            "include_zeros": self.include_zeros,
            "n_docs": before["n_docs"],
            "vocab_size": before["vocab_size"],
            "switched_off": before["switched_off"],  # terms left as they are (off on every probe document)
            "n_samples": before["n_samples"],
            "before": {k: before[k] for k in (*STAT_KEYS, "percentiles")},
            "after": after,
            "seconds": time.perf_counter() - t0,
            "per_term": self.per_term,
            "samples": before["samples"],  # for the histogram; dropped by json_report
            "samples_after": samples_after,
        }


def json_report(report: dict[str, Any]) -> dict[str, Any]:
    """The report without the sampled values (numbers only, for apc_report.json)."""
    return {k: v for k, v in report.items() if k not in ("samples", "samples_after")}


def summary_line(report: dict[str, Any], when: str) -> str:
    s = report[when]
    return (
        f"APC {report['name']} {when}: cutoff={report['cutoff']:.3f} active/doc={s['mean_active_per_doc']:.1f} "
        f"positive_share={s['positive_share']:.3f} dead_fraction={s['dead_fraction']:.3f} "
        f"(docs={report['n_docs']}, samples={report['n_samples']}; {report['switched_off']} switched-off terms left "
        "off)"
    )


def flat_metrics(report: dict[str, Any]) -> dict[str, float]:
    """apc/cutoff, apc/before_positive_share, ... for Lightning loggers."""
    out = {"apc/cutoff": float(report["cutoff"]), "apc/switched_off": float(report["switched_off"])}
    for when in ("before", "after"):
        out.update({f"apc/{when}_{k}": float(report[when][k]) for k in STAT_KEYS})
    return out


def save_histogram(
    samples_before: Tensor, cutoff: float, path: str | Path, samples_after: Tensor | None = None
) -> Path:
    """PNG of the sampled max-logit distribution before and after the shift (after = before - cutoff unless given:
    a per-term shift), log y."""
    import matplotlib

    matplotlib.use("Agg")  # headless, also under DDP workers
    import matplotlib.pyplot as plt

    before = samples_before.double().numpy()
    after = before - cutoff if samples_after is None else samples_after.double().numpy()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 4))
    if before.size:
        lo, hi = min(before.min(), after.min()), max(before.max(), after.max())
        bins = np.linspace(lo, hi if hi > lo else lo + 1, 121)
        ax.hist(before, bins=bins, alpha=0.5, label=f"before ({(before > 0).mean():.1%} > 0)")
        ax.hist(after, bins=bins, alpha=0.5, label=f"after ({(after > 0).mean():.1%} > 0)")
        ax.set_yscale("log")
    ax.axvline(0.0, color="k", linewidth=1)
    ax.set_xlabel("max over positions of raw MLM logit")
    ax.set_ylabel("sampled (doc, term) values")
    ax.set_title(
        f"APC: bias -= {cutoff:.3f}"
        if samples_after is None
        else f"APC per term: bias[v] -= cutoff[v] (mean {cutoff:.3f})"
    )
    ax.legend()
    fig.tight_layout()
    try:  # atomic, like write_json: a crash never leaves a truncated PNG next to a complete report
        atomic_write_bytes(path, lambda f: fig.savefig(f, format="png", dpi=100))
    finally:
        plt.close(fig)
    return path


def write_outputs(report: dict[str, Any], out_dir: str | Path) -> tuple[Path, Path]:
    """apc_report.json + apc_hist.png into out_dir."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    return (
        write_json(out_dir / "apc_report.json", json_report(report)),
        save_histogram(
            report["samples"],
            report["cutoff"],
            out_dir / "apc_hist.png",
            report["samples_after"] if report.get("per_term") else None,
        ),
    )


def _percentiles(samples: Tensor) -> dict[str, float]:
    if samples.numel() == 0:
        return {f"p{p}": float("nan") for p in PERCENTILES}
    values = np.percentile(samples.double().numpy(), PERCENTILES)
    return {f"p{p}": float(v) for p, v in zip(PERCENTILES, values)}


def _top_needed(percentile: float | None, n_docs: int) -> int:
    """How many of a term's largest values numpy's linear-interpolated percentile over n_docs values reads."""
    assert percentile is not None
    from_top = (1.0 - percentile / 100.0) * (n_docs - 1)  # the percentile's position counted from the largest
    return min(n_docs, int(math.floor(from_top)) + 2)


def _merge_top(top: Tensor | None, rows: list[Tensor], keep: int) -> Tensor:
    """The `keep` largest values per column of top ∪ rows, descending."""
    stacked = torch.cat(([top] if top is not None else []) + rows)
    return stacked.topk(min(keep, stacked.shape[0]), dim=0).values


def _term_percentile(top: Tensor, percentile: float, n_docs: int) -> Tensor:
    """Per-column percentile (numpy's linear interpolation) of n_docs values, from their largest ones (descending)."""
    from_top = (1.0 - percentile / 100.0) * (n_docs - 1)
    lo = int(math.floor(from_top))
    hi = min(lo + 1, top.shape[0] - 1)
    frac = from_top - lo  # the percentile lies between the (lo)-th and (lo+1)-th largest, nearer the larger one
    return (top[lo] * (1.0 - frac) + top[hi] * frac).float()


def _count_above(hist: Tensor, c: float) -> float:
    """Number of histogrammed values > c, interpolating linearly inside c's bin."""
    # bucket k (1..n-1) holds values in [edges[k-1], edges[k]); bucket 0 and n hold the under/overflow
    n_edges = len(hist) - 1
    pos = (c + _HIST_RANGE) / _HIST_WIDTH  # c's position in edge units
    if pos < 0:
        return float(hist.sum())
    if pos >= n_edges - 1:
        return float(hist[-1])  # c beyond the range (never in practice): count the overflow as above
    k = int(math.floor(pos))  # c in [edges[k], edges[k+1]) → bucket k+1
    frac_above = 1.0 - (pos - k)
    return float(hist[k + 2 :].sum()) + frac_above * float(hist[k + 1])
