"""The running Hydra job, as a stage asks about it: the config a group was chosen by on the command line, and the
sweep directory of a multirun. Outside a Hydra job (a test composing a config) both fall back: the node's `name`,
no sweep."""

from __future__ import annotations

from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig


def config_choice(cfg: DictConfig, group: str) -> str:
    """The config name the user chose for `group` (what a suggested command must say), else the node's `name`."""
    if HydraConfig.initialized():
        choice = HydraConfig.get().runtime.choices.get(group)
        if choice:
            return str(choice)
    node = cfg.get(group)
    return str(node.get("name", "?")) if node is not None else "none"


def sweep_dir() -> Path | None:
    """The multirun's sweep directory, None for a single run (or outside Hydra)."""
    if not HydraConfig.initialized():
        return None
    hc = HydraConfig.get()
    return Path(hc.sweep.dir) if hc.mode == RunMode.MULTIRUN else None
