"""What a stage's steps will do, read from the config before any of them is imported: the run's first line names only
the steps that run (vtlab.runs.precheck.first_line), and a step that does nothing skips itself by the same rule."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig, OmegaConf

from vtlab.runs.plan import trains

MLM_STEP = "vtlab.stages.mlm.run"


def mlm_idle(m: Any) -> bool:
    """`mlm.steps=0` without `mlm.head_fit`: the paper's no-MLM variant, where the MLM stage does nothing."""
    return m is None or (int(m.steps) == 0 and not m.get("head_fit"))


# a step's _target_ → whether the config leaves it nothing to do
IDLE_WHEN: dict[str, Callable[[DictConfig], bool]] = {MLM_STEP: lambda cfg: mlm_idle(OmegaConf.select(cfg, "mlm"))}


def step_names(cfg: DictConfig) -> list[str]:
    """The names (`mlm`, `finetune`, ...) of the stage's steps that will do something, in order."""
    targets = [str(s.get("_target_", "")) for s in OmegaConf.select(cfg, "stage.steps") or []]
    return [t.rsplit(".", 2)[-2] for t in targets if not IDLE_WHEN.get(t, lambda _cfg: False)(cfg)]


NO_DEV_SET = "no dev set (data.dev_path): the last step's weights are evaluated"


def training_size(
    steps: int, epochs: int, batch_size: Any, accumulate: int, dev_every: Any, has_dev: bool = True
) -> str:
    """`300 steps of 16 triplets, dev every 100 batches`: what a fine-tuning run will do (`dev_every` None: no dev
    evaluation; a fraction: of an epoch; `has_dev` False: the data has no dev set, and the line says so)."""
    size = f"{steps:,} step{'s' * (steps != 1)}" if steps > 0 else f"{epochs} epoch{'s' * (epochs != 1)}"
    if batch_size is not None:
        size += f" of {batch_size} triplets" + (f" x {accumulate} batches" if accumulate > 1 else "")
    if not has_dev:
        return f"{size}, {NO_DEV_SET}"
    if dev_every is None:
        return f"{size}, no dev evaluation"
    return (
        f"{size}, dev every {dev_every:,} batches"
        if isinstance(dev_every, int)
        else f"{size}, dev every {dev_every:g} epoch"
    )


def configured_size(cfg: DictConfig) -> str | None:
    """training_size of the config's trainer and data for a run that fine-tunes, else None."""
    if not trains(cfg):
        return None
    t = cfg.trainer
    dev = t.get("val_check_interval") if t.get("limit_val_batches", 1.0) else None
    return training_size(
        int(t.max_steps),
        int(t.get("max_epochs", -1)),
        cfg.data.get("batch_size"),
        int(t.get("accumulate_grad_batches") or 1),
        dev,
        has_dev=bool(cfg.data.get("dev_path") or cfg.data.get("dev") is not None),
    )
