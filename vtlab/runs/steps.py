"""What a stage's steps will do, read from the config before any of them is imported: the run's first line names only
the steps that run (vtlab.runs.precheck.first_line), and a step that does nothing skips itself by the same rule."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig, OmegaConf

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
