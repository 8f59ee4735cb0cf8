"""tradeoff.png: each row's average measure against its average FLOPS, one point per seed (see vtlab.report)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from vtlab.core.atomic import atomic_path
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
    ax.set_xlabel("avg FLOPS (expected multiplications per query-doc pair)")
    ax.set_ylabel(f"avg {table.measure}")
    ax.set_title(f"{table.title}: {table.measure} vs FLOPS (points: seeds, diamonds: means)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    path = Path(path)
    with atomic_path(path, disk_errors=False) as tmp:  # readers never see half an image
        fig.savefig(tmp, format="png", dpi=120)
    return path
