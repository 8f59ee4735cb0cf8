"""The one reader of a YAML record vtlab did not write in this process (a run's `.hydra/config.yaml` and
`overrides.yaml`, read back by export, reuse and the report): as data, and bounded. A record Hydra writes is a few
kilobytes of plain mappings; a crafted one can expand without bound when read (YAML aliases, `&a [*a, *a]` nested:
each level doubles what OmegaConf copies) or when resolved (interpolations `${a}${a}` nested: each level doubles the
string). Refused here with RecordError naming the file, before anything expands:

- a file over MAX_RECORD_BYTES;
- a YAML alias (`*name`): Hydra never writes one;
- a string whose interpolations of other keys would resolve to more than MAX_RESOLVED_CHARS characters."""

from __future__ import annotations

import os
import re
from functools import cache
from typing import Any

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf

from vtlab.core.errors import VtlabError

MAX_RECORD_BYTES = 4 * 1024 * 1024
MAX_RESOLVED_CHARS = 1_000_000
_REF = re.compile(r"\$\{([A-Za-z0-9_.\-]+)\}")  # a plain reference to another key (`${paths.run_dir}`)


class RecordError(VtlabError, ValueError):
    """A record that cannot be read as one: the message names the file and what is wrong."""


@cache
def _loader() -> type:
    from omegaconf._utils import get_yaml_loader  # OmegaConf.load's own loader: the same types, tags refused

    class NoAliases(get_yaml_loader()):  # type: ignore[misc]
        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                what = f"holds a YAML alias (*{event.anchor}), which a run's record never does"
                raise yaml.composer.ComposerError(None, None, what, event.start_mark)
            return super().compose_node(parent, index)

    return NoAliases


def load_record(path: str | os.PathLike[str]) -> DictConfig | ListConfig:
    """`path` read as OmegaConf.load reads it, within the bounds above; RecordError naming it otherwise (OSError for
    a file that cannot be opened, as OmegaConf.load)."""
    size = os.path.getsize(path)
    if size > MAX_RECORD_BYTES:
        raise RecordError(f"{path}: {size:,} bytes, over the {MAX_RECORD_BYTES:,} a run's record can hold")
    with open(path, encoding="utf-8") as f:
        try:
            data = yaml.load(f, Loader=_loader())  # noqa: S506 - a SafeLoader subclass
        except yaml.YAMLError as e:
            raise RecordError(f"{path}: {' '.join(str(e).split())}") from None
    if data is not None and not isinstance(data, (dict, list, str)):
        raise RecordError(f"{path}: a YAML {type(data).__name__}, not a mapping of config keys")
    config = OmegaConf.create(data if data is not None else {})
    if isinstance(config, DictConfig):
        _check_expansion(path, OmegaConf.to_container(config, resolve=False))
    return config


def _check_expansion(path: str | os.PathLike[str], data: Any) -> None:
    """RecordError when a string's plain `${key}` references, followed, would resolve to more than
    MAX_RESOLVED_CHARS characters (a reference cycle is left to OmegaConf, which refuses it)."""
    flat: dict[str, Any] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{prefix}{k}" if not prefix else f"{prefix}.{k}")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{prefix}.{i}" if prefix else str(i))
        else:
            flat[prefix] = node

    walk(data, "")
    sizes: dict[str, int] = {}
    visiting: set[str] = set()

    def size(key: str) -> int:
        if key in sizes:
            return sizes[key]
        value = flat.get(key)
        if not isinstance(value, str) or "${" not in value or key in visiting:
            return len(str(value)) if key in flat else 0
        visiting.add(key)
        total = len(_REF.sub("", value)) + sum(size(ref) for ref in _REF.findall(value))
        visiting.discard(key)
        sizes[key] = total
        if total > MAX_RESOLVED_CHARS:
            raise RecordError(
                f"{path}: {key} would resolve to {total:,} characters through its interpolations, over the "
                f"{MAX_RESOLVED_CHARS:,} a run's record holds"
            )
        return total

    for key in flat:
        size(key)
