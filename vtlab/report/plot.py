"""tradeoff.png: each row's average measure against its average FLOPS, one point per seed (see vtlab.report);
compare.png: single runs side by side (vtlab.report.comparison)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from vtlab.core.atomic import atomic_path
from vtlab.report.comparison import DIMS, Comparison
from vtlab.report.tables import Table, _seed_metrics


def tradeoff_points(table: Table) -> dict[str, list[tuple[float, float]]]:
    """Per row, one (avg FLOPS, avg measure) point per seed that has both."""
    flops, measure = (next(c for c in table.columns if c.header == h) for h in ("avg FLOPS", f"avg {table.measure}"))
    points: dict[str, list[tuple[float, float]]] = {}
    for row in table.rows:
        pairs = [
            (x, y)
            for seed in _seed_metrics(row.jobs)
            if (x := flops.value(seed)) is not None and (y := measure.value(seed)) is not None
        ]
        if pairs:
            points[row.label] = pairs
    return points


def write_tradeoff(table: Table, path: str | Path) -> Path | None:
    """tradeoff.png: average measure against FLOPS, seeds as small points, each row's mean as a large marker."""
    points = tradeoff_points(table)
    if not points:
        return None
    fig = Figure(figsize=(7, 4.5), constrained_layout=True)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for i, (label, pairs) in enumerate(points.items()):
        xs, ys = zip(*pairs)
        color = f"C{i % 10}"
        ax.scatter(xs, ys, s=14, alpha=0.5, color=color)
        ax.scatter(
            [np.mean(xs)],
            [np.mean(ys)],
            s=80,
            marker="D",
            color=color,
            edgecolor="black",
            label=f"{label} (n={len(pairs)})",
        )
    flops = [x for pairs in points.values() for x, _ in pairs]
    if min(flops) > 0 and max(flops) / min(flops) > 10:  # rows an order of magnitude apart in cost
        ax.set_xscale("log")
    _label(
        ax,
        "avg FLOPS (expected multiplications per query-doc pair)",
        f"avg {table.measure}",
        f"{table.title}: {table.measure} vs FLOPS (points: seeds, diamonds: means)",
    )
    return _save(fig, path)


def _label(ax: Any, xlabel: str, ylabel: str, title: str) -> None:
    """A panel's axes, title, grid and legend, as every plot here draws them."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")


def _save(fig: Figure, path: str | Path) -> Path:
    path = Path(path)
    with atomic_path(path, disk_errors=False) as tmp:  # readers never see half an image
        fig.savefig(tmp, format="png", dpi=120)
    return path


def _grouped_bars(ax, groups: list[str], series: list[tuple[str, list[float | None]]]) -> np.ndarray:
    """One bar per (group, series), the series side by side within each group; a missing value draws no bar. Returns
    each bar's x, (series, group)."""
    width = 0.8 / len(series)
    xs = np.arange(len(groups))[None, :] + (np.arange(len(series))[:, None] - (len(series) - 1) / 2) * width
    for i, (label, values) in enumerate(series):
        have = [j for j, v in enumerate(values) if v is not None]
        ax.bar(xs[i, have], [values[j] for j in have], width, label=label, color=f"C{i % 10}")
    rotate = len(groups) > 4  # BEIR's names side by side
    ax.set_xticks(np.arange(len(groups)), groups, rotation=20 if rotate else 0, ha="right" if rotate else "center")
    return xs


def write_comparison_plot(c: Comparison, path: str | Path) -> Path:
    """compare.png: the measure per collection (and their average), one bar per run; the active dims (bars: doc,
    diamonds: query); below, where per-query values were read, each later run's per-query differences against the
    first, sorted (all collections' queries pooled)."""
    groups: list[str | None] = [*c.datasets, *([None] if len(c.datasets) > 1 else [])]
    names = [d or "avg" for d in groups]
    runs = range(len(c.labels))

    def values(run: int, key: str) -> list[float | None]:
        return [c.average(run, key) if d is None else c.value(run, d, key) for d in groups]

    diffs = [x for x in c.diffs if x.pairs]
    fig = Figure(figsize=(max(9.0, 2.2 * len(groups) + 5), 8.5 if diffs else 4.5), constrained_layout=True)
    FigureCanvasAgg(fig)
    grid = fig.add_gridspec(2 if diffs else 1, 2)
    ax = fig.add_subplot(grid[0, 0])
    _grouped_bars(ax, names, [(c.labels[r], values(r, c.measure)) for r in runs])
    ax.set_ylabel(c.measure)
    ax.set_title(f"{c.measure} per collection", fontsize=9)
    ax.legend(fontsize=7, loc="best")
    ax = fig.add_subplot(grid[0, 1])
    (_, q_key), (_, d_key) = DIMS
    xs = _grouped_bars(ax, names, [(c.labels[r], values(r, d_key)) for r in runs])
    for r in runs:
        q = values(r, q_key)
        have = [j for j, v in enumerate(q) if v is not None]
        ax.scatter(xs[r, have], [q[j] for j in have], marker="D", s=28, color="black", zorder=3)
    ax.set_ylabel("mean active dims")
    ax.set_title("sparsity: doc active dims (bars), query active dims (diamonds)", fontsize=9)
    for ax in fig.axes:
        ax.grid(axis="y", alpha=0.3)
    if diffs:
        ax = fig.add_subplot(grid[1, :])
        for r, label in enumerate(c.labels[1:], start=1):
            deltas = np.sort([d for x in diffs if x.label == label for d in x.deltas])
            if deltas.size:
                better, worse = int((deltas > 0).sum()), int((deltas < 0).sum())
                ax.plot(
                    np.linspace(0, 1, deltas.size),
                    deltas,
                    color=f"C{r % 10}",
                    label=f"{label}: mean Δ {deltas.mean():+.4f}, better {better} / worse {worse} of {deltas.size}",
                )
        ax.axhline(0, color="black", lw=0.8)
        _label(
            ax,
            "queries, sorted by Δ (fraction)",
            f"Δ {c.measure} (run − {c.labels[0]})",
            f"per-query differences against {c.labels[0]}",
        )
    return _save(fig, path)
