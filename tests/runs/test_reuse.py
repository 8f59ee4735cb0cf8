"""vtlab.runs.reuse: an ablation row that repeats a main-table row reuses that finished run instead of recomputing
it."""

import json
from pathlib import Path

import pytest
from helpers import compose_config
from omegaconf import OmegaConf

from vtlab import reproduce
from vtlab.runs.plan import run_plan
from vtlab.runs.reuse import MARKER, find_equal_run, reuse_training
from vtlab.stages import pipeline


def cfg_for(*overrides):
    return compose_config(overrides)


def finished_job(sweep: Path, num: int, cfg, status: str = "done", ndcg: float = 0.42) -> Path:
    """A job directory as `python -m vtlab -m` leaves it: the recorded config, status.json, results, a checkpoint."""
    job = sweep / str(num)
    (job / ".hydra").mkdir(parents=True)
    OmegaConf.save(cfg, job / ".hydra" / "config.yaml")
    (job / "status.json").write_text(json.dumps({"status": status}))
    (job / "eval" / "boolq").mkdir(parents=True)
    (job / "eval" / "boolq" / "metrics.json").write_text(json.dumps({"metrics": {"nDCG@10": ndcg}}))
    (job / "apc_report.json").write_text("{}")
    (job / "checkpoints").mkdir()
    (job / "checkpoints" / "last.ckpt").write_bytes(b"weights")
    return job


@pytest.fixture
def main_sweep(tmp_path: Path) -> Path:
    sweep = tmp_path / "main"
    finished_job(sweep, 0, cfg_for("experiment=testbed/main/wp-native"), ndcg=0.55)
    finished_job(sweep, 1, cfg_for("experiment=testbed/main/bpe-vt"), ndcg=0.35)
    return sweep


def test_the_ablations_default_value_is_the_main_row(main_sweep):
    # testbed/ablation-init's config differs from testbed/main/bpe-vt only in labels (name, group, report,
    # selection.arm) for init=semantic-pmi
    cfg = cfg_for("experiment=testbed/ablation-init", "init=semantic-pmi", f"reuse_runs=['{main_sweep}']")
    assert find_equal_run(cfg, [main_sweep]) == main_sweep / "1"
    apc = cfg_for("experiment=testbed/ablation-apc", "apc=p60-sparse")
    assert find_equal_run(apc, [main_sweep]) == main_sweep / "1"


@pytest.mark.parametrize("override", ["init=mean", "apc=p90-term", "seed=1", "trainer.max_steps=101"])
def test_any_other_setting_is_not_reused(main_sweep, override):
    assert find_equal_run(cfg_for("experiment=testbed/ablation-init", override), [main_sweep]) is None


@pytest.mark.parametrize("status", ["failed", "running"])
def test_only_finished_runs_are_reused(tmp_path, status):
    sweep = tmp_path / "main"
    finished_job(sweep, 0, cfg_for("experiment=testbed/main/bpe-vt"), status=status)
    assert find_equal_run(cfg_for("experiment=testbed/ablation-init"), [sweep]) is None


@pytest.mark.train
def test_pipeline_copies_the_results_and_runs_no_stage(main_sweep, tmp_path):
    run_dir = tmp_path / "ablation" / "0"
    cfg = cfg_for("experiment=testbed/ablation-init", f"reuse_runs=['{main_sweep}']", f"paths.run_dir={run_dir}")
    state = pipeline.run(cfg)  # no model exists offline for this row without pretraining: any stage would take minutes
    assert state == {"reused_from": main_sweep / "1"}
    assert json.loads((run_dir / "eval" / "boolq" / "metrics.json").read_text())["metrics"]["nDCG@10"] == 0.35
    assert (run_dir / "apc_report.json").is_file()
    assert not (run_dir / "checkpoints").exists() and not (run_dir / "status.json").exists()
    assert (run_dir / MARKER).read_text().strip() == str((main_sweep / "1").resolve())
    # the copy is a finished run: the same run dir is not run into again
    with pytest.raises(Exception, match="is finished"):
        pipeline.run(cfg)


def test_reproduce_lets_the_ablations_reuse_the_main_table(tmp_path):
    sweeps = reproduce.sweeps("testbed", 1, ["main", "ablation-init", "ablation-apc"], tmp_path)
    assert not any(o.startswith("reuse_runs=") for o in sweeps["main"])
    for table in ("ablation-init", "ablation-apc"):
        assert sweeps[table][-1] == f"reuse_runs=['{(tmp_path / 'main').resolve()}']"
    # without the main table in this invocation there is nothing to reuse
    alone = reproduce.sweeps("testbed", 1, ["ablation-init"], tmp_path)["ablation-init"]
    assert not any(o.startswith("reuse_runs=") for o in alone)


