"""The Seismic backend (approximate): the interface of InvertedIndex, ids mapped back, recall against exact search."""

import numpy as np
import pytest
import scipy.sparse as sp
from helpers import need_module

need_module("seismic")

from vtlab.bench.synthetic import synthetic_collection  # noqa: E402
from vtlab.index import InvertedIndex, index_factory, to_run  # noqa: E402
from vtlab.index.seismic import SeismicIndex  # noqa: E402


@pytest.fixture(scope="module")
def data():
    docs, queries = synthetic_collection(3000, 60, seed=3)
    docs = sp.vstack([docs[:5], sp.csr_matrix((1, docs.shape[1]), dtype=np.float32), docs[5:]], format="csr")
    return docs, queries  # row 5 is empty: Seismic skips it, ids of the rows after it must still map back


@pytest.mark.slow
def test_recall_against_exact_and_true_scores(data):
    docs, queries = data
    exact_scores, exact_idx = InvertedIndex(docs).search(queries, 10)
    index = SeismicIndex(docs, n_postings=3000, query_cut=64, heap_factor=1.0, n_threads=2)
    scores, idx = index.search(queries, 10)
    assert scores.shape == idx.shape == (60, 10) and idx.dtype == np.int64
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(exact_idx, idx)])
    assert recall >= 0.95  # no pruning of postings at this size: near exact
    # every returned id is a real doc row whose true dot product is the returned score (f16 values inside Seismic)
    true = (queries @ docs.T).toarray()
    np.testing.assert_allclose(np.take_along_axis(true, idx, axis=1), scores, rtol=2e-3, atol=2e-3)
    assert 5 not in idx


def test_empty_query_and_k_larger_than_matches(data):
    docs, queries = data
    q = sp.vstack([sp.csr_matrix((1, docs.shape[1]), dtype=np.float32), queries[:1]], format="csr")
    index = SeismicIndex(docs[:50], n_postings=100)
    scores, idx = index.search(q, 60)
    assert (idx[0] == -1).all() and (scores[0] == 0).all()  # an empty query matches nothing
    run = to_run(scores, idx, ["empty", "q"], [f"d{i}" for i in range(50)])
    assert run["empty"] == {} and all(d.startswith("d") for d in run["q"])


def test_factory_and_stats(data):
    docs, _ = data
    index = index_factory("seismic", {"n_postings": 500, "query_cut": 5})(docs[:100], [str(i) for i in range(100)])
    assert isinstance(index, SeismicIndex) and index.query_cut == 5
    st = index.stats()
    assert st["backend"] == "seismic" and st["n_postings"] == 500 and st["n_docs"] == 100
    with pytest.raises(ValueError, match="unknown index"):
        index_factory("faiss")
