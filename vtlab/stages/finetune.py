"""Stage `finetune`: SPLADE training with Lightning; keeps the best checkpoint by dev retrieval and exports it."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig

log = logging.getLogger("vtlab")


def build_module(cfg: DictConfig, state: dict[str, Any] | None = None) -> pl.LightningModule:
    """The SPLADE module; on the backbone an earlier stage produced (e.g. the MLM-adapted one) when there is one."""
    if state and "backbone" in state:
        return instantiate(cfg.model, encoder=instantiate(cfg.model.encoder, backbone=state["backbone"]))
    return instantiate(cfg.model)


def run(cfg: DictConfig, state: dict[str, Any]) -> dict[str, Any]:
    pl.seed_everything(cfg.seed, workers=True)
    run_dir = Path(cfg.paths.run_dir)
    module = state.get("module") or build_module(cfg, state)
    encoder = module.encoder
    datamodule = instantiate(cfg.data, tokenizer=encoder.tokenizer, preprocess=encoder.preprocess)
    callbacks = [instantiate(c) for c in cfg.callbacks.values() if c is not None]
    loggers = [instantiate(c) for c in cfg.logger.values() if c is not None]
    trainer: pl.Trainer = instantiate(cfg.trainer, callbacks=callbacks, logger=loggers or False)
    trainer.fit(module, datamodule=datamodule)

    ckpt = _chosen_checkpoint(trainer)
    if ckpt is not None:
        # the final evaluation uses the checkpoint chosen by the dev metric, not the last weights
        module.load_state_dict(torch.load(ckpt, map_location="cpu", weights_only=False)["state_dict"])
        log.info("loaded checkpoint %s", ckpt)
    model_dir = run_dir / "model"
    if trainer.is_global_zero:
        encoder.save_pretrained(model_dir)
    return {**state, "module": module, "encoder": encoder, "model_dir": model_dir, "checkpoint": ckpt,
            "trainer": trainer}


def _chosen_checkpoint(trainer: pl.Trainer) -> str | None:
    cb = trainer.checkpoint_callback
    if cb is None:
        return None
    return cb.best_model_path or cb.last_model_path or None
