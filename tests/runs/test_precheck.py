"""A command line's mistakes answered in a second (vtlab.runs.precheck): one `vtlab: error:` line and exit 2 before
torch or Lightning is imported; an accepted run's first line names the directory Hydra then writes."""

from __future__ import annotations

import resource
from pathlib import Path

import pytest
from helpers import child_env, one_error_line, run_vtlab

from vtlab.__main__ import LOADING
from vtlab.core.paths import CONF_DIR
from vtlab.runs.precheck import checked, first_line, sweep_size
from vtlab.runs.steps import NO_DEV_SET

SLURM_SWEEP = [
    "-m",
    "experiment=paper/main/modernbert-vt,paper/main/modernbert-native",
    "hydra/launcher=slurm",
    "hydra.launcher.partition=gpu",
]
# the five mistakes, each with what its line must name
MISTAKES = {
    "misspelt key": (["regularizer.doc.weigth=1e-3"], ["regularizer.doc.weigth", "regularizer.doc.weight"]),
    "misspelt choice": (["vocab=bert-uncasd"], ["vocab=bert-uncasd", "vocab=bert-uncased"]),
    "+ on an existing key": (["+trainer.max_steps=10"], ["trainer.max_steps", "without the leading +"]),
    "no such eval key": (["eval.path=/nope"], ["eval.path"]),
    "no such eval directory": (["eval=beir", "eval.path=/nope"], ["eval.path='/nope'", "expected a BEIR directory"]),
    "--cfg with a sweep": ([*SLURM_SWEEP, "--cfg", "job"], ["--cfg", "-m"]),
}


@pytest.mark.parametrize("name", MISTAKES)
def test_each_mistake_is_one_line_in_process(name: str) -> None:
    argv, needles = MISTAKES[name]
    problem, composed = checked(argv, CONF_DIR)
    assert problem is not None and composed is None
    assert "\n" not in problem and all(n in problem for n in needles), problem


def test_a_sweep_is_checked_value_by_value() -> None:
    problem, _ = checked(["-m", "seed=0,1", "trainer.max_steps=5,abc"], CONF_DIR)
    assert problem is not None and "trainer.max_steps='abc'" in problem
    problem, first = checked(["-m", "seed=0,1", "trainer.max_steps=5,6"], CONF_DIR)
    assert problem is None and first is not None and first.seed == 0 and first.trainer.max_steps == 5
    assert sweep_size(["-m", "seed=0,1,2", "trainer.max_steps=5,6", "vocab=native"]) == 6


def test_an_accepted_run_is_composed_with_its_run_dir() -> None:
    problem, cfg = checked(["stage=evaluate", "hydra.run.dir=/tmp/somewhere"], CONF_DIR)
    assert problem is None and cfg is not None and str(cfg.paths.run_dir) == "/tmp/somewhere"
    _, cfg = checked(["paths.run_dir=/tmp/elsewhere"], CONF_DIR)
    assert str(cfg.paths.run_dir) == "/tmp/elsewhere"
    assert checked(["stage=evaluate", "--cfg", "job"], CONF_DIR) == (None, None)  # Hydra prints it; nothing runs


