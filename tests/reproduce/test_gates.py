"""The testbed's sanity gates (vtlab/reproduce/gates.py) and the subsampled evaluation collections they run on."""

import pytest

from vtlab.core.errors import DataError
from vtlab.data.collections import Collection, subsampled
from vtlab.reproduce import gates


def _case(groups, cosine, mass):
    return {"case_groups": groups, "row_cosine": cosine, "doc_mass_on_variants": mass}


UNCASED = _case(0, None, 0.0)


def test_case_gate_passes_a_cased_bpe_model_and_an_uncased_control():
    assert gates.check_case({"M_wp": UNCASED, "M_unc": UNCASED, "M_bpe": _case(8000, 0.8, 0.05)}) is None
    # at the documented bounds: cosine strictly below MAX_CASE_ROW_COSINE, mass at least MIN_CASE_MASS, one group
    edge = _case(1, gates.MAX_CASE_ROW_COSINE - 1e-9, gates.MIN_CASE_MASS)
    assert gates.check_case({"M_wp": UNCASED, "M_unc": UNCASED, "M_bpe": edge}) is None
    with pytest.raises(gates.GateError, match="did not learn to differ"):
        gates.check_case({"M_wp": UNCASED, "M_unc": UNCASED, "M_bpe": _case(1, gates.MAX_CASE_ROW_COSINE, 0.05)})


@pytest.mark.parametrize(
    "report, words",
    [
        ({"M_wp": _case(12, 0.5, 0.01), "M_unc": UNCASED, "M_bpe": _case(8000, 0.8, 0.05)}, "M_wp's vocabulary has 12"),
        ({"M_wp": UNCASED, "M_unc": UNCASED, "M_bpe": _case(8000, 1.0, 0.05)}, "did not learn to differ"),  # FVT copies
        (
            {"M_wp": UNCASED, "M_unc": UNCASED, "M_bpe": _case(0, None, 0.0)},
            "did not learn to differ",
        ),  # no case variants
        ({"M_wp": UNCASED, "M_unc": UNCASED, "M_bpe": _case(8000, 0.8, 0.001)}, "0.0010 of its document term mass"),
    ],
)
def test_case_gate_fails_loudly_on_a_broken_testbed(report, words):
    with pytest.raises(gates.GateError, match=words):
        gates.check_case(report)


def test_quality_gate_needs_the_uncased_control_above_bm25():
    with pytest.raises(gates.GateError, match="0.7000, not above BM25's 0.7200"):
        gates.check_quality(0.70, 0.72)
    assert gates.check_quality(0.80, 0.72) == {"wp_native": 0.80, "bm25": 0.72}


def _coll():
    corpus = {f"d{i}": f"text {i}" for i in range(100)}
    queries = {f"q{i}": f"query {i}" for i in range(20)}
    qrels = {f"q{i}": {f"d{i}": 1, f"d{i + 50}": 1} for i in range(20)}
    return Collection("toy", corpus, queries, qrels)


def test_subsampled_keeps_every_judged_document_of_the_kept_queries_and_is_seeded():
    c = subsampled(_coll, max_docs=30, max_queries=5, seed=1)
    assert len(c.queries) == 5 and set(c.qrels) == set(c.queries) and len(c.corpus) == 30
    assert all(d in c.corpus for rel in c.qrels.values() for d in rel)
    assert subsampled(_coll, max_docs=30, max_queries=5, seed=1).corpus == c.corpus
    assert subsampled(_coll, max_docs=30, max_queries=5, seed=2).corpus != c.corpus
    whole = subsampled(_coll())
    assert whole.corpus == _coll().corpus and whole.qrels == _coll().qrels
    with pytest.raises(DataError, match="max_docs=0"):
        subsampled(_coll, max_docs=0)


def test_subsampled_leaves_as_many_distractors_as_golds_when_asked():
    # 20 queries × 2 judged documents = 40 golds; 30 documents with one distractor per gold leave room for 15 golds
    c = subsampled(_coll, max_docs=30, seed=3, distractors_per_gold=1.0)
    golds = {d for rel in c.qrels.values() for d, g in rel.items() if g > 0}
    assert len(c.corpus) == 30 and len(c.corpus) - len(golds) >= len(golds)
    assert len(c.queries) == 7 and all(d in c.corpus for d in golds)  # 7 queries × 2 = 14 ≤ 15 < 16
    assert subsampled(_coll, max_docs=30, seed=3, distractors_per_gold=1.0).queries == c.queries
    assert subsampled(_coll, max_docs=30, seed=4, distractors_per_gold=1.0).queries != c.queries
    unasked = subsampled(_coll, max_docs=30, seed=3)  # the old behaviour: golds may crowd the distractors out
    assert len(unasked.queries) == 20 and len(unasked.corpus) == 40
    with pytest.raises(DataError, match="distractors_per_gold=-1"):
        subsampled(_coll, max_docs=30, distractors_per_gold=-1)


SPEC = {"dataset": "boolq-clean-dev", "measure": "nDCG@10"}


ARMS = ("testbed-e5-vt", "testbed-e5-lowercase-masked", "testbed-e5-native")


