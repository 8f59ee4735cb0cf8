"""Evaluation suites (per-dataset folders + averages), run status for sweeps, results to loggers."""

import json

import pytest
from pytorch_lightning.loggers import CSVLogger
from test_evaluation import TOY, VOCAB, BagOfWords  # tests/ is on sys.path (rootdir conftest)

from vtlab.core.errors import VtlabError
from vtlab.data.collections import Collection
from vtlab.evaluation import EvaluationSuite, RetrievalEvaluation, average
from vtlab.runs.status import RunStatus, error_line, read_status
from vtlab.tracking.loggers import log_results


def test_suite_writes_each_dataset_and_averages(tmp_path):
    half = Collection(name="half", corpus=TOY.corpus, queries=dict(list(TOY.queries.items())[:1]), qrels=TOY.qrels)
    suite = EvaluationSuite({"toy": RetrievalEvaluation(TOY), "half": RetrievalEvaluation(half)})
    results = suite(BagOfWords(VOCAB), out_dir=tmp_path, show_progress=False)
    assert list(results) == ["toy", "half"]
    for name in results:
        saved = json.loads((tmp_path / name / "metrics.json").read_text())
        assert saved["metrics"]["nDCG@10"] == results[name]["nDCG@10"]
    avg = average(results)
    assert avg["nDCG@10"] == pytest.approx((results["toy"]["nDCG@10"] + results["half"]["nDCG@10"]) / 2)
    with pytest.raises(VtlabError, match="empty"):
        EvaluationSuite({})


def test_average_only_over_datasets_reporting_a_key():
    assert average({"a": {"x": 1.0, "y": 3.0}, "b": {"x": 2.0}}) == {"x": 1.5, "y": 3.0}


def test_run_status_lifecycle_and_user_error_description(tmp_path):
    status = RunStatus(tmp_path, name="row", overrides=["seed=1"])
    status.start()
    assert read_status(tmp_path)["status"] == "running"
    try:
        try:
            raise VtlabError("data.train.path='x.jsonl' does not exist")
        except VtlabError:
            raise SystemExit(2)  # what run_or_exit does after printing the line
    except SystemExit as exc:
        status.fail(exc)
    record = read_status(tmp_path)
    assert record["status"] == "failed" and record["overrides"] == ["seed=1"]
    assert record["error"] == "data.train.path='x.jsonl' does not exist"
    assert error_line(RuntimeError("boom\nsecond line")) == "RuntimeError: boom second line"
    RunStatus(tmp_path / "ok", name="row").done()
    assert read_status(tmp_path / "ok")["status"] == "done"


def test_results_reach_non_wandb_loggers(tmp_path):
    logger = CSVLogger(save_dir=str(tmp_path), name="csv", version="")
    log_results([logger], {"boolq": {"nDCG@10": 0.5, "flops": 1.25}}, tmp_path)
    header, row = (tmp_path / "csv" / "metrics.csv").read_text().splitlines()[:2]
    values = dict(zip(header.split(","), row.split(",")))
    assert float(values["eval/boolq/nDCG@10"]) == 0.5 and float(values["eval/boolq/flops"]) == 1.25