def test_a_run_that_differs_only_in_eval_takes_the_training_not_the_evaluation(tmp_path):
    # the testbed's selection job (scored on dev) at the chosen setting is the table's seed 0 (scored on the test sets)
    sweep = tmp_path / "select"
    trained = cfg_for("experiment=testbed/main/unc-native", "eval=testbed-dev", "model.optimizer.lr=0.0005")
    src = finished_job(sweep, 0, trained)
    (src / "model").mkdir()
    (src / "model" / "config.json").write_text("{}")
    run_dir = tmp_path / "main" / "0"
    run_dir.mkdir(parents=True)
    cfg = cfg_for("experiment=testbed/main/unc-native", f"reuse_runs=['{sweep}']", f"paths.run_dir={run_dir}")
    assert find_equal_run(cfg, [sweep]) is None  # not the same run: its evaluation differs
    assert reuse_training(run_plan(cfg)) == src
    assert (run_dir / "model" / "config.json").is_file() and (run_dir / "apc_report.json").is_file()
    assert not (run_dir / "eval").exists() and not (run_dir / "checkpoints").exists()
    assert (run_dir / MARKER).read_text().strip() == str(src.resolve())


@pytest.mark.parametrize("override", ["model.optimizer.lr=0.001", "seed=1", "stage=evaluate"])
def test_training_is_reused_only_when_everything_but_eval_is_equal(tmp_path, override):
    sweep = tmp_path / "select"
    src = finished_job(
        sweep, 0, cfg_for("experiment=testbed/main/unc-native", "eval=testbed-dev", "model.optimizer.lr=0.0005")
    )
    (src / "model").mkdir()
    (src / "model" / "config.json").write_text("{}")
    cfg = cfg_for(
        "experiment=testbed/main/unc-native",
        "model.optimizer.lr=0.0005",
        override,
        f"reuse_runs=['{sweep}']",
        f"paths.run_dir={tmp_path / 'run'}",
    )
    assert reuse_training(run_plan(cfg)) is None


def test_a_run_without_a_saved_model_is_not_taken_for_its_training(tmp_path):
    sweep = tmp_path / "select"
    finished_job(sweep, 0, cfg_for("experiment=testbed/main/unc-native", "eval=testbed-dev"))
    cfg = cfg_for("experiment=testbed/main/unc-native", f"reuse_runs=['{sweep}']", f"paths.run_dir={tmp_path / 'r'}")
    assert reuse_training(run_plan(cfg)) is None


@pytest.mark.train
@pytest.mark.usefixtures("shared_cache")
def test_the_reused_training_is_evaluated_as_the_run_that_trained_it(tmp_path):
    """Real training (2 steps of SPLADE-tiny), then a run that differs only in eval: it trains nothing and its
    evaluation of the copied model equals the first run's own evaluation of the same set."""
    from test_export_run import write_beir

    beir = write_beir(tmp_path / "facts", "f")
    common = [
        "backbone=splade-tiny",
        "vocab=native",
        "apc=off",
        "mlm.steps=0",
        # one precision on every CPU kind: auto's per-model timing choice could differ between the two evaluations
        "model.encoder.precision=fp32",
        "trainer.max_steps=2",
        "trainer.val_check_interval=2",
        "trainer.limit_val_batches=0",
        "data.batch_size=2",
        "logger=none",
        "baseline=false",
        "eval=beir",
        f"eval.path={beir}",
    ]
    first = tmp_path / "select" / "0"
    pipeline.run(cfg_for(*common, f"paths.run_dir={first}"))
    (first / "status.json").write_text(json.dumps({"status": "done"}))  # as vtlab.__main__ leaves a finished job
    OmegaConf.save(cfg_for(*common, f"paths.run_dir={first}"), first / ".hydra" / "config.yaml")
    second = tmp_path / "main" / "0"
    state = pipeline.run(
        cfg_for(*common, "eval.name=facts-again", f"reuse_runs=['{tmp_path / 'select'}']", f"paths.run_dir={second}")
    )
    assert state["reused_training_from"] == first and "trainer" not in state
    assert not (second / "checkpoints").exists() and (second / MARKER).is_file()
    ours = json.loads((second / "eval" / "facts-again" / "metrics.json").read_text())["metrics"]
    theirs = json.loads((first / "eval" / "facts" / "metrics.json").read_text())["metrics"]
    assert ours["nDCG@10"] == theirs["nDCG@10"] and ours["doc_active_dims"] == theirs["doc_active_dims"]
