"""Exact resume: the RNG streams and the run's config recorded in every checkpoint, and the config check on resume."""

from __future__ import annotations

import logging
from typing import Any

import pytorch_lightning as pl
from omegaconf import DictConfig

from vtlab.callbacks.checkpoints import check_checkpoint_fits, load_checkpoint, rng_states, set_rng_states
from vtlab.runs.plan import run_plan
from vtlab.runs.resume import checked_configs
from vtlab.runs.world import current

log = logging.getLogger("vtlab")


class ResumeState(pl.Callback):
    """What a Lightning checkpoint lacks for an exact restart.

    Saves the global RNG states of every process with every checkpoint and restores each rank's own when training
    starts again (after the setup-time callbacks — transfer, IDF, APC — and the pre-flight probe, none of which
    draw from them on restore), so dropout continues the uninterrupted run's stream on every rank. Before the
    restore it checks that the checkpoint fits the model as set up (after vocabulary transfer).
    """

    def __init__(self, resume_from: str | None = None, configs: list[dict[str, Any]] | None = None) -> None:
        self.resume_from = resume_from
        self.configs = configs  # recorded in every checkpoint: what a resume is checked against
        self._pending: dict[str, Any] | None = None

    def state_dict(self) -> dict[str, Any]:
        # every rank's own streams (each draws its own dropout), gathered while every rank dumps the checkpoint
        world = current()
        ranks = world.gather(rng_states())
        state: dict[str, Any] = {"rng": ranks[0], "rng_by_rank": ranks}
        if self.configs is not None:
            state["configs"] = self.configs
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        world, ranks = current(), state_dict.get("rng_by_rank")
        if ranks is not None and len(ranks) == world.size:
            self._pending = ranks[world.rank]
            return
        if ranks is not None:
            log.warning(
                "the checkpoint holds the random streams of %d processes, this run has %d: every rank continues "
                "rank 0's (the resumed run is not the uninterrupted one's, step for step)",
                len(ranks),
                world.size,
            )
        self._pending = state_dict.get("rng")

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit" and self.resume_from:
            check_checkpoint_fits(self.resume_from, pl_module)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._pending is not None:
            set_rng_states(self._pending)
            self._pending = None


def recorded_configs(resume_from: str) -> list[dict[str, Any]] | None:
    """The configs the checkpoint `resume_from` records (ResumeState's state), None when it records none."""
    saved = load_checkpoint(resume_from, mmap=True).get("callbacks", {}).get(ResumeState.__qualname__, {})
    recorded = saved.get("configs") if isinstance(saved, dict) else None
    return list(recorded) if recorded else None


def resume_configs(cfg: DictConfig, resume_from: str | None) -> list[dict[str, Any]]:
    """vtlab.runs.resume.checked_configs of `cfg`'s plan with the record read from `resume_from` (for callers outside
    the pipeline: a run's admission reads it once and hands the result on)."""
    return checked_configs(run_plan(cfg), resume_from, recorded_configs(resume_from) if resume_from else None)
