"""`stage=export` of any run (vtlab.runs.precheck, vtlab.runs.export_source, vtlab.runs.recorded_overrides): an
evaluate-only run (no model/ of its own) exports the model it evaluated, composed again from vtlab's conf/ with its
recorded command line, and its vectors are those of the export with the same overrides given explicitly; a record
that is not a run's own (an unknown choice, a `_target_`, an interpolation) is refused before torch loads in one line
naming the file and the override; a model that is gone gets one line with the command that exports it. The first line
of an export names the run's own recorded config; `export.out=DIR` records the command beside DIR, never in a new
dated run directory."""

from __future__ import annotations

import shlex
import tracemalloc
from pathlib import Path

import pytest
from helpers import compose_config, one_error_line, run_vtlab
from omegaconf import OmegaConf

from vtlab.core.paths import CONF_DIR
from vtlab.runs.export_source import evaluated_config
from vtlab.runs.guard import RunDirInside
from vtlab.runs.precheck import checked, first_line

EVALUATED = ["stage=evaluate", "backbone=splade-tiny", "vocab=native", "apc=off", "logger=none", "name=my-eval"]
# a tiny evaluation of SPLADE-tiny: what the export encodes (R's eval) is 20 documents and 5 queries, in fp32
TINY_EVAL = ["model.encoder.precision=fp32", "+eval.collection.max_docs=20", "+eval.collection.max_queries=5"]
VECTORS = ["export.vectors.formats=[anserini]", "export.vectors.queries=true"]
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


def _same_model(exported, recorded) -> None:
    for node in MODEL_NODES:
        assert OmegaConf.to_container(OmegaConf.select(exported, node), resolve=True) == OmegaConf.to_container(
            OmegaConf.select(recorded, node), resolve=True
        ), node


def test_an_evaluate_only_run_is_composed_again_from_its_record(tmp_path: Path) -> None:
    """The precheck accepts `stage=export run_dir=R` for an evaluate-only R: the config composed from R's recorded
    overrides (its run keys left out) builds R's model, with the command line's model.encoder.* on top."""
    run_dir = recorded_run(tmp_path, [*EVALUATED, "model.encoder.doc_max_length=128", "overwrite=true"])
    before = _tree(tmp_path)
    problem, composed = checked(["stage=export", f"run_dir={run_dir}"], CONF_DIR)
    assert problem is None and composed is not None
    assert first_line(composed).startswith(f"vtlab: my-eval ({run_dir}/.hydra/config.yaml): export; ")
    rebuilt = evaluated_config(run_dir, ["stage=export", f"run_dir={run_dir}", "model.encoder.precision=fp32"])
    recorded = OmegaConf.load(run_dir / ".hydra" / "config.yaml")
    recorded.model.encoder.precision = "fp32"
    _same_model(rebuilt, recorded)
    assert rebuilt.model.encoder.doc_max_length == 128 and rebuilt.name == "my-eval" and not rebuilt.overwrite
    assert _tree(tmp_path) == before  # nothing written


def test_a_model_that_is_gone_gets_the_command_that_exports_it(tmp_path: Path) -> None:
    """R evaluated a model directory that is no longer there: one line, with the command that exports that model,
    which composes R's model from the same settings."""
    gone = tmp_path / "gone-model"
    run_dir = recorded_run(tmp_path, [*EVALUATED, f"backbone.name_or_path={gone}", "overwrite=true"])
    before = _tree(tmp_path)
    problem, composed = checked(["stage=export", f"run_dir={run_dir}"], CONF_DIR)
    assert composed is None and problem is not None and "\n" not in problem
    assert problem.startswith(f"run_dir={run_dir}: no model/ ")
    assert f"backbone.name_or_path={gone} is not there any more" in problem
    assert _tree(tmp_path) == before  # refused before anything is written
    command = shlex.split(problem.split("export that model with: ", 1)[1])
    assert command[:4] == ["python", "-m", "vtlab", "stage=export"] and "overwrite=true" not in command
    exported = compose_config([*command[3:], f"paths.run_dir={tmp_path / 'export'}"])
    _same_model(exported, OmegaConf.load(run_dir / ".hydra" / "config.yaml"))
    assert exported.name == "my-eval"


def _bomb(levels: int = 40) -> list[str]:
    doubling = [f"+k{i}=${{k{i - 1}}}${{k{i - 1}}}" for i in range(1, levels)]  # 2^levels characters, resolved
    return ["+k0=xxxxxxxx", *doubling, f"name=${{k{levels - 1}}}"]


