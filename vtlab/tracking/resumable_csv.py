"""A CSV training log that survives a resume: Lightning's CSVLogger, except that a run restarted in the same directory
keeps the rows logged before the interrupt (conf/logger/csv.yaml; the CSV beside wandb in conf/logger/wandb.yaml), and
whose curves are drawn beside it when fitting ends (csv/curves.png, vtlab.tracking.curves)."""

from __future__ import annotations

import csv
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightning_fabric.loggers.logger import rank_zero_experiment
from pytorch_lightning.loggers import CSVLogger
from pytorch_lightning.loggers.csv_logs import ExperimentWriter
from pytorch_lightning.utilities.rank_zero import rank_zero_only

from vtlab.core.atomic import atomic_write
from vtlab.core.errors import disk_error
from vtlab.tracking.curves import write_curves

log = logging.getLogger("vtlab")


class ResumableCSVLogger(CSVLogger):
    """Lightning's CSVLogger, except that a run restarted in the same directory keeps the rows logged before the
    interrupt (Lightning's writer deletes metrics.csv when it starts). See `KeepingWriter` for which rows stay. A fit
    that ends well leaves curves.png beside metrics.csv (rank 0 only, as every write of this logger)."""

    @property
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = KeepingWriter(log_dir=self.log_dir)
        return self._experiment

    @rank_zero_only
    def hold_until_training(self) -> None:
        self.experiment.hold = True

    @rank_zero_only
    def training_starts(self, step: int) -> None:
        self.experiment.training_starts(step)

    @rank_zero_only
    def training_ends(self) -> None:
        self.experiment.cut = None

    @rank_zero_only
    def finalize(self, status: str) -> None:
        """Lightning's last save of the log (at the end of every fit: "success", or "failed" on an exception or a
        signal), then, after a fit that succeeded, its curves (never raises: vtlab.tracking.curves.write_curves)."""
        super().finalize(status)
        if status == "success" and self._experiment is not None:
            write_curves(self.log_dir, title=f"{Path(self.root_dir).parent.name}: training curves")


class KeepingWriter(ExperimentWriter):
    """Reads an existing metrics.csv instead of deleting it, and keeps its rows of the steps before the one where
    training takes up (`training_starts`, from RunConfigLogger: a resume replays every step after its checkpoint, so
    the earlier rows of those steps go, as do all of them for a run that starts over at step 0). While a resumed fit
    runs, a row for a step before its checkpoint repeats one the interrupted run logged (the preflight probe logs at
    step 0 again) and is dropped; rows logged before the first batch wait for it. Without RunConfigLogger the first
    step logged is taken as the one training takes up at. The merged file is written whole and renamed into place (a
    kill then loses nothing); later rows are appended as Lightning does."""

    def __init__(self, log_dir: str) -> None:
        self._earlier: list[dict[str, str]] | None = _read_rows(Path(log_dir) / self.NAME_METRICS_FILE)
        self.hold = False  # buffer rows until training_starts
        self.cut: int | None = None  # while set: rows of earlier steps are repeats
        super().__init__(log_dir=log_dir)

    def _check_log_dir_exists(self) -> None:
        pass  # the parent deletes metrics.csv here; the first save replaces it with the merged rows instead

    def log_metrics(self, metrics_dict: dict[str, float], step: int | None = None) -> None:
        super().log_metrics(metrics_dict, step)
        if self.cut is not None and self.metrics[-1]["step"] < self.cut:
            self.metrics.pop()

    def training_starts(self, step: int) -> None:
        self.hold = False
        if self._earlier is not None:
            self._merge(step, drop_new_before=step)
        self.cut = step if step > 0 else None
        self.save()

    def save(self) -> None:
        if self._earlier is not None and self.metrics and not self.hold:
            self._merge(self.metrics[0]["step"], drop_new_before=0)  # no RunConfigLogger: the first step logged
        if self.hold:
            return  # hparams.yaml is written by log_hparams itself
        try:
            super().save()  # hparams.yaml, and the rows logged since (appended)
        except OSError as e:
            err = disk_error(self.metrics_file_path, e)
            if err is None:
                raise
            raise err from e

    def _merge(self, step: int, drop_new_before: int) -> None:
        earlier = self._earlier or []
        kept = [r for r in earlier if (s := _step(r)) is not None and s < step]
        new = [r for r in self.metrics if r["step"] >= drop_new_before]
        if len(kept) < len(earlier) or len(new) < len(self.metrics):
            log.info(
                "%s: %d earlier rows kept, %d from step %s on dropped (logged again from here)",
                self.metrics_file_path,
                len(kept),
                len(earlier) - len(kept),
                step,
            )
        self.metrics = [*kept, *new]
        self._record_new_keys()
        rows, self.metrics, self._earlier = self.metrics, [], None
        atomic_write(self.metrics_file_path, lambda f: _write_rows(f, self.metrics_keys, rows))


def _read_rows(path: Path) -> list[dict[str, str]] | None:
    """The rows of an earlier metrics.csv; None when there is none. An unreadable one is left for Lightning's
    writer to replace (it holds no rows worth a crash)."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            return [dict(r) for r in csv.DictReader(f)]
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        log.warning("%s: cannot read the earlier training log (%s); it is replaced", path, type(e).__name__)
        return []


def _step(row: Mapping[str, str]) -> int | None:
    try:
        return int(float(row.get("step") or ""))
    except ValueError:
        return None


def _write_rows(f: Any, keys: list[str], rows: list[dict[str, Any]]) -> None:
    writer = csv.DictWriter(f, fieldnames=keys)
    writer.writeheader()
    writer.writerows(rows)
