"""Exact resume: the RNG streams and the run's config recorded in every checkpoint, and the config check on resume."""

from __future__ import annotations

import logging
from typing import Any

import pytorch_lightning as pl
from omegaconf import DictConfig

from vtlab.callbacks.checkpoints import check_checkpoint_fits, load_checkpoint, rng_states, set_rng_states
from vtlab.core.errors import RunDirError
from vtlab.runs.reuse import comparable

log = logging.getLogger("vtlab")


class ResumeState(pl.Callback):
    """What a Lightning checkpoint lacks for an exact restart.

    Saves the global RNG states with every checkpoint and restores them when training starts again (after the
    setup-time callbacks — transfer, IDF, APC — and the pre-flight probe, none of which draw from them on restore),
    so dropout continues the uninterrupted run's stream. Before the restore it checks that the checkpoint fits the
    model as set up (after vocabulary transfer).
    """

    def __init__(self, resume_from: str | None = None, configs: list[dict[str, Any]] | None = None) -> None:
        self.resume_from = resume_from
        self.configs = configs  # recorded in every checkpoint: what a resume is checked against
        self._pending: dict[str, Any] | None = None

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"rng": rng_states()}
        if self.configs is not None:
            state["configs"] = self.configs
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._pending = state_dict.get("rng")

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit" and self.resume_from:
            check_checkpoint_fits(self.resume_from, pl_module)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._pending is not None:
            set_rng_states(self._pending)
            self._pending = None


# Keys a resumed run may change: how it runs and reports, not what it computes (besides vtlab.runs.reuse.IGNORED: labels
# and paths).
RUN_LOCAL = ("resume", "overwrite", "resume_with_changes", "logger", "baseline")


def run_config(cfg: DictConfig) -> dict[str, Any]:
    """What a checkpoint records of its run's config: plain values, unresolved, without the run-local keys."""
    return {k: v for k, v in comparable(cfg).items() if k not in RUN_LOCAL}


def config_changes(old: Any, new: Any, key: str = "") -> list[str]:
    """`key: old -> new` for each leaf that differs (dicts compared key by key, anything else as a whole)."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [
            c
            for k in sorted(set(old) | set(new), key=str)
            for c in config_changes(old.get(k, "<absent>"), new.get(k, "<absent>"), f"{key}.{k}" if key else str(k))
        ]
    return [] if old == new else [f"{key}: {old!r} -> {new!r}"]


def resume_configs(cfg: DictConfig, resume_from: str | None) -> list[dict[str, Any]]:
    """The configs a run's checkpoints record: this run's, or on a resume the interrupted run's ones. A resume whose
    config differs from the interrupted run's (lr, batch size, ...: the restored optimizer, schedule and data order
    would silently mix both) is refused unless resume_with_changes=true, which then appends this config to the record
    (the checkpoint then holds both) and warns with the differences."""
    current = run_config(cfg)
    if not resume_from:
        return [current]
    saved = load_checkpoint(resume_from, mmap=True).get("callbacks", {}).get(ResumeState.__qualname__, {})
    recorded = saved.get("configs") if isinstance(saved, dict) else None
    if not recorded:
        log.warning(
            "%s records no config (written before vtlab recorded one): the resumed config is not checked", resume_from
        )
        return [current]
    changes = config_changes(recorded[-1], current)
    if not changes:
        return list(recorded)
    shown = "; ".join(changes[:4]) + (f"; and {len(changes) - 4} more" if len(changes) > 4 else "")
    if not cfg.get("resume_with_changes", False):
        raise RunDirError(
            f"{resume_from}: cannot resume: the config differs from the interrupted run's ({shown}); "
            "rerun with its settings, pass resume_with_changes=true to continue with these (both are "
            "recorded in the checkpoint), or overwrite=true to start over"
        )
    log.warning(
        "resume_with_changes=true: continuing %s with a changed config (%s); the restored optimizer, "
        "schedule and data order are the interrupted run's",
        resume_from,
        shown,
    )
    return [*recorded, current]
