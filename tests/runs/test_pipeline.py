"""End-to-end runs through the Hydra config: training, checkpoint selection, evaluation files, CLI evaluation."""

import json

import pytest
from helpers import compose_config, run_vtlab

from vtlab.stages.pipeline import run

pytestmark = pytest.mark.usefixtures("shared_cache")  # BoolQ collections and tiny backbones are built once

SMALL_DEV = ["data.dev.dev_size=20", "data.dev.max_docs=100", "data.eval_batch_size=32"]
SMALL_EVAL = ["+eval.collection.max_queries=40", "+eval.collection.max_docs=150"]


@pytest.mark.train
def test_fast_dev_run_tiny_modernbert(tmp_path):
    """One training and one validation batch of a random ModernBERT with the real OLMo tokenizer, then evaluation."""
    cfg = compose_config(
        [
            "backbone=tiny-modernbert",
            "vocab=native",
            "apc=off",
            "baseline=false",
            "logger=none",
            f"paths.run_dir={tmp_path}",
            "+trainer.fast_dev_run=true",
            "data.batch_size=4",
            "data.doc_max_length=64",
            *SMALL_DEV,
            *SMALL_EVAL,
        ]
    )
    state = run(cfg)
    assert state["trainer"].global_step == 1
    assert state["encoder"].vocab_size == 50368
    metrics = json.loads((tmp_path / "eval" / "boolq-clean" / "metrics.json").read_text())
    assert metrics["collection"]["n_queries"] == 40
    assert (tmp_path / "model" / "config.json").exists()


@pytest.mark.train
def test_short_training_keeps_best_checkpoint_and_evaluates_it(tmp_path):
    cfg = compose_config(
        [
            "backbone=splade-tiny",
            "vocab=native",
            "apc=off",
            "logger=csv",
            f"paths.run_dir={tmp_path}",
            "trainer.max_steps=6",
            "trainer.val_check_interval=3",
            "trainer.log_every_n_steps=1",
            "data.batch_size=4",
            "data.doc_max_length=128",
            *SMALL_DEV,
            *SMALL_EVAL,
        ]
    )
    state = run(cfg)
    ckpts = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert "last.ckpt" in ckpts and any(p.startswith("best-step") for p in ckpts)
    assert state["checkpoint"].endswith(".ckpt") and "best-step" in state["checkpoint"]
    # per-step training metrics and the dev retrieval metrics were logged to CSV
    header = (tmp_path / "csv" / "metrics.csv").read_text().splitlines()[0].split(",")
    for key in (
        "train/loss",
        "train/rank_loss",
        "train/reg_q",
        "train/lambda_d",
        "train/doc_active_dims",
        "val/nDCG@10",
        "val/R@10",
        "val/query_active_dims",
    ):
        assert key in header, key
    assert (tmp_path / "csv" / "curves.png").read_bytes()[:4] == b"\x89PNG"  # drawn when fitting ended
    # run file and metrics of the final evaluation
    out = tmp_path / "eval" / "boolq-clean"
    metrics = json.loads((out / "metrics.json").read_text())
    assert 0.0 < metrics["metrics"]["nDCG@10"] <= 1.0
    lines = (out / "run.trec").read_text().splitlines()
    assert len(lines) > 0 and len(lines[0].split()) == 6


@pytest.mark.cli
@pytest.mark.slow
def test_cli_evaluate_splade_tiny_on_boolq_beats_bm25(tmp_path):
    """`python -m vtlab stage=evaluate backbone=splade-tiny vocab=native eval=boolq` — the real model vs BM25."""
    res = run_vtlab(
        "stage=evaluate",
        "backbone=splade-tiny",
        "vocab=native",
        "eval=boolq",
        "logger=none",
        f"hydra.run.dir={tmp_path}",
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    for key in ("nDCG@10", "RR@10", "R@100", "query active dims", "doc active dims", "FLOPS"):
        assert key in res.stdout
    splade = json.loads((tmp_path / "eval" / "boolq" / "metrics.json").read_text())["metrics"]
    assert (tmp_path / "eval" / "boolq" / "run.trec").exists()

    from vtlab.data.boolq import boolq_collection
    from vtlab.data.mining import BM25Index
    from vtlab.evaluation import compute_metrics

    col = boolq_collection("validation")
    doc_ids, qids = list(col.corpus), list(col.queries)
    idx, scores = BM25Index([col.corpus[d] for d in doc_ids]).search([col.queries[q] for q in qids], 100)
    run_bm25 = {q: {doc_ids[j]: float(s) for j, s in zip(idx[i], scores[i])} for i, q in enumerate(qids)}
    bm25 = compute_metrics(run_bm25, col.qrels, ["nDCG@10", "RR@10", "R@100"])
    assert splade["nDCG@10"] > bm25["nDCG@10"] + 0.03
    assert splade["RR@10"] > bm25["RR@10"]
    # the published sanity numbers for these two systems (offline-assets.md): 0.834 vs 0.766
    assert splade["nDCG@10"] == pytest.approx(0.834, abs=0.01)
    assert 5 < splade["query_active_dims"] < 60 and 50 < splade["doc_active_dims"] < 400


@pytest.mark.train
def test_default_pipeline_is_vocabulary_transfer(tmp_path):
    """No vocab/init/apc overrides: SPLADE-tiny → BoolQ WordPiece (init=auto → subword) → APC → fine-tune → evaluate,
    with the untransferred model evaluated alongside."""
    cfg = compose_config(
        [
            "logger=none",
            f"paths.run_dir={tmp_path}",
            "trainer.max_steps=2",
            "trainer.val_check_interval=2",
            "data.batch_size=4",
            "data.doc_max_length=64",
            "apc.num_docs=64",
            "apc.max_length=64",
            *SMALL_DEV,
            *SMALL_EVAL,
        ]
    )
    state = run(cfg)
    assert state["encoder"].vocab_size == cfg.vocab.vocab_size == 20000
    assert len(state["encoder"].tokenizer) == 20000
    apc = json.loads((tmp_path / "apc_report.json").read_text())
    assert apc["include_zeros"] is False and apc["after"]["mean_active_per_doc"] < apc["before"]["mean_active_per_doc"]
    out = tmp_path / "eval" / "boolq-clean"
    baseline = json.loads((out / "baseline_metrics.json").read_text())
    assert 0 < baseline["nDCG@10"] <= 1 and json.loads((out / "metrics.json").read_text())["metrics"]["nDCG@10"] > 0
