"""What `stage=export run_dir=R` needs of R, read before torch loads: the model directory a training run leaves, R's
recorded name (the first line names R's own config), and, for a run that saved no model (stage=evaluate evaluates the
model its config builds and saves none), the config that builds that model again.

That config is vtlab's own conf/ composed with R's recorded command line, checked as data first
(vtlab.runs.recorded_overrides: shipped choices and keys, no `_target_`, no interpolation), and the export command's
`model.encoder.*` overrides on top, as for a trained run's encoder settings (vtlab/export/run_config.py); R's resolved
.hydra/config.yaml is not what the model is built from. Where R's model cannot be rebuilt so (its model directory is
gone, or it opted into a model's own Python code), one line prints the command that exports it instead."""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from pathlib import Path

import yaml
from hydra import compose
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from vtlab.core.assets import looks_like_path
from vtlab.core.errors import ConfigError, first_line
from vtlab.core.overrides import key
from vtlab.core.records import RecordError, load_record
from vtlab.runs.recorded_overrides import checked_overrides, overrides_file, recorded_overrides, shipped_conf

# what the export command line sets of a rebuilt model, on top of R's: its encoder settings
COMMAND_KEYS = ("model.encoder",)


def model_dir_of(run_dir: Path) -> Path | None:
    """The Hugging Face directory of a run: <run_dir>/model (what fine-tuning writes), or run_dir itself; None."""
    return next((d for d in (run_dir / "model", run_dir) if (d / "config.json").is_file()), None)


def _record(path: Path) -> object:
    try:
        return load_record(path)
    except (OSError, ValueError, yaml.YAMLError, OmegaConfBaseException, RecursionError, RecordError):
        return None


def recorded_name(run_dir: Path) -> str | None:
    """The `name` R's .hydra/config.yaml records (read as data), or None."""
    record = _record(run_dir / ".hydra" / "config.yaml")
    name = OmegaConf.select(record, "name", default=None) if isinstance(record, DictConfig) else None
    return name if isinstance(name, str) else None


def export_command(run_dir: Path) -> str | None:
    """`python -m vtlab stage=export <R's recorded overrides but RUN_KEYS>`: the export of the model R's evaluation
    built; None without a .hydra/overrides.yaml."""
    overrides = recorded_overrides(run_dir)
    return None if overrides is None else shlex.join(["python", "-m", "vtlab", "stage=export", *overrides])


def no_model(run_dir: Path, why: str | None = None) -> ConfigError:
    """The one line for `run_dir=R` that holds no model to export: naming R and, where R recorded its command line,
    why its model is not rebuilt here (`why`) and the command that exports it."""
    command = export_command(run_dir)
    if command is None:
        return ConfigError(
            f"run_dir={run_dir}: no model/config.json (the model a training run writes), no config.json in the "
            "directory itself and no .hydra/overrides.yaml to build the model it evaluated from",
            key="run_dir",
        )
    return ConfigError(
        f"run_dir={run_dir}: no model/ (it evaluated the model its config builds and saved none) and "
        f"{why or 'that model is not rebuilt here'}; export that model with: {command}",
        key="run_dir",
    )


def rebuild_problem(cfg: DictConfig) -> str | None:
    """Why the model of `cfg` (composed from a run's record) is not built here as the run built it, or None: a local
    model directory that is gone or holds no config.json (an exported folder), or the run's opt-in to a model's own
    Python code (backbone.allow_remote_code: never taken from a record)."""
    try:
        name = OmegaConf.select(cfg, "backbone.name_or_path", default=None)
        allow = OmegaConf.select(cfg, "backbone.allow_remote_code", default=False)
    except OmegaConfBaseException as e:
        return f"its backbone does not resolve ({first_line(e)})"
    if allow:
        return "it opted into the model's own Python code (backbone.allow_remote_code), which no record turns on"
    if not isinstance(name, str) or name.startswith("asset:"):
        return None
    local = os.path.expanduser(name)
    if os.path.exists(local):
        has_config = (Path(local) / "config.json").is_file()
        return None if has_config else f"backbone.name_or_path={name} holds no config.json (no model directory)"
    return f"backbone.name_or_path={name} is not there any more" if looks_like_path(name) else None


def evaluated_config(run_dir: Path, command: Sequence[str] = ()) -> DictConfig:
    """The config of the model R evaluated, as `stage=export`: conf/ composed with R's checked recorded overrides and
    `command`'s COMMAND_KEYS overrides on top. no_model's line where R recorded no command line or its model is not
    rebuilt from it (rebuild_problem); ConfigError naming R's overrides.yaml where its overrides do not compose."""
    overrides = checked_overrides(run_dir)
    if overrides is None:
        raise no_model(run_dir)
    own = [o for o in command if key(o).startswith(tuple(f"{k}." for k in COMMAND_KEYS))]
    kept = [o for o in overrides if key(o) not in {key(c) for c in own}]
    try:
        with shipped_conf():
            cfg = compose("config", overrides=[*kept, "stage=export", *own])
    except (HydraException, OmegaConfBaseException) as e:
        raise ConfigError(
            f"{overrides_file(run_dir)}: does not compose with vtlab's config ({first_line(e)})", key="run_dir"
        ) from None
    if (why := rebuild_problem(cfg)) is not None:
        raise no_model(run_dir, why)
    return cfg


def check_export_source(cfg: DictConfig) -> None:
    """For a `run_dir` (an existing directory) without a model: the config of the model it evaluated composes from
    its record (evaluated_config, with this command line's overrides), else one line says why."""
    source = OmegaConf.select(cfg, "run_dir", default=None)
    if source and Path(str(source)).is_dir() and model_dir_of(Path(str(source))) is None:
        command = OmegaConf.select(cfg, "hydra.overrides.task", default=None)
        evaluated_config(Path(str(source)), [str(o) for o in command or ()])


def export_banner(cfg: DictConfig) -> str:
    """Who the first line names: `run_dir=R`'s recorded name and record, else this config's name."""
    source = OmegaConf.select(cfg, "run_dir", default=None)
    if not source:
        return str(cfg.name)
    return (
        f"{recorded_name(Path(str(source))) or Path(str(source)).name} ({Path(str(source)) / '.hydra' / 'config.yaml'})"
    )