def test_learning_gate_passes_at_the_reference_and_makes_the_table_exploratory_below_it(capsys):
    passed = gates.check_learning(dict.fromkeys(ARMS, 0.8351), "testbed-bm25", 0.8351, SPEC)
    assert passed["passed"] and passed["exploratory"] is None and capsys.readouterr().err == ""
    failed = gates.check_learning(
        {"testbed-e5-vt": 0.8190, "testbed-e5-lowercase-masked": 0.8400, "testbed-e5-native": 0.8351},
        "testbed-bm25",
        0.8351,
        SPEC,
    )
    assert not failed["passed"] and failed["rows"]["testbed-e5-vt"] == 0.8190 and failed["reference_score"] == 0.8351
    assert failed["margins"]["testbed-e5-vt"] == pytest.approx(0.8190 - 0.8351)
    line = capsys.readouterr().err.strip()
    assert "\n" not in line and line.startswith(
        "vtlab: learning gate: testbed-e5-vt 0.8190 (−0.0161)".replace("−", "-")
    )
    assert "testbed-e5-lowercase-masked" not in line and "testbed-e5-native" not in line  # only the arms below
    assert "0.8351" in line and "no verdicts" in line and failed["exploratory"] in line


@pytest.mark.parametrize("arm", ARMS)
def test_the_learning_gate_fails_when_any_gate_arm_is_below_bm25(arm, capfd):
    # either arm of the primary contrast (or e5 as is) below BM25 on dev: the table is exploratory, the arm named
    scores = {a: 0.86 for a in ARMS} | {arm: 0.8350}
    result = gates.check_learning(scores, "testbed-bm25", 0.8351, SPEC)
    assert not result["passed"] and arm in result["exploratory"] and "(-0.0001)" in result["exploratory"]
    err = capfd.readouterr().err
    assert [a for a in ARMS if a in err] == [arm]


def test_the_real_case_gate_reads_both_primary_arms_and_e5_as_is():
    from vtlab.reproduce.learning import gate_rows
    from vtlab.reproduce.tables import composed, row_name

    rows = gate_rows("testbed", "real-case")
    primary = list(composed(rows[0]).report.primary)
    assert {row_name(r) for r in rows} == {*primary, "testbed-e5-native"}


def test_a_failed_learning_gate_marks_the_table_and_a_passed_one_removes_an_old_mark(tmp_path):
    from vtlab.report.discovery import read_exploratory
    from vtlab.reproduce import mark_exploratory

    mark_exploratory(tmp_path, "learning gate: below BM25")
    assert read_exploratory(tmp_path) == "learning gate: below BM25"
    mark_exploratory(tmp_path, None)
    assert read_exploratory(tmp_path) is None


def test_the_control_gate_reads_the_average_over_the_collections(tmp_path):
    import json

    from vtlab.reproduce import row_metric

    for num, values in enumerate([{"a": 0.9, "b": 0.5}, {"a": 0.7, "b": 0.3}]):
        job = tmp_path / str(num)
        (job / ".hydra").mkdir(parents=True)
        (job / ".hydra" / "overrides.yaml").write_text(f"- seed={num}\n")
        (job / "status.json").write_text(json.dumps({"status": "done", "name": "testbed-wp-native"}))
        for name, value in values.items():
            (job / "eval" / name).mkdir(parents=True)
            (job / "eval" / name / "metrics.json").write_text(json.dumps({"metrics": {"nDCG@10": value}}))
    assert row_metric(tmp_path, "testbed-wp-native", dataset=None) == pytest.approx(0.6)  # mean of 0.7 and 0.5
    assert row_metric(tmp_path, "testbed-wp-native", dataset="a") == pytest.approx(0.8)


def _job(sweep, num: int, name: str, values: dict) -> None:
    import json

    job = sweep / str(num)
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "overrides.yaml").write_text("- seed=0\n")
    (job / "status.json").write_text(json.dumps({"status": "done", "name": name}))
    for dataset, value in values.items():
        (job / "eval" / dataset).mkdir(parents=True)
        (job / "eval" / dataset / "metrics.json").write_text(json.dumps({"metrics": {"nDCG@10": value}}))


@pytest.mark.parametrize(("qasper", "fails"), [(0.27, False), (0.26, True)])
def test_the_control_gate_also_reads_the_set_no_selection_saw(tmp_path, qasper, fails):
    # the average passes (wp-native +0.03 over SPLADE-tiny); Qasper, which no dev choice saw, decides
    from vtlab.reproduce import _check_gates

    _job(tmp_path / "main", 0, "testbed-wp-native", {"boolq-clean": 0.95, "qasper": qasper})
    _job(tmp_path / "references", 0, "testbed-splade-tiny", {"boolq-clean": 0.90, "qasper": 0.2750})
    _job(tmp_path / "references", 1, "testbed-bm25", {"boolq-clean": 0.87, "qasper": 0.28})
    if fails:
        with pytest.raises(gates.GateError, match=r"qasper nDCG@10 \(a set no selection saw\) 0\.2600, 0\.0150 below"):
            _check_gates(tmp_path, ["references", "main"])
    else:
        result = _check_gates(tmp_path, ["references", "main"])
        assert result["control:qasper"] == {"wp_native": 0.27, "as_is": 0.275} and result["control"]["as_is"] < 0.6
