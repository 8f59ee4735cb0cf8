"""A run's recorded command line (<run_dir>/.hydra/overrides.yaml) read as data, to compose vtlab's own config again
with it: what `stage=export run_dir=R` rebuilds the model of an evaluate-only run from (vtlab.runs.export_source).

A run's record chooses among the configs vtlab ships and sets values; it names no code and expands nothing. So the file
is read bounded (vtlab.core.records), the overrides that say how R ran (RUN_KEYS) are left out, and each one kept must
be a single override of Hydra's grammar (at most MAX_OVERRIDES, each at most MAX_OVERRIDE_CHARS characters) that
- chooses an option conf/<group>/ ships or sets a key the shipped config has (vtlab.runs.overrides.bad_override;
  hydra.* is left out, so no config directory of R's is ever searched);
- sets no Hydra instantiation key (`_target_`, `_args_`, ...) and holds none in its value;
- holds no interpolation (`${...}`) anywhere in its value: a recorded value is used as written, never expanded.
Otherwise RecordedOverrideError names the file, the override and what was expected (one line, exit 2)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from vtlab.core.errors import ConfigError, first_line
from vtlab.core.overrides import key
from vtlab.core.paths import CONF_DIR
from vtlab.core.records import RecordError, load_record
from vtlab.runs.overrides import bad_override

# overrides of R that say how R ran, not which model it evaluated: left out of what is composed again
RUN_KEYS = ("stage", "paths", "overwrite", "resume", "reuse_runs", "run_dir", "hydra")
# the keys that make Hydra's instantiate call something: never from a record
INSTANTIATION_KEYS = ("_target_", "_args_", "_partial_", "_recursive_", "_convert_")
MAX_OVERRIDES = 256  # a real run's command line is a few dozen
MAX_OVERRIDE_CHARS = 4096  # the longest path a file system takes
_EXPECTED = "expected the overrides.yaml a vtlab run writes"
_NO_CODE = "expected config choices and values only (a run's record names no code)"


def overrides_file(run_dir: Path) -> Path:
    return run_dir / ".hydra" / "overrides.yaml"


def recorded_overrides(run_dir: Path) -> list[str] | None:
    """R's recorded overrides less RUN_KEYS, as written (unchecked: what a command printed for the user shows); None
    without a .hydra/overrides.yaml. ConfigError naming the file when it is no list of at most MAX_OVERRIDES strings."""
    path = overrides_file(run_dir)
    if not path.is_file():
        return None
    try:
        record = load_record(path)
    except RecordError as e:  # names the file
        raise ConfigError(f"{e}: {_EXPECTED}") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError, OmegaConfBaseException, RecursionError) as e:
        raise ConfigError(f"{path}: not readable ({type(e).__name__}: {first_line(e)}): {_EXPECTED}") from None
    if not OmegaConf.is_list(record) or len(record) > MAX_OVERRIDES:
        what = f"{len(record)} entries" if OmegaConf.is_list(record) else f"a YAML {type(record).__name__}"
        raise ConfigError(f"{path}: {what}, not a list of at most {MAX_OVERRIDES} overrides: {_EXPECTED}")
    items = OmegaConf.to_container(record, resolve=False)
    for item in items:
        if not isinstance(item, str) or len(item) > MAX_OVERRIDE_CHARS:
            shown = f"{item[:60]!r}... ({len(item):,} characters)" if isinstance(item, str) else repr(item)[:80]
            raise ConfigError(
                f"{path}: {shown}: expected an override of at most {MAX_OVERRIDE_CHARS} characters ({_EXPECTED})"
            )
    return [o for o in items if key(o).split(".", 1)[0] not in RUN_KEYS]


def checked_overrides(run_dir: Path) -> list[str] | None:
    """recorded_overrides, each checked by the rules above; None without a .hydra/overrides.yaml."""
    overrides = recorded_overrides(run_dir)
    if overrides is None:
        return None
    path = overrides_file(run_dir)
    parser = OverridesParser.create()
    for text in overrides:
        try:
            parsed = parser.parse_override(text)
        except (HydraException, RecursionError) as e:
            raise ConfigError(f"{path}: {text}: not an override ({first_line(e)}): {_EXPECTED}") from None
        if parsed.is_sweep_override():
            raise ConfigError(f"{path}: {text}: a sweep; expected one value, as a run's own record holds")
        if special := next((k for k in parsed.key_or_group.split(".") if k in INSTANTIATION_KEYS), None):
            raise ConfigError(f"{path}: {text}: sets {special}; {_NO_CODE}")
        value = parsed.value()
        for where, item in _walk(value):
            if item in INSTANTIATION_KEYS and where == "key":
                raise ConfigError(f"{path}: {text}: its value holds {item}; {_NO_CODE}")
            if isinstance(item, str) and "${" in item:
                raise ConfigError(
                    f"{path}: {text}: an interpolation; expected a plain value (a recorded value is used as "
                    "written, never expanded)"
                )
    with hydra_released():
        problem = bad_override(overrides, CONF_DIR)
    if problem is not None:
        raise ConfigError(f"{path}: {problem}")
    return overrides


@contextmanager
def hydra_released() -> Iterator[None]:
    """No Hydra initialized for the block, so that code initializing its own on conf/ runs here too (the running job's
    Hydra, or a test's, is put back after)."""
    from hydra.initialize import get_gh_backup, restore_gh_from_backup

    backup = get_gh_backup()
    GlobalHydra.instance().clear()
    try:
        yield
    finally:
        restore_gh_from_backup(backup)


@contextmanager
def shipped_conf() -> Iterator[None]:
    """Hydra initialized on vtlab's own conf/ alone for the block: no config directory a command line, a test or a
    record added is searched."""
    with hydra_released(), initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        yield


def _walk(value: Any) -> Iterator[tuple[str, Any]]:
    """("key" | "value", each key and leaf) of an override's parsed value (dicts and lists)."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield "key", k
            yield from _walk(v)
    elif isinstance(value, list):
        for v in value:
            yield from _walk(v)
    else:
        yield "value", value
