"""InvertedIndex against an independent brute-force ranking (dense numpy Q @ Dᵀ, lexsort with the same tie rule)."""

import numpy as np
import pytest
import scipy.sparse as sp

from vtlab.index import InvertedIndex, to_run, topk_rows


def random_csr(n: int, dim: int, density: float, rng: np.random.Generator, integer: bool) -> sp.csr_matrix:
    # small integer weights give exact float32 sums and many duplicate scores (tie-break coverage)
    rvs = (lambda size: rng.integers(1, 4, size=size)) if integer else (lambda size: rng.gamma(2.0, 0.5, size))
    m = sp.random(n, dim, density=density, format="csr", dtype=np.float32, random_state=rng, data_rvs=rvs)
    return sp.csr_matrix(m, dtype=np.float32)


def brute_force(q: sp.csr_matrix, d: sp.csr_matrix, k: int) -> tuple[np.ndarray, np.ndarray]:
    dense = q.toarray().astype(np.float64) @ d.toarray().astype(np.float64).T
    n = d.shape[0]
    order = np.array([np.lexsort((np.arange(n), -row))[:k] for row in dense], dtype=np.int64).reshape(len(dense), -1)
    return np.take_along_axis(dense, order, axis=1), order


def empty_rows(m: sp.csr_matrix, rows: list[int]) -> sp.csr_matrix:
    keep = np.ones(m.shape[0], dtype=np.float32)
    keep[[r for r in rows if r < m.shape[0]]] = 0
    out = sp.csr_matrix(sp.diags(keep) @ m, dtype=np.float32)
    out.eliminate_zeros()
    return out


# (n_queries, n_docs, vocab, query density, doc density, k)
SHAPES = [
    (20, 50, 30, 0.10, 0.20, 5),
    (7, 3, 10, 0.30, 0.30, 10),  # k > n_docs
    (30, 200, 100, 0.05, 0.05, 17),
    (15, 40, 1000, 0.003, 0.01, 8),  # most queries/docs empty: zero-score ties at the k-th position
    (25, 120, 12, 0.5, 0.5, 120),  # k == n_docs, dense-ish, many duplicate scores
]


@pytest.mark.parametrize("shape", SHAPES, ids=[f"{s[0]}x{s[1]}x{s[2]}k{s[5]}" for s in SHAPES])
@pytest.mark.parametrize("batch_size,n_threads", [(1, 1), (4, 2), (64, None)])
def test_topk_equals_brute_force_integer_weights(shape, batch_size, n_threads):
    nq, nd, dim, dq, dd, k = shape
    rng = np.random.default_rng(hash(shape) % 2**32)
    q, d = random_csr(nq, dim, dq, rng, integer=True), random_csr(nd, dim, dd, rng, integer=True)
    q = empty_rows(q, [0])  # at least one empty query
    d = empty_rows(d, [1])  # and one empty doc
    scores, idx = InvertedIndex(d).search(q, k, batch_size=batch_size, n_threads=n_threads)
    ref_scores, ref_idx = brute_force(q, d, k)
    assert scores.dtype == np.float32 and idx.dtype == np.int64
    assert scores.shape == idx.shape == (nq, min(k, nd))
    np.testing.assert_array_equal(idx, ref_idx)
    np.testing.assert_array_equal(scores, ref_scores.astype(np.float32))
    assert (scores[0] == 0).all() and (idx[0] == np.arange(min(k, nd))).all()  # empty query: docs in index order


def test_topk_float_weights_matches_brute_force_scores():
    rng = np.random.default_rng(7)
    q, d = random_csr(40, 300, 0.08, rng, integer=False), random_csr(500, 300, 0.1, rng, integer=False)
    scores, idx = InvertedIndex(d).search(q, 25)
    ref_scores, _ = brute_force(q, d, 25)
    np.testing.assert_allclose(scores, ref_scores, rtol=1e-5, atol=1e-6)
    # every returned doc really has the score reported (float32 accumulation vs float64)
    true = q.toarray().astype(np.float64) @ d.toarray().astype(np.float64).T
    np.testing.assert_allclose(np.take_along_axis(true, idx, axis=1), scores, rtol=1e-5, atol=1e-6)
    assert (np.diff(scores, axis=1) <= 0).all()