def _without_torch(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """An environment where importing torch or Lightning leaves a marker and fails."""
    fake, marker = tmp_path / "fake", tmp_path / "imported"
    for name in ("torch", "pytorch_lightning", "transformers"):
        (fake / name).mkdir(parents=True)
        (fake / name / "__init__.py").write_text(
            f"open({str(marker)!r}, 'a').write({name!r} + '\\n')\nraise ImportError('{name} imported')\n"
        )
    env = child_env(fake)
    return env, marker


@pytest.mark.cli
@pytest.mark.parametrize("name", MISTAKES)
def test_each_mistake_exits_2_before_torch_is_imported(tmp_path: Path, name: str) -> None:
    argv, needles = MISTAKES[name]
    env, marker = _without_torch(tmp_path)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = run_vtlab(*argv, cwd=tmp_path, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert proc.returncode == 2, proc.stderr[-2000:]
    one_error_line(proc.stderr, needles)
    assert not marker.exists(), marker.read_text()
    assert not (tmp_path / "outputs").exists()
    # CPU seconds, not wall: the same on a loaded machine (wall on 2 idle cores: docs/bad-inputs-runs.md)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert cpu <= 2.0, cpu


@pytest.mark.cli
def test_the_first_line_names_the_directory_hydra_writes(tmp_path: Path) -> None:
    """trainer.precision's choices are Lightning's: the precheck lets it through, the first line is printed, Hydra
    makes the directory that line names, and the admission refuses the value there."""
    proc = run_vtlab("stage=evaluate", "trainer.precision=bogus", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    first = proc.stdout.splitlines()[0]
    assert first.startswith("vtlab: evaluate-") and "; writing to outputs/runs/" in first, first
    run_dir = tmp_path / first.split("; writing to ")[1]
    assert (run_dir / ".hydra" / "config.yaml").is_file()
    assert [p.name for p in (tmp_path / "outputs" / "runs").glob("*/*")] == [run_dir.name]
    one_error_line(proc.stderr, ["trainer.precision='bogus'"])


@pytest.mark.parametrize("value", ["outputs/runs/x-a,b=c", "a'b\\c d", "x\\", "a\\'b", "o'", "[1, 2]"])
def test_a_pinned_run_dir_reads_back_as_itself(value: str) -> None:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from vtlab.core.overrides import quoted

    assert OverridesParser.create().parse_overrides([f"hydra.run.dir={quoted(value)}"])[0].value() == value


def _finished_run(root: Path) -> Path:
    """A run directory whose evaluation finished (its metrics.json)."""
    run_dir = root / "finished-run"
    (run_dir / "eval" / "set").mkdir(parents=True)
    (run_dir / "eval" / "set" / "metrics.json").write_text("{}")
    return run_dir


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_a_finished_run_dir_and_a_beir_folder_without_qrels_are_refused_by_the_precheck(tmp_path: Path) -> None:
    run_dir = _finished_run(tmp_path)
    beir = tmp_path / "beir"
    beir.mkdir()
    for name in ("corpus.jsonl", "queries.jsonl"):
        (beir / name).write_text('{"_id": "a", "text": "x"}\n')
    before = _tree(tmp_path)
    for argv, needles in (
        (["stage=evaluate", f"hydra.run.dir={run_dir}"], [str(run_dir), "is finished", "overwrite=true"]),
        (["stage=evaluate", "eval=beir", f"eval.path={beir}"], ["eval.path=", "qrels/<split>.tsv"]),
    ):
        problem, composed = checked(argv, CONF_DIR)
        assert problem is not None and composed is None, argv
        assert "\n" not in problem and all(n in problem for n in needles), problem
    assert checked(["stage=evaluate", f"hydra.run.dir={run_dir}", "overwrite=true"], CONF_DIR)[0] is None
    assert _tree(tmp_path) == before


@pytest.mark.cli
def test_a_finished_run_dir_rerun_exits_2_before_torch_is_imported(tmp_path: Path) -> None:
    run_dir = _finished_run(tmp_path)
    env, marker = _without_torch(tmp_path)
    before = _tree(run_dir)
    proc = run_vtlab("stage=evaluate", f"hydra.run.dir={run_dir}", cwd=tmp_path, env=env)
    assert proc.returncode == 2, proc.stderr[-2000:]
    one_error_line(proc.stderr, [str(run_dir), "is finished"])
    assert proc.stdout == "" and not marker.exists()
    assert _tree(run_dir) == before and not (tmp_path / "outputs").exists()


def test_the_first_line_names_only_the_steps_that_run() -> None:
    """stage=all with mlm.steps=0 (the no-MLM variant: the MLM stage does nothing) does not announce `mlm`."""
    lines = {}
    for steps in (0, 5):
        _, cfg = checked(["stage=all", f"mlm.steps={steps}", "hydra.run.dir=/tmp/somewhere"], CONF_DIR)
        lines[steps] = first_line(cfg)
    assert ": finetune → evaluate (" in lines[0] and "mlm" not in lines[0], lines[0]
    assert ": mlm → finetune → evaluate (" in lines[5], lines[5]


@pytest.mark.cli
def test_an_accepted_run_says_it_is_loading_before_torch_is_imported(tmp_path: Path) -> None:
    """After the first line, one line on stderr says what loads, before torch is imported: the fake torch below
    writes its own line to stderr when imported (and fails), so the order of the two lines in one stream tells."""
    fake = tmp_path / "fake" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("import sys\nprint('FAKE TORCH IMPORTED', file=sys.stderr)\nraise ImportError\n")
    proc = run_vtlab(
        "stage=evaluate", f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path, env=child_env(tmp_path / "fake")
    )
    assert proc.stdout.startswith("vtlab: evaluate-"), proc.stdout
    lines = proc.stderr.splitlines()
    assert "FAKE TORCH IMPORTED" in lines, proc.stderr[-2000:]
    assert lines[0] == LOADING and lines.index(LOADING) < lines.index("FAKE TORCH IMPORTED")


def test_the_first_line_of_a_training_run_says_its_size() -> None:
    _, cfg = checked(
        ["stage=finetune", "trainer.max_steps=50", "data.batch_size=8", "trainer.val_check_interval=10"], CONF_DIR
    )
    assert ": finetune (50 steps of 8 triplets, dev every 10 batches); writing to " in first_line(cfg)
    _, cfg = checked(["stage=finetune", "trainer.limit_val_batches=0", "trainer.accumulate_grad_batches=4"], CONF_DIR)
    assert (
        f"({cfg.trainer.max_steps} steps of {cfg.data.batch_size} triplets x 4 batches, no dev evaluation)"
        in first_line(cfg)
    )
    _, cfg = checked(["stage=evaluate"], CONF_DIR)
    assert ": evaluate; writing to " in first_line(cfg)  # no training: no size


def test_the_first_line_says_when_there_is_no_dev_set(tmp_path: Path) -> None:
    """Own triplets without data.dev_path: the run's first line (printed before torch) says that the last step's
    weights are the ones evaluated; with a dev set it names the dev interval instead."""
    triplets = tmp_path / "train.jsonl"
    triplets.write_text('{"query": "q", "pos": "p", "neg": ["n"]}\n')
    own = ["stage=finetune", "data=jsonl", f"data.train.path={triplets}", "trainer.val_check_interval=10"]
    _, cfg = checked(own, CONF_DIR)
    assert f", {NO_DEV_SET}); writing to " in first_line(cfg)
    _, one = checked([*own, "trainer.max_steps=1"], CONF_DIR)
    assert f"(1 step of {one.data.batch_size} triplets, {NO_DEV_SET})" in first_line(one)
    assert "last step's weights are evaluated" in NO_DEV_SET
    beir = tmp_path / "dev"
    for name, text in (
        ("corpus.jsonl", '{"_id": "d", "text": "p"}\n'),
        ("queries.jsonl", '{"_id": "q", "text": "q"}\n'),
    ):
        beir.mkdir(exist_ok=True)
        (beir / name).write_text(text)
    (beir / "qrels").mkdir()
    (beir / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\nq\td\t1\n")
    _, cfg = checked([*own, f"data.dev_path={beir}"], CONF_DIR)
    assert "dev every 10 batches); writing to " in first_line(cfg) and NO_DEV_SET not in first_line(cfg)
