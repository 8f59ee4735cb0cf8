"""What `stage=export run_dir=R` needs of R, read before torch loads: the model directory a training run leaves, R's
recorded name (the first line names R's own config), and, for a run that saved no model (stage=evaluate evaluates the
model its config builds and saves none), the command that exports that model.

Why a command and not the export itself: R's record is data (vtlab/export/safe_config.py), and export builds no
backbone or vocabulary from it; the command rebuilds the model from vtlab's own config with R's recorded overrides,
as R's evaluation did, and the user sees what runs."""

from __future__ import annotations

import shlex
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from vtlab.core.errors import ConfigError
from vtlab.core.overrides import key
from vtlab.core.records import RecordError, load_record

# overrides of R that say how R ran, not which model it evaluated: left out of the export command
RUN_KEYS = ("stage", "paths", "overwrite", "resume", "reuse_runs", "run_dir", "hydra")


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
    built; None without a readable .hydra/overrides.yaml."""
    record = _record(run_dir / ".hydra" / "overrides.yaml")
    if record is None or not OmegaConf.is_list(record):
        return None
    overrides = [str(o) for o in record]
    kept = [o for o in overrides if key(o).split(".", 1)[0] not in RUN_KEYS]
    return shlex.join(["python", "-m", "vtlab", "stage=export", *kept])


def no_model(run_dir: Path) -> ConfigError:
    """The one line for `run_dir=R` that holds no model to export: naming R and, where R recorded its command line,
    the command that exports the model it evaluated."""
    command = export_command(run_dir)
    if command is None:
        return ConfigError(
            f"run_dir={run_dir}: no model/config.json (the model a training run writes) and no config.json in the "
            "directory itself",
            key="run_dir",
        )
    return ConfigError(
        f"run_dir={run_dir}: no model/ (it evaluated the model its config builds and saved none); export that model "
        f"with: {command}",
        key="run_dir",
    )


def check_export_source(cfg: DictConfig) -> None:
    """no_model's line for a `run_dir` (an existing directory) without a model."""
    source = OmegaConf.select(cfg, "run_dir", default=None)
    if source and Path(str(source)).is_dir() and model_dir_of(Path(str(source))) is None:
        raise no_model(Path(str(source)))


def export_banner(cfg: DictConfig) -> str:
    """Who the first line names: `run_dir=R`'s recorded name and record, else this config's name."""
    source = OmegaConf.select(cfg, "run_dir", default=None)
    if not source:
        return str(cfg.name)
    return (
        f"{recorded_name(Path(str(source))) or Path(str(source)).name} ({Path(str(source)) / '.hydra' / 'config.yaml'})"
    )
