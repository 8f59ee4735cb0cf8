"""Training-health callbacks on SPLADE-tiny: a dead start (decoder bias −30) and a dense start (+30) are caught by
the preflight and stopped by the collapse detector; a healthy start is left alone and its health metrics are logged."""

import json
import warnings
from pathlib import Path

import pytest
import torch
from helpers import compose_config

from vtlab.callbacks.collapse_detector import CollapseDetector
from vtlab.callbacks.health import margin, mean_pairwise_cosine
from vtlab.callbacks.health_monitor import HealthMonitor
from vtlab.callbacks.preflight import PreflightCheck
from vtlab.core.errors import VtlabError
from vtlab.stages import finetune

pytestmark = pytest.mark.usefixtures("shared_cache")
MAX_STEPS = 8
PATIENCE = 4


def fit(run_dir: Path, shift: float = 0.0, batch_size: int = 4, patience: int = PATIENCE, extra: tuple = ()):
    """A short SPLADE-tiny run with the default callbacks; `shift` is added to the decoder bias before fitting."""
    overrides = [
        "backbone=splade-tiny",
        "vocab=native",
        "apc=off",
        "logger=csv",
        f"paths.run_dir={run_dir}",
        "stage=finetune",
        f"trainer.max_steps={MAX_STEPS}",
        "trainer.limit_val_batches=0",
        "trainer.log_every_n_steps=1",
        f"data.batch_size={batch_size}",
        "data.query_max_length=16",
        "data.doc_max_length=32",
        "data.dev.dev_size=20",
        "data.dev.max_docs=100",
        "+data.train.max_examples=200",
        "~callbacks.progress_bar",
        f"callbacks.collapse_detector.patience={patience}",
        *extra,
    ]
    cfg = compose_config(overrides)
    module = finetune.build_module(cfg)
    biases = {id(b): b for b in (module.encoder.output_bias("doc"), module.encoder.output_bias("query"))}
    for bias in biases.values():  # a shared (siamese) encoder has one bias: shift it once
        bias.data += shift
    trainer = finetune.run(cfg, {"module": module})["trainer"]
    by_type = {type(c): c for c in trainer.callbacks}
    return trainer, by_type[PreflightCheck], by_type[CollapseDetector]


def test_bad_action_names_the_config_key():
    with pytest.raises(VtlabError, match="callbacks.collapse_detector.action"):
        CollapseDetector(action="explode")


def test_statistics_on_toy_vectors():
    same = torch.ones(3, 5)
    assert mean_pairwise_cosine(same) == pytest.approx(1.0)
    assert mean_pairwise_cosine(torch.zeros(3, 5)) == 0.0
    q = torch.tensor([[1.0, 0, 0], [0, 1.0, 0]])
    d = torch.tensor([[2.0, 0, 0], [1.0, 0, 0], [0, 3.0, 0], [0, 0, 1.0]])  # q0: pos 2, neg 1; q1: pos 3, neg 0
    assert margin(q, d, group_size=2) == pytest.approx((1 + 3) / 2)


@pytest.mark.train
def test_dead_start_is_stopped_with_a_diagnosis(tmp_path):
    with pytest.warns(UserWarning, match="DEAD START"):
        trainer, pre, det = fit(tmp_path, shift=-30.0)
    assert pre.report["status"] == "dead" and pre.report["doc_active_dims"] == 0.0
    assert trainer.global_step < MAX_STEPS
    report = json.loads((tmp_path / "collapse.json").read_text())
    assert report["kind"] == "dead" and report["side"] == "both"
    assert report["first_collapsed_step"] == 0 and report["step"] == PATIENCE - 1
    assert report["last_healthy_step"] is None
    assert "apc=p60" in report["diagnosis"] and "bias" in report["diagnosis"]
    assert (tmp_path / "collapse.ckpt").is_file()
    assert det.fired == report


@pytest.mark.train
def test_dense_start_is_caught_by_preflight_and_stopped(tmp_path):
    with pytest.warns(UserWarning, match="SATURATED START.*apc=p60"):
        # a dense start backpropagates through all 30k terms of every text (~4 s a step here): keep it to 2 steps
        trainer, pre, det = fit(tmp_path, shift=30.0, batch_size=2, patience=2)
    assert pre.report["status"] == "dense"
    assert pre.report["doc_active_share"] > 0.9 and pre.report["query_active_share"] > 0.9
    assert pre.report["doc_cosine"] > 0.95
    assert trainer.global_step < MAX_STEPS
    report = json.loads((tmp_path / "collapse.json").read_text())
    assert report["kind"] == "dense" and "dense_doc" in report["kinds"] and report["step"] == 1
    assert "vocab=bert-uncased init=semantic" in report["diagnosis"]
    assert (tmp_path / "collapse.ckpt").is_file()


