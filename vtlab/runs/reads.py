"""What a run's stages read of its config, declared beside each stage (`@reads(...)` on its function), and one warning
naming the command line's overrides that none of them reads (`stage=export mlm.steps=5`: nothing of the export
changes; the run goes on).

The rule: a stage reads the keys it declares and every key their values refer to, followed through interpolations
(model.encoder's doc_max_length is `${data.doc_max_length}`, so data.doc_max_length is read wherever model.encoder
is). Every run reads RUN_WIDE besides, whatever its stages. An override is read when its key is a read key, lies
below one or holds one (`model=...` holds model.encoder); a group choice counts by the key Hydra places it at
(`teacher=...` fills data.teacher). A label that only mentions a key (the run's name shows eval.name) does not make
that key read, and a step that declares nothing is taken to read everything."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from hydra.types import RunMode
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

log = logging.getLogger("vtlab")
F = TypeVar("F", bound=Callable[..., Any])

# Read by every run, whatever its stages: Hydra's own settings, where the run writes, its name and labels, how it
# resumes or reuses an earlier run, which stages it runs, and what vtlab.reproduce and vtlab.report read of a job's
# config (an experiment's report, selection and paper settings).
RUN_WIDE = (
    "hydra",
    "paths",
    "name",
    "group",
    "logger",
    "stage",
    "experiment",
    "resume",
    "overwrite",
    "resume_with_changes",
    "reuse_runs",
    "report",
    "selection",
    "paper",
)
# the key an interpolation names: ${a.b}, ${oc.select:a.b,default}, ${a.b[0]} (a resolver's own name is followed by
# `:`, a relative key starts with `.`: neither is a key of the config's root)
_REFERENCE = re.compile(r"\$\{(?:oc\.select:)?([A-Za-z_][\w.]*)(?=[},\[])")


def reads(*keys: str) -> Callable[[F], F]:
    """Declare the config keys a stage function reads (top-level nodes or dotted paths): `@reads("eval", ...)`."""

    def declare(step: F) -> F:
        step.reads = keys  # type: ignore[attr-defined]
        return step

    return declare


def declared(cfg: DictConfig) -> list[str] | None:
    """The keys the run's stages declare (`cfg.stage.steps`), in order, each once; None when a step declares none."""
    found: dict[str, None] = {}
    for step in instantiate(cfg.stage.steps):
        keys = getattr(getattr(step, "func", step), "reads", None)
        if keys is None:
            return None
        found.update(dict.fromkeys(keys))
    return list(found)


def _at(raw: Any, key: str) -> Any:
    for part in key.split("."):
        if not isinstance(raw, dict) or part not in raw:
            return None
        raw = raw[part]
    return raw


def _references(raw: Any) -> Iterator[str]:
    """The root keys the interpolations in `raw` (a plain, unresolved config node) name."""
    if isinstance(raw, str):
        yield from _REFERENCE.findall(raw)
    elif isinstance(raw, dict):
        for value in raw.values():
            yield from _references(value)
    elif isinstance(raw, list):
        for value in raw:
            yield from _references(value)


def read_keys(cfg: DictConfig, keys: Iterable[str]) -> set[str]:
    """`keys`, every key their values refer to (followed until nothing new), and RUN_WIDE."""
    raw = OmegaConf.to_container(cfg, resolve=False)
    found: set[str] = set()
    todo = list(keys)
    while todo:
        key = todo.pop()
        if key not in found:
            found.add(key)
            todo.extend(_references(_at(raw, key)))
    return found | set(RUN_WIDE)


def _places(overrides: Sequence[str], config_name: str) -> tuple[set[str], dict[str, str]]:
    """(the config groups, "<group>/<choice>" → the key Hydra places that config at) for these overrides; nothing
    outside an initialized Hydra."""
    hydra = GlobalHydra.instance()
    if not hydra.is_initialized():
        return set(), {}
    try:
        defaults = hydra.config_loader().compute_defaults_list(config_name, list(overrides), RunMode.RUN)
    except HydraException:
        return set(), {}
    return set(defaults.overrides.known_choices), {d.config_path: d.package for d in defaults.defaults}


def _held(key: str, read: set[str]) -> bool:
    return any(key == r or key.startswith(f"{r}.") or r.startswith(f"{key}.") for r in read)


def unread_overrides(cfg: DictConfig, overrides: Sequence[str], config_name: str = "config") -> list[str]:
    """The overrides of `overrides` (a command line's, as Hydra records them) that no stage of `cfg` reads."""
    keys = declared(cfg)
    return [] if keys is None else _unread(cfg, overrides, keys, config_name)


def _unread(cfg: DictConfig, overrides: Sequence[str], keys: list[str], config_name: str) -> list[str]:
    read = read_keys(cfg, keys)
    groups, places = _places(overrides, config_name)
    unread = []
    for override in OverridesParser.create().parse_overrides(list(overrides)):
        key = override.key_or_group
        if key in groups:
            key = places.get(f"{key}/{override.get_value_element_as_str()}") or ""
        if key and not _held(key, read):  # "": a group placed at the root, or one Hydra cannot place: read
            unread.append(override.input_line)
    return unread


def warn_unread_overrides(cfg: DictConfig) -> None:
    """One warning naming the overrides of this command line that the run's stages do not read (nothing outside
    Hydra: an in-process run has no command line)."""
    keys = declared(cfg) if HydraConfig.initialized() else None
    if keys is None:
        return
    hc = HydraConfig.get()
    unread = _unread(cfg, list(hc.overrides.task), keys, hc.job.config_name or "config")
    if unread:
        log.warning(
            "stage=%s does not read %s: ignored (its stages read %s, what those refer to, and the keys every run "
            "reads: vtlab/runs/reads.py)",
            OmegaConf.select(cfg, "stage.name", default="?"),
            ", ".join(unread),
            ", ".join(keys),
        )
