"""Approximate top-k retrieval with Seismic (pyseismic-lsr): `eval.index=seismic`.

Seismic keeps, per term, only the highest-weighted `n_postings` postings (on average), clusters them into blocks with
a summary vector each, and at query time scores only the blocks whose summary dot product passes
`heap_factor` × the current k-th score, for the query's `query_cut` heaviest terms. Results are approximate: report
recall against the exact InvertedIndex (vtlab.bench.retrieval does).

Defaults are tuned on the synthetic 1M-doc collection of `make bench` (docs/performance.md): Seismic's own
(n_postings 3500, centroid_fraction 0.1) build in 642 CPU-s; n_postings 2500 with centroid_fraction 0.05 in 356 CPU-s
(3.9 GB RSS rise), and query_cut 10, heap_factor 0.8 then give recall@10 0.9945 against exact search (query_cut 5,
heap_factor 0.7: 0.963; query_cut 20, heap_factor 0.9: 0.997 at 1.2x the query time). The bench's own settings:
SEISMIC in vtlab/bench/parts.py.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from vtlab.index.inverted import _as_csr


class SeismicIndex:
    """Same interface as InvertedIndex: SeismicIndex(docs, doc_ids).search(queries, k) -> (scores, indices).

    Rows of `docs` with no non-zero are not indexed (Seismic skips them); they can never be retrieved, as in any
    inverted index. A query row shorter than k results is padded with score 0 and doc index -1.
    """

    def __init__(
        self,
        docs: sp.csr_matrix,
        doc_ids: Sequence[str] | None = None,
        n_postings: int = 2500,
        centroid_fraction: float = 0.05,
        summary_energy: float = 0.4,
        min_cluster_size: int = 2,
        doc_cut: int = 15,
        max_fraction: float = 1.5,
        query_cut: int = 10,
        heap_factor: float = 0.8,
        n_threads: int | None = None,
    ) -> None:
        import seismic  # optional at import time: only this backend needs it

        docs = _as_csr(docs, "docs")
        docs.eliminate_zeros()
        if doc_ids is not None and len(doc_ids) != docs.shape[0]:
            raise ValueError(f"{len(doc_ids)} doc_ids for {docs.shape[0]} docs")
        self.doc_ids = list(doc_ids) if doc_ids is not None else None
        self.vocab_size = int(docs.shape[1])
        self._n_docs = int(docs.shape[0])
        self.query_cut, self.heap_factor = int(query_cut), float(heap_factor)
        self.n_threads = int(n_threads or min(os.cpu_count() or 1, 8))
        self.params = {
            "n_postings": int(n_postings),
            "centroid_fraction": float(centroid_fraction),
            "summary_energy": float(summary_energy),
            "min_cluster_size": int(min_cluster_size),
            "doc_cut": int(doc_cut),
            "max_fraction": float(max_fraction),
        }
        dataset = seismic.SeismicDataset(dim=self.vocab_size)
        # string doc ids are row numbers: results map back to rows without a dictionary
        dataset.add_documents_by_id(
            [str(i) for i in range(self._n_docs)],
            docs.indices.astype(np.int64),
            docs.data.astype(np.float32),
            docs.indptr.astype(np.int64),
        )
        self._index = seismic.SeismicIndex.build_from_dataset(dataset, num_threads=self.n_threads, **self.params)
        self._nnz = int(docs.nnz)

    @property
    def n_docs(self) -> int:
        return self._n_docs

    def stats(self) -> dict[str, float]:
        return {
            "n_docs": self._n_docs,
            "vocab_size": self.vocab_size,
            "postings": self._nnz,
            "backend": "seismic",
            **self.params,
            "query_cut": self.query_cut,
            "heap_factor": self.heap_factor,
        }

    def search(
        self, queries: sp.csr_matrix, k: int, n_threads: int | None = None, **_: object
    ) -> tuple[np.ndarray, np.ndarray]:
        """Approximate top-k by dot product: (scores float32 [Q, k'], doc indices int64 [Q, k']),
        k' = min(k, n_docs)."""
        queries = _as_csr(queries, "queries")
        if queries.shape[1] != self.vocab_size:
            raise ValueError(f"queries have {queries.shape[1]} dims, index has {self.vocab_size}")
        n_q = queries.shape[0]
        k = min(int(k), self._n_docs)
        scores = np.zeros((n_q, k), dtype=np.float32)
        indices = np.full((n_q, k), -1, dtype=np.int64)
        rows = [r for r in range(n_q) if queries.indptr[r + 1] > queries.indptr[r]]  # empty queries match nothing
        if k == 0 or not rows:
            return scores, indices
        import seismic

        text = seismic.get_seismic_string()  # the fixed-width string dtype its bindings require
        comps = [queries.indices[queries.indptr[r] : queries.indptr[r + 1]].astype(text) for r in rows]
        vals = [queries.data[queries.indptr[r] : queries.indptr[r + 1]].astype(np.float32) for r in rows]
        results = self._index.batch_search(
            np.array([str(r) for r in rows], dtype=text),
            comps,
            vals,
            k,
            self.query_cut,
            self.heap_factor,
            num_threads=n_threads or self.n_threads,
        )
        # result lists do not come back in query order (parallel search): each hit names its query
        for hits in results:
            for j, (qid, score, doc) in enumerate(hits[:k]):
                r = int(qid)
                scores[r, j] = score
                indices[r, j] = int(doc)
        return scores, indices
