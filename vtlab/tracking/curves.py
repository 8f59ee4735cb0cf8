"""csv/curves.png: a training run's curves drawn from its CSV log (csv/metrics.csv) when fitting ends — the training
losses, the dev measures and the active dims against the step, one panel each where the log has them. Drawn by
ResumableCSVLogger.finalize on rank 0 after a fit that succeeded (a resumed run: over the merged log), written
atomically (vtlab.core.atomic); a log that cannot be drawn is a warning line, never the run's failure."""

from __future__ import annotations

import csv
import logging
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
from pytorch_lightning.loggers.csv_logs import ExperimentWriter

from vtlab.core.atomic import atomic_path
from vtlab.evaluation.metrics import SPARSITY_KEYS

log = logging.getLogger("vtlab")

CURVES_FILE = "curves.png"  # beside metrics.csv
MIN_STEPS = 5  # a training loss logged at fewer steps than this draws no curves (write_curves)
Series = dict[str, list[tuple[int, float]]]  # column -> (step, value) for the rows that hold a finite value


def _is_loss(key: str) -> bool:
    """train/loss, train/rank_loss, mlm/loss: a loss logged in training (not a dev or final-evaluation column)."""
    return key.rsplit("/", 1)[-1].endswith("loss") and not key.startswith(("val/", "eval/"))


def _is_dev_measure(key: str) -> bool:
    return key.startswith("val/") and key[4:] not in SPARSITY_KEYS


def _is_active_dims(key: str) -> bool:
    return key.startswith(("train/", "val/")) and key.endswith("active_dims")


# (title, y label, which columns): a panel is drawn where the log has a column of it
PANELS: tuple[tuple[str, str, Callable[[str], bool]], ...] = (
    ("training loss", "loss", _is_loss),
    ("dev measures", "value", _is_dev_measure),
    ("active dims (train: per step, val: dev)", "mean active dims", _is_active_dims),
)


def _number(text: str | None) -> float | None:
    try:
        value = float(text or "")
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def read_series(path: str | Path) -> Series:
    """Every column of a Lightning CSV log but step and epoch, as (step, value) pairs in file order; empty cells (a
    row logs only some columns) and non-finite values are skipped, as are rows without a step."""
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    series: Series = {}
    for row in rows:
        step = _number(row.get("step"))
        if step is None:
            continue
        for key, text in row.items():
            value = _number(text) if key not in (None, "step", "epoch") else None
            if value is not None:
                series.setdefault(str(key), []).append((int(step), value))
    return series


def _running_mean(values: np.ndarray) -> np.ndarray | None:
    """A centred running mean over 1/50 of the points (a noisy per-step loss's trend); None when too few to need one."""
    window = len(values) // 50
    if window < 3:
        return None
    kernel = np.ones(window) / window
    return np.convolve(np.pad(values, (window // 2, window - 1 - window // 2), mode="edge"), kernel, mode="valid")


def plot_curves(csv_path: str | Path, png_path: str | Path, title: str = "") -> Path | None:
    """Draw the log at `csv_path` into `png_path` (atomically); None, and nothing written, when it has no column of
    any panel (PANELS)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    series = read_series(csv_path)
    panels = [(t, y, sorted(k for k in series if wanted(k))) for t, y, wanted in PANELS]
    panels = [p for p in panels if p[2]]
    if not panels:
        return None
    fig = Figure(figsize=(5 * len(panels), 4), constrained_layout=True)
    FigureCanvasAgg(fig)
    for ax, (panel_title, ylabel, keys) in zip(fig.subplots(1, len(panels), squeeze=False)[0], panels):
        for i, key in enumerate(keys):
            steps, values = (np.array(v) for v in zip(*series[key]))
            trend = _running_mean(values)
            marker = "o" if len(values) <= 50 else None
            if trend is None:
                ax.plot(steps, values, marker=marker, markersize=3, lw=1.2, color=f"C{i % 10}", label=key)
            else:  # the raw per-step values faint, their running mean on top
                ax.plot(steps, values, lw=0.6, alpha=0.3, color=f"C{i % 10}")
                ax.plot(steps, trend, lw=1.4, color=f"C{i % 10}", label=f"{key} (running mean)")
        ax.set_title(panel_title, fontsize=9)
        ax.set_xlabel("step")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    if title:
        fig.suptitle(title, fontsize=10)
    png_path = Path(png_path)
    with atomic_path(png_path, disk_errors=False) as tmp:  # readers never see half an image
        fig.savefig(tmp, format="png", dpi=110)
    return png_path


def write_curves(log_dir: str | Path, title: str = "") -> Path | None:
    """`log_dir`/curves.png from `log_dir`/metrics.csv; None where there is nothing to draw, or too little: a loss
    logged at fewer than MIN_STEPS steps (a smoke run's handful of points is no curve, and drawing it costs a run a
    plotting library's start-up). Never raises: a failure (an unreadable log, a full disk, a link) is one warning line,
    and the run goes on."""
    png = Path(log_dir) / CURVES_FILE
    try:
        csv_path = Path(log_dir) / ExperimentWriter.NAME_METRICS_FILE
        if not csv_path.is_file():
            return None
        steps = {step for key, points in read_series(csv_path).items() if _is_loss(key) for step, _ in points}
        return plot_curves(csv_path, png, title) if len(steps) >= MIN_STEPS else None
    except Exception as exc:  # noqa: BLE001 - a picture is never worth a run
        log.warning("%s: training curves not drawn (%s: %s)", png, type(exc).__name__, " ".join(str(exc).split()))
        return None
