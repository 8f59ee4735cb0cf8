"""Stage `finetune`: SPLADE training with Lightning; keeps the best checkpoint by dev retrieval and exports it.

A resume (`state["resume_from"]`, vtlab.stages.pipeline) continues exactly: Lightning restores weights, optimizer,
scheduler and loops; the training DataLoader its place; ResumeState each rank's RNG streams (dropout). The processes
join first (vtlab.runs.world). Checkpoint reading, writing and sizing: vtlab.callbacks.checkpoints."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from vtlab.callbacks.checkpoints import SameDirCheckpointIO, check_free_space, chosen_checkpoint, load_checkpoint
from vtlab.callbacks.resume_state import ResumeState
from vtlab.callbacks.run_config import RunConfigLogger
from vtlab.callbacks.vocab_transfer import VocabTransferCallback
from vtlab.core.atomic import atomic_dir
from vtlab.core.errors import ConfigError
from vtlab.core.instantiate import instantiate_with
from vtlab.runs.reads import reads
from vtlab.runs.world import join_trainer
from vtlab.runtime.precision import trainer_precision
from vtlab.stages.build import TRANSFER_READS, transfer_parts
from vtlab.tracking.loggers import configured_loggers, resolved_config
from vtlab.vocab.transfer import transferred_backbone

log = logging.getLogger("vtlab")


def build_module(cfg: DictConfig, state: dict[str, Any] | None = None) -> pl.LightningModule:
    """The SPLADE module; on the backbone an earlier stage produced (e.g. the MLM-adapted one) when there is one."""
    if state and "backbone" in state:
        return instantiate_with(cfg.model, encoder=instantiate_with(cfg.model.encoder, backbone=state["backbone"]))
    return instantiate(cfg.model)


def materialize_inputs(cfg: DictConfig, state: dict[str, Any]) -> None:
    """Build the cached backbone and vocabulary transfer this run loads, if an earlier stage has not: building them
    consumes the global RNG, so on a cold cache training would otherwise draw other dropout than on a warm one."""
    if "backbone" in state:
        return  # an earlier stage (MLM) produced the model: everything it stands on is built
    backbone, vocab, init, options = transfer_parts(cfg)
    materialize = getattr(backbone, "materialize", None)
    if materialize is not None:
        materialize()
    transferred_backbone(backbone, vocab, init, options)


def tell_callbacks(callbacks: list[pl.Callback], cfg: DictConfig, state: dict[str, Any]) -> None:
    """What the configured callbacks cannot know themselves: the run's resolved config (to log) and whether an earlier
    stage (MLM adaptation, which hands on `state["backbone"]`) already moved the model onto the run's vocabulary."""
    for cb in callbacks:
        if isinstance(cb, RunConfigLogger):
            cb.config = resolved_config(cfg)
        elif isinstance(cb, VocabTransferCallback):
            cb.transferred = "backbone" in state


@reads("model", "data", "callbacks", "trainer", "seed", *TRANSFER_READS)
def run(cfg: DictConfig, state: dict[str, Any]) -> dict[str, Any]:
    join_trainer(cfg.trainer)
    resume_from = state.get("resume_from")
    materialize_inputs(cfg, state)
    pl.seed_everything(cfg.seed, workers=True)
    run_dir = Path(cfg.paths.run_dir)
    module = state.get("module") or build_module(cfg, state)
    check_free_space(run_dir, module)  # a full disk is found now, not at the first checkpoint or after training
    encoder = module.encoder
    datamodule = instantiate_with(cfg.data, tokenizer=encoder.tokenizer, preprocess=encoder.preprocess)
    datamodule.setup("fit")  # read and check the data before any model work (Lightning's own setup is then a no-op)
    _check_teacher_scores(module, datamodule, cfg)
    callbacks = [instantiate(c) for c in cfg.callbacks.values() if c is not None]
    tell_callbacks(callbacks, cfg, state)
    # ResumeState last: its setup check runs after the callbacks that reshape the model (vocabulary transfer)
    callbacks.append(ResumeState(resume_from, state.get("configs")))  # what the admission read
    loggers = configured_loggers(cfg)
    extra = {} if cfg.trainer.get("plugins") else {"plugins": [SameDirCheckpointIO()]}
    precision = trainer_precision(cfg.trainer.get("precision"), cfg.trainer.get("accelerator", "cpu"))
    trainer: pl.Trainer = instantiate(
        cfg.trainer, callbacks=callbacks, logger=loggers or False, precision=precision, **extra
    )
    if resume_from:
        log.info("resuming training from %s", resume_from)
    trainer.fit(module, datamodule=datamodule, ckpt_path=resume_from, weights_only=True)

    ckpt = chosen_checkpoint(trainer)
    if ckpt is not None:
        # the final evaluation uses the checkpoint chosen by the dev metric, not the last weights
        module.load_state_dict(load_checkpoint(ckpt)["state_dict"])
        log.info("loaded checkpoint %s", ckpt)
    model_dir = run_dir / "model"
    if trainer.is_global_zero:
        with atomic_dir(model_dir) as tmp:  # a kill mid-save leaves no half-written model/
            encoder.save_pretrained(tmp)
    return {
        **state,
        "module": module,
        "encoder": encoder,
        "model_dir": model_dir,
        "checkpoint": ckpt,
        "trainer": trainer,
    }


def _check_teacher_scores(module: pl.LightningModule, datamodule: Any, cfg: DictConfig) -> None:
    """A distillation loss on triplets without teacher scores fails at the first step otherwise, after model loading,
    transfer and calibration."""
    loss = getattr(module, "loss", None)
    if getattr(loss, "requires_teacher", False) and not getattr(datamodule, "has_teacher_scores", True):
        raise ConfigError(
            f"loss={type(loss).__name__} needs teacher scores, and the training data "
            f"({OmegaConf.select(cfg, 'data.train._target_', default='data.train')}) has none: add 'scores' to the "
            "triplets (or data.train.scores_path=FILE), or use loss=infonce"
        )
