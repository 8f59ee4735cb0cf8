"""`stage=export` answered before torch loads (vtlab.runs.precheck, vtlab.runs.export_source): an evaluate-only run
(no model/ of its own) gets one line with the command that exports the model it evaluated, and that command builds the
model from the same settings; the first line of an export names the run's own recorded config; `export.out=DIR`
records the command beside DIR, never in a new dated run directory."""

from __future__ import annotations

import shlex
from pathlib import Path

from helpers import compose_config
from omegaconf import OmegaConf

from vtlab.core.paths import CONF_DIR
from vtlab.runs.guard import RunDirInside
from vtlab.runs.precheck import checked, first_line

EVALUATED = ["stage=evaluate", "backbone=splade-tiny", "vocab=native", "apc=off", "logger=none", "name=my-eval"]
# what build_encoder (vtlab/stages/build.py) builds the model from: the same nodes, the same model
MODEL_NODES = ("backbone", "vocab", "init", "transfer", "model.encoder")


def recorded_run(root: Path, overrides: list[str], model: bool = False) -> Path:
    """A run directory as `python -m vtlab <overrides>` leaves it: Hydra's record and an evaluation's metrics (and a
    saved model/ where `model`)."""
    run_dir = root / "run"
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / "eval" / "set").mkdir(parents=True)
    (run_dir / "eval" / "set" / "metrics.json").write_text("{}")
    cfg = compose_config([*overrides, f"paths.run_dir={run_dir}"])
    (run_dir / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    (run_dir / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    if model:
        (run_dir / "model").mkdir()
        (run_dir / "model" / "config.json").write_text("{}")
    return run_dir


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_an_evaluate_only_run_gets_the_command_that_exports_the_model_it_evaluated(tmp_path: Path) -> None:
    run_dir = recorded_run(tmp_path, [*EVALUATED, "model.encoder.doc_max_length=128", "overwrite=true"])
    before = _tree(tmp_path)
    problem, composed = checked(["stage=export", f"run_dir={run_dir}"], CONF_DIR)
    assert composed is None and problem is not None and "\n" not in problem
    assert (
        problem.startswith(f"run_dir={run_dir}: no model/ ") and "export that model with: python -m vtlab " in problem
    )
    assert _tree(tmp_path) == before  # refused before anything is written
    command = shlex.split(problem.split("export that model with: ", 1)[1])
    assert command[:4] == ["python", "-m", "vtlab", "stage=export"] and "overwrite=true" not in command
    exported = compose_config([*command[3:], f"paths.run_dir={tmp_path / 'export'}"])
    recorded = OmegaConf.load(run_dir / ".hydra" / "config.yaml")
    for node in MODEL_NODES:
        assert OmegaConf.to_container(OmegaConf.select(exported, node), resolve=True) == OmegaConf.to_container(
            OmegaConf.select(recorded, node), resolve=True
        ), node
    assert exported.model.encoder.doc_max_length == 128 and exported.name == "my-eval"


def test_the_first_line_of_an_export_names_the_runs_own_config(tmp_path: Path) -> None:
    run_dir = recorded_run(tmp_path, EVALUATED, model=True)
    problem, cfg = checked(["stage=export", f"run_dir={run_dir}"], CONF_DIR)
    assert problem is None
    line = first_line(cfg)
    assert line.startswith(f"vtlab: my-eval ({run_dir}/.hydra/config.yaml): export; writing to {run_dir}/exports/")
    assert cfg.hydra.run.dir == cfg.paths.run_dir and Path(cfg.paths.run_dir).parent == run_dir / "exports"


def test_export_out_records_the_command_beside_it_not_in_a_dated_run_directory(tmp_path: Path) -> None:
    out = tmp_path / "models" / "splade-st"
    problem, cfg = checked(["stage=export", f"export.out={out}"], CONF_DIR)
    assert problem is None and Path(cfg.paths.run_dir).parent == tmp_path / "models" / "exports"
    assert "outputs/runs" not in first_line(cfg)
    # the Hydra callback, on the config Hydra composes for that command line, keeps the directory the line named
    hydra_cfg = compose_config(
        ["stage=export", f"export.out={out}", f"hydra.run.dir={cfg.hydra.run.dir}"], return_hydra_config=True
    )
    guard = hydra_cfg.hydra.callbacks.run_dir_guard
    RunDirInside(source=guard.source, subdir=guard.subdir, out=guard.out).check(hydra_cfg)
    assert hydra_cfg.hydra.run.dir == cfg.hydra.run.dir
    # a command line without a run directory's own: as before, Hydra's dated directory
    _, plain = checked(["stage=export"], CONF_DIR)
    assert str(plain.paths.run_dir).startswith("outputs/runs/")


def test_a_run_dir_that_is_no_directory_is_refused_in_one_line(tmp_path: Path) -> None:
    problem, _ = checked(["stage=export", f"run_dir={tmp_path / 'nope'}"], CONF_DIR)
    assert (
        problem
        == f"run_dir='{tmp_path / 'nope'}': expected an existing directory, or null for the model this config builds"
    )
    assert list(tmp_path.iterdir()) == []
