"""Experiment tracking beyond Lightning's per-step curves: the run's resolved config, final metrics as the wandb
summary, per-dataset results as a wandb Table and the run's PNGs (APC histograms) as images — so a wandb project shows
a sweep (its `group`) as one comparison. Loggers other than wandb get the same metrics through `log_metrics`."""
from __future__ import annotations

import csv
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
from hydra.utils import instantiate
from lightning_fabric.loggers.logger import rank_zero_experiment
from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.loggers import CSVLogger, Logger, WandbLogger
from pytorch_lightning.loggers.csv_logs import ExperimentWriter

from vtlab.atomic import atomic_write
from vtlab.errors import disk_error

log = logging.getLogger("vtlab")

_RUN_CONFIG: dict[str, Any] | None = None


def set_run_config(cfg: DictConfig) -> None:
    """Remember the job's resolved config (called by the entry point, where Hydra's resolvers work)."""
    global _RUN_CONFIG
    _RUN_CONFIG = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)  # type: ignore[assignment]


def run_config() -> dict[str, Any] | None:
    return _RUN_CONFIG


def log_run_config(loggers: list[Logger]) -> None:
    """The full resolved config as hyperparameters (wandb config, CSV hparams.yaml)."""
    config = run_config()
    if config is None:
        return  # called outside the CLI (tests composing configs): nothing recorded
    for lg in loggers:
        lg.log_hyperparams(config)


def instantiate_logger(cfg: DictConfig, logger_cfg: Any, **overrides: Any) -> Logger:
    """One configured logger; wandb runs offline unless `logger.online=true`."""
    if str(logger_cfg.get("_target_", "")).endswith("WandbLogger"):
        overrides.setdefault("offline", not bool((cfg.get("logger") or {}).get("online", False)))
    return instantiate(logger_cfg, **overrides)


def configured_loggers(cfg: DictConfig) -> list[Logger]:
    """Every logger under `logger` (entries that are settings, like `online`, are skipped)."""
    return [instantiate_logger(cfg, c) for c in (cfg.get("logger") or {}).values()
            if OmegaConf.is_dict(c) and "_target_" in c]


def run_loggers(cfg: DictConfig, state: Mapping[str, Any]) -> list[Logger]:
    """The training run's loggers when there was one, else the configured ones (an evaluate-only run)."""
    trainer = state.get("trainer")
    if trainer is not None:
        return list(trainer.loggers)
    loggers = configured_loggers(cfg)
    log_run_config(loggers)
    return loggers


def log_results(loggers: list[Logger], results: Mapping[str, Mapping[str, float]], run_dir: str | Path,
                step: int = 0) -> None:
    """results: {dataset: metrics}. Summary keys `eval/<dataset>/<metric>` (+ `eval/avg/...` with > 1 dataset)."""
    flat = {f"eval/{ds}/{k}": float(v) for ds, m in results.items() for k, v in m.items()
            if isinstance(v, (int, float))}
    for lg in loggers:
        if isinstance(lg, WandbLogger):
            _wandb_results(lg, results, flat, Path(run_dir))
        else:
            lg.log_metrics(flat, step=step)
            lg.save()


def _wandb_results(lg: WandbLogger, results: Mapping[str, Mapping[str, float]], flat: dict[str, float],
                   run_dir: Path) -> None:
    import wandb

    exp = lg.experiment
    exp.summary.update(flat)
    columns = sorted({k for m in results.values() for k in m})
    table = wandb.Table(columns=["dataset", *columns],
                        data=[[ds, *[m.get(c) for c in columns]] for ds, m in results.items()])
    images = {f"images/{p.relative_to(run_dir).with_suffix('').as_posix()}": wandb.Image(str(p))
              for p in sorted(run_dir.rglob("*.png")) if "wandb" not in p.parts}
    exp.log({"eval/results": table, **images})


class RunConfigLogger(pl.Callback):
    """Logs the job's full resolved config to every logger when fitting starts (wandb config, CSV hparams.yaml)."""

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit":
            log_run_config(list(trainer.loggers))


# ---- a CSV log that survives a resume -------------------------------------------------------------------------------


class ResumableCSVLogger(CSVLogger):
    """Lightning's CSVLogger, except that a run restarted in the same directory keeps the rows logged before the
    interrupt (Lightning's writer deletes metrics.csv when it starts). See `KeepingWriter` for which rows stay."""

    @property
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = KeepingWriter(log_dir=self.log_dir)
        return self._experiment


class KeepingWriter(ExperimentWriter):
    """Reads an existing metrics.csv instead of deleting it. The first step this process logs tells where it took up:
    a resume replays every step after its checkpoint, so the earlier rows of steps before that one are kept and the
    rest (the replayed stretch, or all of them for a run that starts over at step 0) are dropped. The merged file is
    written whole and renamed into place (a kill then loses nothing); later rows are appended as Lightning does."""

    def __init__(self, log_dir: str) -> None:
        self._earlier: list[dict[str, str]] | None = _read_rows(Path(log_dir) / self.NAME_METRICS_FILE)
        super().__init__(log_dir=log_dir)

    def _check_log_dir_exists(self) -> None:
        pass  # the parent deletes metrics.csv here; save() replaces it with the merged rows instead

    def save(self) -> None:
        if self._earlier is not None and self.metrics:
            first = self.metrics[0]["step"]
            kept = [r for r in self._earlier if _step(r) is not None and _step(r) < first]  # type: ignore[operator]
            if len(kept) < len(self._earlier):
                log.info("%s: %d earlier rows kept, %d from step %s on dropped (logged again from here)",
                         self.metrics_file_path, len(kept), len(self._earlier) - len(kept), first)
            self.metrics = [*kept, *self.metrics]
            self._record_new_keys()
            rows, self.metrics, self._earlier = self.metrics, [], None
            atomic_write(self.metrics_file_path, lambda f: _write_rows(f, self.metrics_keys, rows))
        try:
            super().save()  # hparams.yaml, and any rows logged since (appended)
        except OSError as e:
            err = disk_error(self.metrics_file_path, e)
            if err is None:
                raise
            raise err from e


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