def test_tie_break_prefers_lower_doc_index():
    acc = np.array([[1, 1, 1, 1, 1, 1], [0, 2, 0, 2, 0, 2], [0, 0, 0, 0, 0, 3]], dtype=np.float32)
    scores, idx = topk_rows(acc, 3)
    np.testing.assert_array_equal(idx, [[0, 1, 2], [1, 3, 5], [5, 0, 1]])
    np.testing.assert_array_equal(scores, [[1, 1, 1], [2, 2, 2], [3, 0, 0]])
    # large row: argpartition alone would pick arbitrary tied columns
    row = np.zeros((1, 5000), dtype=np.float32)
    row[0, 4000:] = 1.0
    assert topk_rows(row, 1010)[1][0].tolist() == list(range(4000, 5000)) + list(range(10))


def test_empty_collection_and_k_zero():
    d = sp.csr_matrix((0, 6), dtype=np.float32)
    q = sp.csr_matrix(np.ones((3, 6), dtype=np.float32))
    scores, idx = InvertedIndex(d).search(q, 10)
    assert scores.shape == idx.shape == (3, 0)
    scores, idx = InvertedIndex(sp.csr_matrix(np.eye(6, dtype=np.float32))).search(q, 0)
    assert scores.shape == (3, 0)


def test_postings_stats_and_memory():
    docs = sp.csr_matrix(np.array([[1, 0, 2, 0], [0, 0, 3, 0], [4, 0, 5, 0]], dtype=np.float32))
    docs.data[docs.data == 4] = 0  # explicit zero: not a posting
    index = InvertedIndex(docs, doc_ids=["a", "b", "c"])
    ids, weights = index.postings(2)
    assert ids.tolist() == [0, 1, 2] and weights.tolist() == [2, 3, 5]
    assert ids.dtype == np.int32 and weights.dtype == np.float32
    assert index.postings(0)[0].tolist() == [0] and index.postings(1)[0].size == 0
    st = index.stats()
    assert st["postings"] == 4 and st["terms_with_postings"] == 2 and st["mean_postings_per_term"] == 2.0
    assert index.n_docs == 3 and index.memory_bytes() == st["memory_bytes"] > 0


def test_vocab_mismatch_and_bad_ids():
    index = InvertedIndex(sp.csr_matrix(np.eye(4, dtype=np.float32)))
    with pytest.raises(ValueError, match="dims"):
        index.search(sp.csr_matrix(np.ones((1, 5), dtype=np.float32)), 2)
    with pytest.raises(ValueError, match="doc_ids"):
        InvertedIndex(sp.csr_matrix(np.eye(4, dtype=np.float32)), doc_ids=["a"])


def test_to_run_keeps_order_and_drops_zero_scores():
    scores = np.array([[3.0, 1.0, 0.0], [0.0, 0.0, 0.0]], dtype=np.float32)
    idx = np.array([[2, 0, 1], [0, 1, 2]])
    run = to_run(scores, idx, ["q1", "q2"], ["d0", "d1", "d2"])
    assert run == {"q1": {"d2": 3.0, "d0": 1.0}, "q2": {}}
    assert list(run["q1"]) == ["d2", "d0"]
    assert to_run(scores, idx, ["q1", "q2"], ["d0", "d1", "d2"], drop_zeros=False)["q2"] == {"d0": 0, "d1": 0, "d2": 0}


# ---- the compiled kernel (vtlab/index/taat.c) against scipy and the brute force --------------------------------------

native_only = pytest.mark.skipif(
    InvertedIndex(sp.csr_matrix(np.eye(2, dtype=np.float32))).backend != "native",
    reason="no C compiler: the exact index runs on scipy",
)


