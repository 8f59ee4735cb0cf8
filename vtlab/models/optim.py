"""Optimizer wiring shared by the Lightning modules: AdamW-style groups without decay on biases and norms."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytorch_lightning as pl
import torch

NO_DECAY = ("bias", "LayerNorm.weight", "layer_norm.weight", "norm.weight")


def parameter_groups(module: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    decay, no_decay = [], []
    for name, p in module.named_parameters():  # a tied decoder weight appears once
        if p.requires_grad:
            (no_decay if name.endswith(NO_DECAY) else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def configure_optimizers(module: pl.LightningModule, optimizer: Callable[..., torch.optim.Optimizer],
                         scheduler: Callable[..., Any] | None, weight_decay: float) -> Any:
    """`optimizer`/`scheduler` are Hydra partials; the scheduler gets the run's total number of optimizer steps."""
    opt = optimizer(parameter_groups(module, weight_decay))
    if scheduler is None:
        return opt
    sched = scheduler(opt, num_training_steps=int(module.trainer.estimated_stepping_batches))
    return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}
