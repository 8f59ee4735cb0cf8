"""The run's loggers (conf/logger: built here, wandb offline unless `logger.online=true`, grouped by sweep) and what
they track beyond Lightning's per-step curves: the run's resolved config, final metrics as the wandb summary,
per-dataset results as a wandb Table and the run's PNGs (APC histograms) as images — so a wandb project shows a sweep
(its `group`) as one comparison. Loggers other than wandb get the same metrics through `log_metrics`.

A run directory is one wandb run however often it is resumed: its id is recorded there (vtlab.runs.tracking_id) and
the wandb logger continues it (`resume="allow"`)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.loggers import Logger, WandbLogger

from vtlab.runs.ranks import later_rank
from vtlab.runs.tracking_id import recorded_id


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


def _is_wandb(logger_cfg: Any) -> bool:
    return isinstance(logger_cfg, Mapping) and str(logger_cfg.get("_target_", "")).endswith("WandbLogger")


def logs_to_wandb(loggers: Any) -> bool:
    """Whether the run's logger group (`cfg.logger`) has a wandb logger (the admission then records the run directory's
    wandb id)."""
    return any(_is_wandb(c) for c in (loggers or {}).values())


def instantiate_logger(cfg: DictConfig, logger_cfg: Any, **overrides: Any) -> Logger:
    """One configured logger; wandb runs offline unless `logger.online=true`, in the group `run_group` names unless
    the logger's config sets one, as the run directory's wandb run (`id` recorded there by the admission, continued
    with `resume="allow"`; no id of the logger's config or `overrides` is replaced). A later rank gets no id: its
    logger starts no wandb run (Lightning's rank-zero experiment), and it reads nothing rank 0 writes."""
    if _is_wandb(logger_cfg):
        overrides.setdefault("offline", not bool((cfg.get("logger") or {}).get("online", False)))
        if logger_cfg.get("group") is None:
            overrides.setdefault("group", run_group(cfg))
        if logger_cfg.get("id") is None and logger_cfg.get("version") is None:
            overrides.setdefault("id", None if later_rank() else recorded_id(str(cfg.paths.run_dir)))
        overrides.setdefault("resume", "allow")
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
    return [
        instantiate_logger(cfg, c)
        for c in (cfg.get("logger") or {}).values()
        if OmegaConf.is_dict(c) and "_target_" in c
    ]


def run_loggers(cfg: DictConfig, state: Mapping[str, Any]) -> list[Logger]:
    """The training run's loggers when there was one, else the configured ones (an evaluate-only run)."""
    trainer = state.get("trainer")
    if trainer is not None:
        return list(trainer.loggers)
    loggers = configured_loggers(cfg)
    log_run_config(loggers, resolved_config(cfg))
    return loggers


def log_results(
    loggers: list[Logger], results: Mapping[str, Mapping[str, float]], run_dir: str | Path, step: int = 0
) -> None:
    """results: {dataset: metrics}. Summary keys `eval/<dataset>/<metric>` (+ `eval/avg/...` with > 1 dataset)."""
    flat = {
        f"eval/{ds}/{k}": float(v) for ds, m in results.items() for k, v in m.items() if isinstance(v, (int, float))
    }
    for lg in loggers:
        if isinstance(lg, WandbLogger):
            _wandb_results(lg, results, flat, Path(run_dir))
        else:
            lg.log_metrics(flat, step=step)
            lg.save()


def _wandb_results(
    lg: WandbLogger, results: Mapping[str, Mapping[str, float]], flat: dict[str, float], run_dir: Path
) -> None:
    import wandb

    exp = lg.experiment
    exp.summary.update(flat)
    columns = sorted({k for m in results.values() for k in m})
    table = wandb.Table(
        columns=["dataset", *columns], data=[[ds, *[m.get(c) for c in columns]] for ds, m in results.items()]
    )
    images = {
        f"images/{p.relative_to(run_dir).with_suffix('').as_posix()}": wandb.Image(str(p))
        for p in sorted(run_dir.rglob("*.png"))
        if "wandb" not in p.parts
    }
    exp.log({"eval/results": table, **images})
