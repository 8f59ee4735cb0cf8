"""Hydra's `instantiate` with built objects as arguments. Given keyword arguments, `hydra.utils.instantiate` merges them
into the config before it builds, and OmegaConf turns a dataclass instance (a `Normalizer`, any frozen settings
object) into a DictConfig on the way: the target then receives a config where it expected the object. Building a
partial first and calling it with the objects passes them through untouched."""

from __future__ import annotations

from typing import Any

from hydra.utils import instantiate


def instantiate_with(cfg: Any, **objects: Any) -> Any:
    """`cfg`'s target built from its config and `objects` (passed as they are, never merged into the config)."""
    return instantiate(cfg, _partial_=True)(**objects)
