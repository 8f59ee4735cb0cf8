"""Optimizer wiring shared by the Lightning modules: AdamW-style groups without decay on biases and norms."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytorch_lightning as pl
import torch

NO_DECAY = ("bias", "LayerNorm.weight", "layer_norm.weight", "norm.weight")


def parameter_groups(
    module: torch.nn.Module, weight_decay: float, own_groups: Mapping[str, Mapping[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """Decay / no-decay groups; a parameter named in `own_groups` gets a group of its own with those options
    (e.g. {"encoder.idf": {"lr": 1e-3}}: a trainable IDF at its own learning rate)."""
    own_groups = dict(own_groups or {})
    decay, no_decay, own = [], [], {}
    for name, p in module.named_parameters():  # a tied decoder weight appears once
        if not p.requires_grad:
            continue
        if name in own_groups:
            own[name] = {"params": [p], "weight_decay": weight_decay, **own_groups[name]}
        else:
            (no_decay if name.endswith(NO_DECAY) else decay).append(p)
    missing = sorted(set(own_groups) - set(own))
    if missing:
        raise ValueError(f"optimizer groups name no trainable parameter: {missing}")
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}, *own.values()]


def configure_optimizers(
    module: pl.LightningModule,
    optimizer: Callable[..., torch.optim.Optimizer],
    scheduler: Callable[..., Any] | None,
    weight_decay: float,
    own_groups: Mapping[str, Mapping[str, Any]] | None = None,
) -> Any:
    """`optimizer`/`scheduler` are Hydra partials; the scheduler gets the run's total number of optimizer steps."""
    opt = optimizer(parameter_groups(module, weight_decay, own_groups))
    if scheduler is None:
        return opt
    sched = scheduler(opt, num_training_steps=int(module.trainer.estimated_stepping_batches))
    return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}
