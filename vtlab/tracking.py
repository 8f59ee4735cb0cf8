"""Experiment tracking beyond Lightning's per-step curves: the run's resolved config, final metrics as the wandb
summary, per-dataset results as a wandb Table and the run's PNGs (APC histograms) as images — so a wandb project shows
a sweep (its `group`) as one comparison. Loggers other than wandb get the same metrics through `log_metrics`."""
from __future__ import annotations

import csv
import logging
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from hydra.utils import instantiate
from lightning_fabric.loggers.logger import rank_zero_experiment
from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.loggers import CSVLogger, Logger, WandbLogger
from pytorch_lightning.loggers.csv_logs import ExperimentWriter
from pytorch_lightning.utilities.rank_zero import rank_zero_only

from vtlab.atomic import atomic_write
from vtlab.errors import disk_error

log = logging.getLogger("vtlab")

def resolved_config(cfg: DictConfig) -> dict[str, Any] | None:
    """The run's config, resolved, as the loggers record it; None outside a Hydra job (a test composing a config),
    where `${hydra:...}` does not resolve and nothing was ever recorded."""
    if not HydraConfig.initialized():
        return None
    return OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)  # type: ignore[return-value]


def log_run_config(loggers: list[Logger], config: dict[str, Any] | None) -> None:
    """The full resolved config as hyperparameters (wandb config, CSV hparams.yaml); nothing when it is None."""
    if config is None:
        return
    for lg in loggers:
        lg.log_hyperparams(config)


def run_group(cfg: DictConfig) -> str:
    """The wandb group: `group` when set (experiment configs name their table); else the jobs of one sweep share one,
    its directory, and a single run is grouped under its name."""
    if cfg.get("group"):
        return str(cfg.group)
    if HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN:
        return str(HydraConfig.get().sweep.dir)
    return str(cfg.name)


def instantiate_logger(cfg: DictConfig, logger_cfg: Any, **overrides: Any) -> Logger:
    """One configured logger; wandb runs offline unless `logger.online=true`, in the group `run_group` names unless
    the logger's config sets one."""
    if str(logger_cfg.get("_target_", "")).endswith("WandbLogger"):
        overrides.setdefault("offline", not bool((cfg.get("logger") or {}).get("online", False)))
        if logger_cfg.get("group") is None:
            overrides.setdefault("group", run_group(cfg))
    return instantiate(logger_cfg, **overrides)


def finish_runs(exit_code: int = 0) -> None:
    """End the wandb run this process started, if any, whichever logger started it: the next job of a sweep that
    runs in the same process (Hydra's basic launcher) then gets a run of its own instead of Lightning reusing this
    one. A non-zero `exit_code` marks the run failed."""
    wandb = sys.modules.get("wandb")  # never imported: no run was started
    if wandb is not None and wandb.run is not None:
        wandb.finish(exit_code=exit_code)


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
    log_run_config(loggers, resolved_config(cfg))
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

    @rank_zero_only
    def hold_until_training(self) -> None:
        self.experiment.hold = True

    @rank_zero_only
    def training_starts(self, step: int) -> None:
        self.experiment.training_starts(step)

    @rank_zero_only
    def training_ends(self) -> None:
        self.experiment.cut = None


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
            log.info("%s: %d earlier rows kept, %d from step %s on dropped (logged again from here)",
                     self.metrics_file_path, len(kept), len(earlier) - len(kept), step)
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
