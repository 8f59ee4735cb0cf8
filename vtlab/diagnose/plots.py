"""The diagnose report's PNGs: tokenizer fit, fertility per script, vocabulary redundancy and output activity, each
comparing the candidates side by side; `render_plots` writes the ones the results have figures for."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vtlab.core.atomic import atomic_path
from vtlab.diagnose.verdict import final_activity


def _save(fig, path: Path) -> Path:
    """savefig through a temp file + rename: concurrent jobs re-rendering the same report never leave half a PNG."""
    with atomic_path(path, suffix=".png", disk_errors=False) as tmp:  # savefig goes by the extension
        fig.savefig(tmp, dpi=100)
    return path


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _bars(ax, labels: Sequence[str], values: Sequence[float], title: str, pct: bool = False) -> None:
    x = np.arange(len(labels))
    ax.bar(x, values, color=[f"C{i}" for i in range(len(labels))])
    ax.set_xticks(x, labels, rotation=20, ha="right", fontsize=8)
    ax.set_title(title, fontsize=10)
    if pct:
        from matplotlib.ticker import PercentFormatter

        ax.yaxis.set_major_formatter(PercentFormatter(xmax=1.0))  # decimals follow the axis range (0.2%, not 0%)


def _grouped_bars(ax, groups: Sequence[str], series: Sequence[tuple[str, Sequence[float]]], fontsize: int = 8) -> None:
    """One bar per (group, series) pair, series side by side within each group, colored per series."""
    width = 0.8 / len(series)
    for i, (label, values) in enumerate(series):
        ax.bar(np.arange(len(groups)) + i * width, values, width, label=label, color=f"C{i}")
    ax.set_xticks(np.arange(len(groups)) + width * (len(series) - 1) / 2, groups, fontsize=fontsize)


def _finish(fig, path: Path) -> Path:
    fig.tight_layout()
    out = _save(fig, path)
    _plt().close(fig)
    return out


def plot_fit(results: Sequence[Mapping[str, Any]], path: Path) -> Path:
    plt = _plt()
    labels = [r["candidate"]["label"] for r in results]
    fig, axes = plt.subplots(1, 4, figsize=(15, 4))
    _bars(axes[0], labels, [r["fit"]["fertility"] for r in results], "tokens per word (fertility)")
    _bars(axes[1], labels, [r["fit"]["split3_share"] for r in results], "words cut into ≥3 pieces", pct=True)
    _bars(
        axes[2],
        labels,
        [r["fit"]["frequent_single_token_share"] for r in results],
        f"top-{results[0]['fit']['top_words']} words as one token",
        pct=True,
    )
    _bars(axes[3], labels, [r["fit"]["unk_or_byte_rate"] for r in results], "unknown / byte-fallback tokens", pct=True)
    return _finish(fig, path)


def plot_scripts(results: Sequence[Mapping[str, Any]], path: Path) -> Path:
    plt = _plt()
    scripts = list(dict.fromkeys(s for r in results for s in r["fit"]["scripts"]))
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(scripts) * len(results) / 2), 4))
    _grouped_bars(
        ax,
        scripts,
        [
            (r["candidate"]["label"], [r["fit"]["scripts"].get(s, {}).get("fertility", 0.0) for s in scripts])
            for r in results
        ],
    )
    ax.set_ylabel("tokens per word")
    ax.set_title("fertility per script")
    ax.legend(fontsize=8)
    return _finish(fig, path)


def plot_redundancy(results: Sequence[Mapping[str, Any]], path: Path) -> Path:
    plt = _plt()
    labels = [r["candidate"]["label"] for r in results]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    buckets = list(results[0]["redundancy"]["vocab"]["surface_forms_hist"])
    _grouped_bars(
        axes[0],
        buckets,
        [
            (labels[i], [r["redundancy"]["vocab"]["surface_forms_hist"][b] for b in buckets])
            for i, r in enumerate(results)
        ],
        fontsize=10,
    )
    axes[0].set_yscale("log")
    axes[0].set_xlabel("vocabulary entries per normalized form")
    axes[0].set_ylabel("normalized forms")
    axes[0].legend(fontsize=8)
    _bars(
        axes[1],
        labels,
        [r["redundancy"]["vocab"]["effective_ratio"] for r in results],
        "effective dims / vocabulary entries",
        pct=True,
    )
    _bars(
        axes[2],
        labels,
        [r["redundancy"]["corpus"]["spread_mass_share"] for r in results],
        "corpus tokens off their normalized form's main entry",
        pct=True,
    )
    return _finish(fig, path)


def plot_activity(results: Sequence[Mapping[str, Any]], path: Path) -> Path:
    plt = _plt()
    probed = [r for r in results if r.get("activity")]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    data, names = [], []
    for r in probed:
        for state in ("before", "after"):
            if r["activity"].get(state):
                data.append(np.maximum(r["activity"][state]["active_per_doc"], 1))
                names.append(f"{r['candidate']['label']}\n{state}")
    axes[0].boxplot(data, tick_labels=names, showfliers=False)
    axes[0].set_yscale("log")
    axes[0].set_ylabel("active dims per document")
    axes[0].tick_params(axis="x", labelsize=7, rotation=20)
    buckets = list(probed[0]["activity"]["before"]["activation_frequency_hist"])
    _grouped_bars(
        axes[1],
        buckets,
        [
            (
                r["candidate"]["label"],
                np.asarray([final_activity(r)["activation_frequency_hist"][b] for b in buckets])
                / r["activity"]["vocab_size"],
            )
            for r in probed
        ],
    )
    axes[1].set_title("share of the vocabulary by activation frequency (start of fine-tuning)", fontsize=9)
    axes[1].legend(fontsize=7)
    for i, r in enumerate(probed):
        q = r["activity"]["max_logit_quantiles"]
        for state, style in (("before", "-"), ("after", "--")):
            if q.get(state):
                axes[2].plot(
                    q[state],
                    np.linspace(0, 1, len(q[state])),
                    style,
                    color=f"C{i}",
                    label=f"{r['candidate']['label']} {state}",
                )
    axes[2].axvline(0.0, color="k", linewidth=1)
    axes[2].set_xlabel("max over positions of raw MLM logit")
    axes[2].set_ylabel("cumulative share of sampled (doc, term) values")
    axes[2].legend(fontsize=7)
    return _finish(fig, path)


def render_plots(results: Sequence[Mapping[str, Any]], out_dir: Path) -> dict[str, Path]:
    """fit.png and redundancy.png, scripts.png when a candidate is multilingual, activity.png when one was probed."""
    paths = {
        "fit": plot_fit(results, out_dir / "fit.png"),
        "redundancy": plot_redundancy(results, out_dir / "redundancy.png"),
    }
    if any(r["fit"]["multilingual"] for r in results):
        paths["scripts"] = plot_scripts(results, out_dir / "scripts.png")
    if any(r.get("activity") for r in results):
        paths["activity"] = plot_activity(results, out_dir / "activity.png")
    return paths
