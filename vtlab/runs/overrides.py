"""A misspelt key or an unknown group choice on the command line, caught before Hydra composes: one line naming it with
the closest valid keys or choices, never Hydra's advice to add the misspelt key with `+`."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig

from vtlab.core.errors import hidden_character, visible

# flags that hand the command to Hydra for something else than a run, and flags that take the next argument
_LEAVE = {"--help", "-h", "--hydra-help", "--info", "-i", "--shell-completion", "-sc", "--version"}
_TAKES_VALUE = {
    "--cfg",
    "-c",
    "--package",
    "-p",
    "--config-path",
    "-cp",
    "--config-name",
    "-cn",
    "--config-dir",
    "-cd",
    "--experimental-rerun",
    "--resolve",
}


def command_line_overrides(argv: Sequence[str]) -> list[str] | None:
    """The overrides of a `python -m vtlab` command line; None when a flag asks Hydra for help or information."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in _LEAVE or arg.split("=", 1)[0] in _LEAVE:
            return None
        elif arg in _TAKES_VALUE:
            skip = True
        elif not arg.startswith("-"):
            out.append(arg)
    return out


def _choices(group_dir: Path) -> list[str]:
    return sorted(str(p.relative_to(group_dir).with_suffix("")) for p in group_dir.rglob("*.yaml"))


def _keys(node: Any, prefix: str = "") -> Iterable[str]:
    if isinstance(node, DictConfig):
        for key in node.keys():
            full = f"{prefix}{key}"
            yield full
            yield from _keys(node._get_node(key), f"{full}.")  # noqa: SLF001 - no resolution of interpolations


def _suggest(word: str, candidates: Iterable[str]) -> list[str]:
    return difflib.get_close_matches(word, list(candidates), n=3, cutoff=0.75)


def _missing(cfg: DictConfig, key: str) -> bool:
    node: Any = cfg
    for part in key.split("."):
        if not isinstance(node, DictConfig):
            return False  # a key below a value: Hydra's own message says so
        if part not in node.keys():  # `in node` is False for a key whose value is still ??? (to be given)
            return True
        node = node._get_node(part)  # noqa: SLF001
    return False


def bad_override(argv: Sequence[str], conf_dir: Path, config_name: str = "config") -> str | None:
    """One line for the first override that names no config key or no group choice (with the closest valid ones);
    None when every override names something that exists (or the line is not a run: Hydra answers it)."""
    overrides = command_line_overrides(argv)
    if not overrides:
        return None
    for o in overrides:
        if (where := hidden_character(o)) is not None:
            return f"{visible(o)}: holds a control or format character ({where}), which no value takes; retype it"
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException:
        return None  # a syntax error: Hydra's own message shows where
    dirs, extra = [conf_dir], []
    for o in parsed:  # config directories added with hydra.searchpath extend the groups (docs/architecture.md)
        if o.key_or_group == "hydra.searchpath" and not o.is_delete():
            extra.append(o.input_line)
            value = o.value()
            dirs += [Path(str(v).removeprefix("file://")) for v in (value if isinstance(value, list) else [value])]
    groups: list[str] = []
    keys: list[str] = []
    for o in parsed:
        name = o.key_or_group
        if o.is_add() or o.is_force_add() or o.is_delete() or name.split(".")[0].split("/")[0] == "hydra":
            continue
        values = list(o.sweep_string_iterator()) if o.is_sweep_override() else [o.get_value_element_as_str()]
        group_dirs = [d / name for d in dirs if (d / name).is_dir()]
        if group_dirs:
            choices = sorted({c for g in group_dirs for c in _choices(g)})
            for value in values:
                if value != "null" and value not in choices:
                    near = _suggest(value, choices)
                    hint = (
                        f"did you mean {' or '.join(f'{name}={n}' for n in near)}?"
                        if near
                        else (f"choices: {', '.join(choices[:12])}")
                    )
                    return f"{name}={value}: no such choice in conf/{name}/ ({hint})"
            groups.append(f"{name}={values[0]}")
        else:
            keys.append(name)
    if not keys:
        return None
    try:
        with initialize_config_dir(str(conf_dir), version_base="1.3"):
            cfg = compose(config_name, overrides=[*extra, *groups])
    except HydraException:
        return None  # Hydra reports what fails with the group choices themselves
    for key in keys:
        if _missing(cfg, key):
            keys_of = list(_keys(cfg))
            near = _suggest(key, [k for k in keys_of if k.count(".") == key.count(".")]) or _suggest(key, keys_of)
            hint = f"did you mean {' or '.join(near)}?" if near else "see docs/configuration.md"
            return f"{key}: no such config key ({hint})"
    return None
