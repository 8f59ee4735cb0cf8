"""Exact top-k retrieval over learned sparse vectors with an in-memory inverted index.

The posting lists are the rows of the term x doc matrix P = Dᵀ in CSR form: row v holds the doc indices
(int32) and weights (float32) of term v. Scoring a batch of queries Q is Q @ P, i.e. term-at-a-time
accumulation: for every query term, its posting list is scaled by the query weight and added into a per-query
accumulator.

Two backends compute the same ranking with bitwise-equal scores:

- `native` (default when a C compiler is present): vtlab/index/taat.c, built once and called through ctypes on
  query slices in a thread pool. Per query it walks the doc-id space in blocks of 2^17 docs (a 512 KiB accumulator
  that stays in L2), adds every query term's postings of the block, then scans the block into a k-heap and clears
  it: no dense B×n_docs score rows, no argpartition, no SpGEMM bookkeeping.
- `scipy`: (Q_batch @ P).toarray() + argpartition (`topk_rows`), batches on a thread pool. This is also the
  peer baseline of `make bench`.

No dynamic pruning (MaxScore/WAND/block-max) on the exact path: on the bench's synthetic 1M-doc collection
(independent Gamma weights, so upper bounds are loose) the block-max bound of a 32-doc block exceeds the true 10th
score for 85% of the blocks (median query), and for 8-doc blocks 2% — but the block-max lists are then as long as the
postings themselves. The time goes into touching ~2.4M postings per query, which the kernel does at a few ns each
(scipy: ~11 ns); docs/performance.md.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

import numpy as np
import scipy.sparse as sp

from vtlab.index import native

# Dense accumulator budget per batch (elements): batch rows are capped so that B * n_docs stays under it, which
# keeps the accumulator (float32, 16 MiB) cache-friendly and bounded even on 1M-doc collections.
_ACCUMULATOR_ELEMENTS = 1 << 22


def _as_csr(m: sp.spmatrix | sp.sparray, name: str) -> sp.csr_matrix:
    if not sp.issparse(m):
        raise TypeError(f"{name} must be a scipy.sparse matrix, got {type(m).__name__}")
    m = sp.csr_matrix(m, dtype=np.float32)
    if not m.has_canonical_format:
        m = m.copy()
        m.sum_duplicates()
    return m


Backend = Literal["auto", "native", "scipy"]
# Docs per accumulator block of the compiled kernel: 2^17 float32 = 512 KiB, resident in a core's L2.
NATIVE_BLOCK_DOCS = 1 << 17


class InvertedIndex:
    """Posting lists for exact top-k dot-product retrieval.

    docs: csr_matrix [n_docs, vocab_size]; doc_ids: optional external ids (kept for `to_run`).
    backend: "native" scores with the compiled kernel (vtlab/index/taat.c: cache-blocked term-at-a-time, a k-heap
    per query, no dense score rows), "scipy" with SpGEMM into dense rows + argpartition, "auto" = native when it
    builds, else scipy. Both return the same ranking, with bitwise-equal scores.
    """

    def __init__(
        self,
        docs: sp.csr_matrix,
        doc_ids: Sequence[str] | None = None,
        backend: Backend = "auto",
        block_docs: int = NATIVE_BLOCK_DOCS,
    ) -> None:
        if backend not in ("auto", "native", "scipy"):
            raise ValueError(f"backend must be auto, native or scipy, got {backend!r}")
        docs = _as_csr(docs, "docs")
        if doc_ids is not None and len(doc_ids) != docs.shape[0]:
            raise ValueError(f"{len(doc_ids)} doc_ids for {docs.shape[0]} docs")
        self.doc_ids: list[str] | None = list(doc_ids) if doc_ids is not None else None
        self.vocab_size: int = int(docs.shape[1])
        self._n_docs: int = int(docs.shape[0])
        # CSC of D == CSR of Dᵀ: row v = posting list of term v. Explicit zeros are no postings.
        postings = docs.T.tocsr()
        postings.eliminate_zeros()
        postings.sort_indices()  # doc indices ascending inside each posting list
        if postings.indices.dtype != np.int32 and postings.nnz < np.iinfo(np.int32).max:
            postings.indices = postings.indices.astype(np.int32)
        self._postings: sp.csr_matrix = postings
        self._lib = native.load() if backend != "scipy" and postings.indices.dtype == np.int32 else None
        if backend == "native" and self._lib is None:
            raise RuntimeError("backend='native': the exact-search kernel could not be built (see the log)")
        self.backend: str = "native" if self._lib is not None else "scipy"
        self.block_docs = int(block_docs)
        # the kernel reads int64 row pointers (a 30k-entry copy)
        self._indptr64 = postings.indptr.astype(np.int64) if self._lib is not None else postings.indptr

    @property
    def n_docs(self) -> int:
        return self._n_docs

    def postings(self, term: int) -> tuple[np.ndarray, np.ndarray]:
        """(doc indices int32, weights float32) of one term's posting list."""
        p = self._postings
        lo, hi = p.indptr[term], p.indptr[term + 1]
        return p.indices[lo:hi], p.data[lo:hi]

    def memory_bytes(self) -> int:
        p = self._postings
        return int(p.indptr.nbytes + p.indices.nbytes + p.data.nbytes)

    def stats(self) -> dict[str, float]:
        lengths = np.diff(self._postings.indptr)
        nonempty = int(np.count_nonzero(lengths))
        return {
            "n_docs": self._n_docs,
            "vocab_size": self.vocab_size,
            "postings": int(self._postings.nnz),
            "terms_with_postings": nonempty,
            # over terms that occur at least once; the vocabulary-wide mean is postings / vocab_size
            "mean_postings_per_term": float(self._postings.nnz / nonempty) if nonempty else 0.0,
            "max_postings_per_term": int(lengths.max()) if lengths.size else 0,
            "memory_bytes": self.memory_bytes(),
        }

    def search(
        self,
        queries: sp.csr_matrix,
        k: int,
        batch_size: int = 32,
        n_threads: int | None = None,
        progress: Callable[[int], Any] | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-k by dot product.

        batch_size: scipy backend: queries scored together (capped so one dense accumulator stays <= 16 MiB);
        n_threads: query slices scored in parallel (default: all CPUs, at most 8);
        progress: called with the number of queries of each slice scored, in query order (vtlab.core.progress).

        Returns (scores float32 [Q, k'], doc indices int64 [Q, k']) with k' = min(k, n_docs), each row sorted by
        score descending, ties broken by lower doc index. Docs sharing no term with the query score 0 and
        can still fill the tail of a row; `to_run` drops them by default.
        """
        queries = _as_csr(queries, "queries")
        if queries.shape[1] != self.vocab_size:
            raise ValueError(f"queries have {queries.shape[1]} dims, index has {self.vocab_size}")
        if k < 0 or batch_size < 1:
            raise ValueError(f"need k >= 0 and batch_size >= 1, got k={k}, batch_size={batch_size}")
        n_q, n = queries.shape[0], self._n_docs
        k = min(k, n)
        scores = np.zeros((n_q, k), dtype=np.float32)
        indices = np.zeros((n_q, k), dtype=np.int64)
        if k == 0 or n_q == 0:
            return scores, indices
        threads = n_threads or min(os.cpu_count() or 1, 8)
        if self._lib is not None:
            self._search_native(queries, k, scores, indices, threads, progress)
            return scores, indices
        step = max(1, min(batch_size, _ACCUMULATOR_ELEMENTS // n))

        def run_batch(start: int) -> int:
            stop = min(start + step, n_q)
            # term-at-a-time accumulation of the batch's posting lists (see module docstring)
            acc = (queries[start:stop] @ self._postings).toarray()
            scores[start:stop], indices[start:stop] = topk_rows(acc, k)
            return stop - start

        _run_slices(run_batch, range(0, n_q, step), threads, progress)
        return scores, indices

    def _search_native(
        self,
        queries: sp.csr_matrix,
        k: int,
        scores: np.ndarray,
        indices: np.ndarray,
        threads: int,
        progress: Callable[[int], Any] | None,
    ) -> None:
        p = self._postings
        post = (self._indptr64, p.indices, p.data)
        qs = (
            queries.indptr.astype(np.int64),
            queries.indices.astype(np.int32, copy=False),
            queries.data.astype(np.float32, copy=False),
        )
        n_q = queries.shape[0]
        # small slices keep both threads busy to the end; ctypes drops the GIL during each call
        step = max(1, min(64, -(-n_q // (4 * threads))))
        starts = range(0, n_q, step)

        def run(start: int) -> int:
            stop = min(start + step, n_q)
            native.taat_topk(self._lib, post, self._n_docs, qs, start, stop, k, scores, indices, self.block_docs)
            return stop - start

        _run_slices(run, starts, threads, progress)


def _run_slices(run: Callable[[int], int], starts: range, threads: int, progress: Callable[[int], Any] | None) -> None:
    """run(start) for every start, on `threads` threads when there are several slices; progress(queries of a slice)
    in slice order as each is done (a worker's exception is raised here)."""
    threads = min(threads, len(starts))
    with ThreadPoolExecutor(threads) if threads > 1 else contextlib.nullcontext() as pool:
        for n in pool.map(run, starts) if pool is not None else map(run, starts):
            if progress is not None:
                progress(n)


def topk_rows(acc: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k of every row of a dense score matrix: score descending, then lower column index first."""
    b, n = acc.shape
    if k >= n:
        # stable sort of -score keeps ascending column order among ties
        idx = np.argsort(-acc, axis=1, kind="stable")
    else:
        idx = np.argpartition(acc, n - k, axis=1)[:, n - k :]
        vals = np.take_along_axis(acc, idx, axis=1)
        thr = vals.min(axis=1)
        # argpartition picks an arbitrary subset of the docs tied at the k-th score; where some tied docs were
        # left out, rebuild that row as "all above the threshold + the lowest-index tied docs".
        n_tied = (acc == thr[:, None]).sum(axis=1)
        n_tied_kept = (vals == thr[:, None]).sum(axis=1)
        for r in np.flatnonzero(n_tied > n_tied_kept):
            row = acc[r]
            above = np.flatnonzero(row > thr[r])
            tied = np.flatnonzero(row == thr[r])[: k - above.size]
            idx[r] = np.concatenate([above, tied])
        idx = np.sort(idx, axis=1)  # ascending column order, then a stable sort by score keeps the tie rule
        order = np.argsort(-np.take_along_axis(acc, idx, axis=1), axis=1, kind="stable")
        idx = np.take_along_axis(idx, order, axis=1)
    idx = idx[:, :k].astype(np.int64, copy=False)
    return np.take_along_axis(acc, idx, axis=1).astype(np.float32, copy=False), idx


def to_run(
    scores: np.ndarray, indices: np.ndarray, query_ids: Sequence[str], doc_ids: Sequence[str], drop_zeros: bool = True
) -> dict[str, dict[str, float]]:
    """Search output -> ir_measures run {query_id: {doc_id: score}} (rows keep their ranked order).

    drop_zeros: a score of exactly 0 means the doc shares no active term with the query; a real inverted index
    never retrieves it, and keeping it would hand a collapsed (all-zero) encoder recall by doc order.
    """
    if scores.shape != indices.shape or scores.shape[0] != len(query_ids):
        raise ValueError(f"scores {scores.shape}, indices {indices.shape}, {len(query_ids)} query ids")
    run: dict[str, dict[str, float]] = {}
    for qid, row_s, row_i in zip(query_ids, scores.tolist(), indices.tolist()):
        # index -1 pads rows of approximate backends that found fewer than k docs
        run[qid] = {doc_ids[i]: s for s, i in zip(row_s, row_i) if i >= 0 and not (drop_zeros and s == 0.0)}
    return run
