"""csv/curves.png: a training run's curves, drawn from its CSV log when fitting ends (vtlab.tracking.curves, through
ResumableCSVLogger.finalize), from hand-written logs: no model is trained here."""

from __future__ import annotations

import logging
from pathlib import Path

import matplotlib.image
import pytest
from pytorch_lightning.utilities.rank_zero import rank_zero_only

from vtlab.tracking.curves import CURVES_FILE, plot_curves, read_series, write_curves
from vtlab.tracking.resumable_csv import ResumableCSVLogger

# as Lightning's CSVLogger writes a fine-tune's log: per-step rows, dev rows at the validation steps, every column in
# the header and empty cells where a row did not log it; the final evaluation's row (eval/...) at step 0
LOG = """\
epoch,eval/boolq/nDCG@10,step,train/doc_active_dims,train/loss,train/lr,train/rank_loss,val/doc_active_dims,val/nDCG@10
0,,0,180.0,2.5,0.0001,2.0,,
0,,1,170.0,2.0,0.0001,1.75,,
0,,1,,,,,150.0,0.25
0,,2,160.0,nan,0.0001,1.5,,
0,,3,150.0,1.0,0.0001,0.75,,
0,,3,,,,,140.0,0.375
0,,4,145.0,0.9,0.0001,0.7,,
,0.5,0,,,,,,
"""


def _png(path: Path) -> tuple[int, int]:
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    height, width, _ = matplotlib.image.imread(path).shape
    return height, width


def test_the_log_is_read_column_by_column(tmp_path: Path) -> None:
    (tmp_path / "metrics.csv").write_text(LOG)
    series = read_series(tmp_path / "metrics.csv")
    assert series["train/loss"] == [(0, 2.5), (1, 2.0), (3, 1.0), (4, 0.9)]  # empty cells, the non-finite value skipped
    assert series["val/nDCG@10"] == [(1, 0.25), (3, 0.375)]
    assert series["eval/boolq/nDCG@10"] == [(0, 0.5)]
    assert "step" not in series and "epoch" not in series


def test_curves_of_a_hand_written_log(tmp_path: Path) -> None:
    (tmp_path / "metrics.csv").write_text(LOG)
    png = plot_curves(tmp_path / "metrics.csv", tmp_path / CURVES_FILE, title="run: training curves")
    assert png == tmp_path / CURVES_FILE
    height, width = _png(png)
    assert width > 2 * height  # three panels: losses, dev measures, active dims
    assert sorted(p.name for p in tmp_path.iterdir()) == [CURVES_FILE, "metrics.csv"]  # no temp file left


def test_a_log_with_no_curve_draws_nothing(tmp_path: Path) -> None:
    (tmp_path / "metrics.csv").write_text("draw,epoch,step\n0.5,0,0\n0.25,0,1\n")
    assert plot_curves(tmp_path / "metrics.csv", tmp_path / CURVES_FILE) is None
    assert write_curves(tmp_path) is None and write_curves(tmp_path / "absent") is None
    assert not (tmp_path / CURVES_FILE).exists()


def test_a_log_that_cannot_be_drawn_is_a_warning_not_a_failure(tmp_path: Path, caplog) -> None:
    (tmp_path / "metrics.csv").write_bytes(b"step,train/loss\n\xff\xfe\x00,1\n")  # not UTF-8
    with caplog.at_level(logging.WARNING, logger="vtlab"):
        assert write_curves(tmp_path) is None
    [record] = [r for r in caplog.records if r.name == "vtlab"]
    assert record.levelno == logging.WARNING
    assert record.getMessage().startswith(f"{tmp_path / CURVES_FILE}: training curves not drawn (UnicodeDecodeError")
    assert not (tmp_path / CURVES_FILE).exists()


def _logged(run_dir: Path) -> ResumableCSVLogger:
    logger = ResumableCSVLogger(save_dir=str(run_dir), name="csv", version="")
    for step, loss in enumerate((2.0, 1.5, 1.25, 1.125, 1.0)):
        logger.log_metrics({"train/loss": loss, "train/rank_loss": loss / 2}, step=step)
    logger.log_metrics({"val/nDCG@10": 0.3}, step=4)
    return logger


@pytest.mark.parametrize("status", ["success", "failed"])
def test_the_end_of_a_fit_draws_the_curves_beside_the_log(tmp_path: Path, status: str) -> None:
    """Lightning calls finalize("success") after a fit, finalize("failed") on an exception or a signal: only a fit that
    ended well is drawn (a resumed run draws the whole merged log when it ends)."""
    logger = _logged(tmp_path)
    logger.finalize(status)
    assert (tmp_path / "csv" / "metrics.csv").is_file()  # Lightning's last save, in both cases
    if status == "success":
        _png(tmp_path / "csv" / CURVES_FILE)
    else:
        assert not (tmp_path / "csv" / CURVES_FILE).exists()


def test_only_rank_0_draws(tmp_path: Path, monkeypatch) -> None:
    logger = _logged(tmp_path)
    logger.save()
    monkeypatch.setattr(rank_zero_only, "rank", 1)  # a later rank of a DDP run: its logger writes nothing
    logger.finalize("success")
    assert not (tmp_path / "csv" / CURVES_FILE).exists()


def test_a_handful_of_steps_draws_no_curve(tmp_path: Path) -> None:
    from vtlab.tracking.curves import MIN_STEPS

    rows = LOG.splitlines()
    short = [rows[0], *[r for r in rows[1:] if r.split(",")[2] in {str(s) for s in range(MIN_STEPS - 1)}]]
    (tmp_path / "metrics.csv").write_text("\n".join(short) + "\n")
    assert write_curves(tmp_path) is None and not (tmp_path / CURVES_FILE).exists()
    (tmp_path / "metrics.csv").write_text(LOG)
    _png(write_curves(tmp_path))