CRAFTED = {
    "unknown choice": (["backbone=my-own"], "backbone=my-own: no such choice in conf/backbone/"),
    "misspelt key": (["model.encoder.doc_max_lenght=9"], "model.encoder.doc_max_lenght: no such config key"),
    "a _target_": (["+model.encoder._target_=builtins.exec"], "+model.encoder._target_=builtins.exec: sets _target_"),
    "a _target_ in a value": (["+x={_target_: os.system}"], "+x={_target_: os.system}: its value holds _target_"),
    "a huge interpolation": (_bomb(), "+k1=${k0}${k0}: an interpolation; expected a plain value"),
    "a sweep": (["vocab=native,subword"], "vocab=native,subword: a sweep; expected one value"),
}


def _crafted(tmp_path: Path, name: str) -> tuple[Path, str]:
    """An evaluate-only run whose recorded command line carries the crafted overrides; the refusal expected."""
    extra, said = CRAFTED[name]
    run_dir = recorded_run(tmp_path, EVALUATED)
    (run_dir / ".hydra" / "overrides.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create([*EVALUATED, *extra])))
    return run_dir, f"{run_dir}/.hydra/overrides.yaml: {said}"


@pytest.mark.parametrize("name", CRAFTED)
def test_a_crafted_record_is_refused_in_one_line_naming_the_file_and_override(tmp_path: Path, name: str) -> None:
    run_dir, said = _crafted(tmp_path, name)
    before = _tree(tmp_path)
    traced = name == "a huge interpolation"  # the case about memory (tracing doubles the check's time)
    if traced:
        tracemalloc.start()
    problem, composed = checked(["stage=export", f"run_dir={run_dir}"], CONF_DIR)
    if traced:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < 64 * 2**20  # nothing expanded
    assert composed is None and problem is not None and problem.startswith(said) and "\n" not in problem, problem
    assert _tree(tmp_path) == before


def test_an_aliased_record_is_refused_naming_the_file(tmp_path: Path) -> None:
    run_dir = recorded_run(tmp_path, EVALUATED)
    bomb = "- &a0 [x, x]\n" + "".join(f"- &a{i} [*a{i - 1}, *a{i - 1}]\n" for i in range(1, 40))
    (run_dir / ".hydra" / "overrides.yaml").write_text(bomb)
    problem, _ = checked(["stage=export", f"run_dir={run_dir}"], CONF_DIR)
    assert problem.startswith(f"{run_dir}/.hydra/overrides.yaml: holds a YAML alias (*a0)"), problem


@pytest.mark.cli
@pytest.mark.parametrize("name", ["a _target_", "a huge interpolation"])
def test_the_export_command_refuses_a_crafted_record_with_one_line(tmp_path: Path, name: str) -> None:
    """As a user runs it: exit 2, one `vtlab: error:` line, before torch loads; nothing written."""
    run_dir, said = _crafted(tmp_path, name)
    before = _tree(tmp_path)
    res = run_vtlab("stage=export", f"run_dir={run_dir}", timeout=120)
    assert res.returncode == 2 and one_error_line(res.stderr).startswith(f"vtlab: error: {said}")
    assert "loading torch" not in res.stderr and _tree(tmp_path) == before


@pytest.mark.cli
@pytest.mark.usefixtures("shared_cache")
def test_an_evaluate_only_run_exports_the_vectors_of_the_explicit_export(tmp_path: Path) -> None:
    """`stage=export run_dir=R` for R = `stage=evaluate backbone=splade-tiny vocab=native ...` (recorded, not run:
    the export reads only R's record) writes R/sparse-encoder and the same document and query vectors, byte for byte,
    as `stage=export backbone=splade-tiny vocab=native ...` with R's overrides given explicitly."""
    from vtlab.stages.pipeline import run

    run_dir = recorded_run(tmp_path, [*EVALUATED, *TINY_EVAL])
    res = run_vtlab("stage=export", f"run_dir={run_dir}", *VECTORS, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert (run_dir / "sparse-encoder" / "modules.json").is_file()
    line = f"export: encoding boolq-clean from {run_dir}/.hydra/config.yaml (eval): 20 documents, 5 queries"
    assert line in res.stdout.splitlines(), res.stdout
    explicit = tmp_path / "explicit"
    run(
        compose_config(
            ["stage=export", *EVALUATED[1:], *TINY_EVAL, *VECTORS, "export.sentence_transformers=false"]
            + [f"paths.run_dir={explicit}"]
        )
    )
    for file in ("anserini/docs.jsonl", "anserini/queries.tsv"):
        ours, theirs = (run_dir / "vectors" / file).read_bytes(), (explicit / "vectors" / file).read_bytes()
        assert ours == theirs and len(ours.splitlines()) == (20 if "docs" in file else 5), file


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
