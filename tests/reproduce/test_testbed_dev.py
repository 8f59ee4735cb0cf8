"""The testbed's dev suite (conf/eval/testbed-dev.yaml) reaches the evaluation's domains without touching the
evaluation: its SQuAD and SciRIFF parts are what the evaluation samples leave over (vtlab/data/splits.py), so no dev
question or passage is an evaluation question or passage or a near-copy of one (vtlab.data.near_duplicates), and no
dev question is judged on such a passage.
The selection reads the mean over the dev collections (`selection.dataset: null`)."""

from pathlib import Path

import pytest
from helpers import CONF, compose_config
from hydra.utils import instantiate
from omegaconf import OmegaConf
from test_report import write_job, write_multirun

from vtlab.core.errors import DataError
from vtlab.data.collections import Collection
from vtlab.data.near_duplicates import near_duplicate_pairs, similar_question_pairs
from vtlab.data.splits import held_out
from vtlab.report.discovery import ReportError
from vtlab.report.selection import choose

pytestmark = pytest.mark.slow

DEV = OmegaConf.load(CONF / "eval" / "testbed-dev.yaml")
TEST = OmegaConf.load(CONF / "eval" / "testbed.yaml")


def _toy() -> Collection:
    corpus = {f"d{i}": f"passage {i}" for i in range(10)}
    queries = {f"q{i}": f"question {i}" for i in range(8)}
    qrels = {f"q{i}": {f"d{i}": 1} for i in range(8)}
    qrels["q7"]["d0"] = 1  # q7 is also judged on d0
    return Collection("toy", corpus, queries, qrels)


def test_held_out_leaves_no_question_or_passage_of_the_excluded_sample():
    full = _toy()
    test = Collection(
        "toy", {d: full.corpus[d] for d in ("d0", "d1", "d8")}, {"q0": "", "q1": ""}, {"q0": {"d0": 1}, "q1": {"d1": 1}}
    )
    dev = held_out(full, test)
    assert dev.name == "toy-dev"
    assert set(dev.corpus) == {f"d{i}" for i in (2, 3, 4, 5, 6, 7, 9)}
    assert set(dev.queries) == {"q2", "q3", "q4", "q5", "q6"}  # q7 is judged on d0, an evaluation passage
    assert dev.qrels == {q: full.qrels[q] for q in dev.queries}
    with pytest.raises(DataError, match="held_out: toy has no question left"):
        held_out(full, full)


def test_the_dev_suite_excludes_exactly_the_evaluation_samples():
    """Each `exclude` node repeats the evaluation's collection node of the same set: a change to one without the other
    would let dev overlap the evaluation."""
    for name, test_set in (("squad-dev", "squad"), ("sciriff-dev", "sciriff")):
        node = DEV.evaluations[name].collection
        exclude = node.exclude if "exclude" in node else node.load.exclude
        assert OmegaConf.to_container(exclude) == OmegaConf.to_container(TEST.evaluations[test_set].collection)


@pytest.fixture(scope="module")
def composed(shared_cache: Path) -> tuple[dict[str, Collection], dict[str, Collection]]:
    """The testbed's evaluation collections and its selection suite's dev collections, composed and instantiated as a
    run does (experiment=testbed/main/wp-native)."""
    cfg = compose_config(["experiment=testbed/main/wp-native", "eval=testbed"])
    dev_cfg = compose_config(["experiment=testbed/main/wp-native", f"eval={cfg.selection.eval}"])
    assert cfg.selection.dataset is None  # the selection reads the dev mean
    tests = {n: instantiate(e.collection)() for n, e in cfg.eval.evaluations.items()}
    devs = {n: instantiate(e.collection)() for n, e in dev_cfg.eval.evaluations.items()}
    return tests, devs


def test_composed_dev_and_evaluation_share_no_question_or_passage(composed):
    tests, devs = composed
    texts = {t for c in tests.values() for t in c.corpus.values()}
    questions = {t for c in tests.values() for t in c.queries.values()}
    for name, dev in devs.items():
        assert not texts & set(dev.corpus.values()), name
        assert not questions & set(dev.queries.values()), name
    sizes = {name: (len(dev.queries), len(dev.corpus)) for name, dev in devs.items()}
    assert sizes == {"boolq-clean-dev": (300, 1000), "squad-dev": (224, 200), "sciriff-dev": (200, 400)}


def test_composed_dev_holds_no_near_copy_of_an_evaluation_text(composed):
    """By the rule that keeps evaluation texts out of training (vtlab.data.near_duplicates): no dev passage shares half
    of the shorter one's word 8-grams with a passage of any evaluation set, no dev question is a near-copy (idf-weighted
    word Jaccard ≥ 0.7, idf over the evaluation set's questions) of one of its questions."""
    tests, devs = composed
    for dev_name, dev in devs.items():
        for test_name, test in tests.items():
            passages = near_duplicate_pairs(list(dev.corpus.values()), list(test.corpus.values()))
            questions = similar_question_pairs(list(dev.queries.values()), list(test.queries.values()))
            assert passages == [], (dev_name, test_name)
            assert questions == [], (dev_name, test_name)


def _sweep(tmp_path: Path, scores: dict[str, dict[str, dict[str, float]]]) -> Path:
    sweep = tmp_path / "select"
    write_multirun(sweep, ["model.optimizer.lr=0.0001,0.00025", "experiment=wp", "seed=0"])
    for num, lr in enumerate(("0.0001", "0.00025")):
        metrics = {d: {"nDCG@10": v} for d, v in scores[lr].items()}
        write_job(sweep, num, [f"model.optimizer.lr={lr}", "experiment=wp", "seed=0"], "testbed-wp", metrics=metrics)
    return sweep


def test_the_selection_reads_the_mean_over_the_dev_collections(tmp_path):
    # in domain the higher rate wins; over the three sets the lower one does
    scores = {
        "0.0001": {"boolq-clean-dev": 0.88, "squad-dev": 0.93, "sciriff-dev": 0.97},
        "0.00025": {"boolq-clean-dev": 0.89, "squad-dev": 0.91, "sciriff-dev": 0.96},
    }
    sweep = _sweep(tmp_path, scores)
    assert choose(sweep, ["model.optimizer.lr"], "boolq-clean-dev", "nDCG@10")["testbed-wp"].score == 0.89
    mean = choose(sweep, ["model.optimizer.lr"], None, "nDCG@10")["testbed-wp"]
    assert mean.values == {"model.optimizer.lr": 0.0001}
    assert mean.score == pytest.approx((0.88 + 0.93 + 0.97) / 3)


def test_a_job_missing_a_dev_collection_is_named_not_averaged_over_fewer(tmp_path):
    scores = {
        "0.0001": {"boolq-clean-dev": 0.88, "squad-dev": 0.93, "sciriff-dev": 0.97},
        "0.00025": {"boolq-clean-dev": 0.89, "squad-dev": 0.99},  # its sciriff-dev evaluation is missing
    }
    with pytest.raises(ReportError, match="testbed-wp .*without a dev-average nDCG@10"):
        choose(_sweep(tmp_path, scores), ["model.optimizer.lr"], None, "nDCG@10")