@native_only
@pytest.mark.parametrize("shape", SHAPES, ids=[f"{s[0]}x{s[1]}x{s[2]}k{s[5]}" for s in SHAPES])
@pytest.mark.parametrize("block_docs", [1, 7, 1 << 17])  # one doc per accumulator block, ragged blocks, one block
def test_native_kernel_equals_scipy_and_brute_force(shape, block_docs):
    nq, nd, dim, dq, dd, k = shape
    rng = np.random.default_rng(hash(shape) % 2**32 + 1)
    for integer in (True, False):
        q, d = random_csr(nq, dim, dq, rng, integer=integer), random_csr(nd, dim, dd, rng, integer=integer)
        q, d = empty_rows(q, [0]), empty_rows(d, [1])
        fast = InvertedIndex(d, backend="native", block_docs=block_docs)
        assert fast.backend == "native"
        scores, idx = fast.search(q, k, n_threads=2)
        ref_scores, ref_idx = InvertedIndex(d, backend="scipy").search(q, k)
        # same arithmetic as scipy's SpGEMM (term order, float32, no FMA): bitwise-equal scores, same ranking
        np.testing.assert_array_equal(scores, ref_scores)
        np.testing.assert_array_equal(idx, ref_idx)
        if integer:  # exact sums: the independent float64 brute force agrees too, ties included
            bf_scores, bf_idx = brute_force(q, d, k)
            np.testing.assert_array_equal(idx, bf_idx)
            np.testing.assert_array_equal(scores, bf_scores.astype(np.float32))


def test_scipy_backend_is_the_fallback(monkeypatch):
    from vtlab.index import native

    d = sp.csr_matrix(np.eye(3, dtype=np.float32))
    assert InvertedIndex(d, backend="scipy").backend == "scipy"
    monkeypatch.setattr(native, "load", lambda: None)  # as without a compiler
    assert InvertedIndex(d).backend == "scipy"
    with pytest.raises(RuntimeError, match="kernel"):
        InvertedIndex(d, backend="native")
    with pytest.raises(ValueError, match="backend"):
        InvertedIndex(d, backend="gpu")


def test_to_run_skips_padding_of_short_rows():
    scores = np.array([[2.0, 0.0]], dtype=np.float32)
    assert to_run(scores, np.array([[1, -1]]), ["q"], ["d0", "d1"], drop_zeros=False) == {"q": {"d1": 2.0}}


def test_eval_index_names_are_target_nodes():
    """eval.index=<name> instantiates the node <name> of vtlab/index/indexes.yaml (a `_target_` partial, options as
    keywords): no name → class table in the code. An unknown name is one line naming the choices."""
    import functools

    from omegaconf import OmegaConf

    from vtlab.index import INDEXES_FILE, index_factory, index_names
    from vtlab.index.seismic import SeismicIndex

    assert index_names() == ("exact", "scipy", "seismic")
    for name, node in OmegaConf.load(INDEXES_FILE).items():
        assert node._target_ and node._partial_ is True, name
    d = sp.csr_matrix(np.eye(3, dtype=np.float32))
    assert index_factory()(d, ["a", "b", "c"]).backend in ("native", "scipy")
    assert index_factory("exact", {"backend": "scipy"})(d).backend == "scipy"  # options reach the constructor
    assert index_factory("scipy")(d).backend == "scipy"
    assert index_factory("exact")(d).backend == index_factory()(d).backend  # the options did not stick
    seismic = index_factory("seismic", {"n_postings": 7, "query_cut": 3})
    assert isinstance(seismic, functools.partial) and seismic.func is SeismicIndex
    assert seismic.keywords == {"n_postings": 7, "query_cut": 3}
    with pytest.raises(ValueError, match=r"^unknown index 'faiss': choose one of exact, scipy, seismic$"):
        index_factory("faiss")