@pytest.mark.train
def test_healthy_start_trains_through_and_logs_health(tmp_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer, pre, det = fit(tmp_path)
    assert not [w for w in caught if "vtlab preflight" in str(w.message) or "vtlab collapse" in str(w.message)]
    assert pre.report["status"] == "ok"
    assert 1 < pre.report["query_active_dims"] < 100 and pre.report["doc_active_share"] < 0.05
    assert det.fired is None and not (tmp_path / "collapse.json").exists()
    assert trainer.global_step == MAX_STEPS and det.last_healthy_step == MAX_STEPS - 1
    lines = (tmp_path / "csv" / "metrics.csv").read_text().splitlines()
    header = lines[0].split(",")
    for key in (
        "health/query_active_dims",
        "health/doc_active_dims",
        "health/flops",
        "health/never_active_share",
        "health/margin",
        "health/preflight_doc_active_dims",
        "health/preflight_doc_cosine",
    ):
        assert key in header, key


def test_health_monitor_never_active_window():
    class Module:
        last_batch: dict = {}

        def log_dict(self, metrics, **kwargs):
            self.logged = metrics

    mon, mod = HealthMonitor(window=2), Module()
    for active in ([0], [1], [2]):  # only the last two steps count
        d = torch.zeros(2, 4)
        d[0, active] = 1.0
        mod.last_batch = {"q": torch.ones(1, 4), "d": d, "group_size": 2}
        mon.on_train_batch_end(None, mod, None, None, 0)
    assert mod.logged["health/never_active_share"] == pytest.approx(0.5)
    assert mod.logged["health/flops"] == pytest.approx(0.5)  # p_q = 1 everywhere, p_d = 1/2 on one term


def test_warn_action_warns_once_per_kind_and_keeps_training(tmp_path):
    from types import SimpleNamespace

    trainer = SimpleNamespace(
        global_step=0, world_size=1, is_global_zero=True, default_root_dir=str(tmp_path), should_stop=False
    )
    module = SimpleNamespace(last_batch={"q": torch.zeros(2, 8), "d": torch.zeros(4, 8), "group_size": 2})
    det = CollapseDetector(action="warn", patience=2)
    with pytest.warns(UserWarning, match="dead collapse") as record:
        for step in range(5):
            trainer.global_step = step
            det.on_train_batch_start(trainer, module, None, step)
            det.on_train_batch_end(trainer, module, None, None, step)
    assert len([w for w in record if "vtlab collapse" in str(w.message)]) == 1
    assert not trainer.should_stop and det.fired["kind"] == "dead" and det.fired["step"] == 1
    assert json.loads((tmp_path / "collapse.json").read_text())["action"] == "warn"
    assert not (tmp_path / "collapse.ckpt").exists()


@pytest.mark.train
def test_dead_start_recipe_is_rescued_by_apc(tmp_path):
    """The same collapse-prone start as `experiment=collapse-dead` (start=dead: bias −30), now with apc=p60: APC runs
    after the shift, so training starts with ~40% of (doc, term) max-logits positive and never collapses."""
    apc = ("start=dead", "start.num_docs=16", "start.max_length=32", "apc=p60", "apc.num_docs=64", "apc.max_length=32")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer, pre, det = fit(tmp_path, extra=apc)
    assert not [w for w in caught if "vtlab collapse" in str(w.message)]
    start = json.loads((tmp_path / "start_shift" / "apc_report.json").read_text())
    assert start["cutoff"] == 30.0 and start["after"]["mean_active_per_doc"] == 0.0  # the start really was dead
    assert pre.report["status"] == "ok" and 0.2 < pre.report["doc_active_share"] < 0.5
    assert det.fired is None and trainer.global_step == MAX_STEPS
    rows = [
        dict(zip(lines[0].split(","), r.split(",")))
        for lines in [(tmp_path / "csv" / "metrics.csv").read_text().splitlines()]
        for r in lines[1:]
    ]
    dims = [float(r["health/doc_active_dims"]) for r in rows if r.get("health/doc_active_dims")]
    assert dims and min(dims) > 100  # alive at every step
