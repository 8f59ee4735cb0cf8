"""precision=auto's probe is timed as its own row (`choose_precision_s`, "choosing precision"), never as encoding: the
first evaluation of a model pays it, a second evaluation of the same weights on the same CPU reads the cached result and
runs no probe."""

import logging
import time

import pytest

import vtlab.runtime.policy as policy_module
from vtlab.backbones import Backbone
from vtlab.data.boolq import probe_texts
from vtlab.data.collections import Collection
from vtlab.evaluation.outputs import results_table
from vtlab.evaluation.retrieval import evaluate
from vtlab.models.encoder import SpladeEncoder
from vtlab.runtime import precision as prec

PROBE_S = 0.4  # each faked trial of the probe takes this long


def _collection() -> Collection:
    corpus = {f"d{i}": f"passage {i} about the river and the city of number {i}" for i in range(40)}
    queries = {f"q{i}": f"river city {i}" for i in range(20)}
    return Collection("toy", corpus, queries, {f"q{i}": {f"d{i}": 1} for i in range(20)})


@pytest.fixture
def probed(monkeypatch):
    """auto with int8 and fp32 as candidates on any CPU, each trial sleeping PROBE_S; records the trials run."""
    calls = []

    def trial(self, owner, p, queries, docs, reference):
        calls.append(p)
        time.sleep(PROBE_S)
        return prec.Trial(p, 100.0, None if p == "fp32" else prec.Agreement(0.5, 0.5))  # int8 fails: fp32 runs

    monkeypatch.delenv(prec.AUTO_ENV, raising=False)
    monkeypatch.setattr(prec, "auto_candidates", lambda device="cpu", flags=None: ("int8", "fp32"))
    monkeypatch.setattr(policy_module, "int8_unavailable", lambda: None)
    monkeypatch.setattr(policy_module.ComputePolicy, "_probe_trial", trial)
    encode = SpladeEncoder.encode

    def encoding(self, texts, side="doc", *args, **kwargs):
        calls.append(f"encode {side}")
        return encode(self, texts, side, *args, **kwargs)

    monkeypatch.setattr(SpladeEncoder, "encode", encoding)
    return calls


@pytest.mark.usefixtures("empty_cache")
def test_the_probe_is_its_own_row_and_runs_once_per_model_and_cpu(probed, caplog):
    def encoder():
        return SpladeEncoder.from_backbone(
            Backbone("asset:splade-tiny"), precision="auto", doc_max_length=32, probe=probe_texts
        )

    with caplog.at_level(logging.INFO, logger="vtlab"):
        first = evaluate(encoder(), _collection(), show_progress=False)
    # the probe runs, and is timed, before the timed encoding: never booked as encoding queries
    assert probed == ["fp32", "int8", "encode query", "encode doc"]
    assert first["choose_precision_s"] >= 2 * PROBE_S
    assert any(r.getMessage().startswith("choosing precision") for r in caplog.records)
    table = results_table(first, title="toy")
    labels = [str(c) for c in table.columns[0]._cells]
    assert labels.index("choosing precision") < labels.index("encode queries")
    second = evaluate(encoder(), _collection(), show_progress=False)  # same weights, a new process would do the same
    assert probed[4:] == ["encode query", "encode doc"]  # read from the cache: no probe
    assert second["choose_precision_s"] < PROBE_S and second["nDCG@10"] == first["nDCG@10"]
