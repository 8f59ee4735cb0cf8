"""Synthetic learned-sparse collections shaped like SPLADE-tiny on BoolQ (the peer workload).

Terms follow a Zipf–Mandelbrot law p(rank) ∝ (rank + 20)^-1 over a BERT-sized vocabulary; a document draws 127 terms
with replacement (≈120.5 distinct, the most common term in ≈58% of documents; SPLADE-tiny on BoolQ: 120.6, 56.5%), a
query 26 (≈25.7 distinct); weights are Gamma(2, 0.5). Weights are independent of each other, so there is none of the
structure real SPLADE vectors have.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

VOCAB = 30522
DOC_DRAWS = 127
QUERY_DRAWS = 26


def term_probabilities(vocab: int = VOCAB, offset: float = 20.0) -> np.ndarray:
    p = 1.0 / (np.arange(vocab, dtype=np.float64) + offset)
    return p / p.sum()


def sample_rows(
    n: int, draws: int, rng: np.random.Generator, vocab: int = VOCAB, block: int = 100_000
) -> sp.csr_matrix:
    """n rows, each the distinct terms of `draws` Zipf draws with Gamma(2, 0.5) weights (float32 CSR)."""
    cdf = np.cumsum(term_probabilities(vocab))
    cdf[-1] = 1.0
    indptr = [np.zeros(1, dtype=np.int64)]
    indices: list[np.ndarray] = []
    total = 0
    for start in range(0, n, block):  # in blocks: a 1M × 122 draw matrix at once would need ~1 GB of int64
        m = min(block, n - start)
        terms = np.searchsorted(cdf, rng.random((m, draws)), side="right").astype(np.int32)
        np.minimum(terms, vocab - 1, out=terms)
        terms.sort(axis=1)
        keep = np.ones_like(terms, dtype=bool)
        keep[:, 1:] = terms[:, 1:] != terms[:, :-1]  # drop repeated draws of a term
        counts = keep.sum(axis=1)
        indices.append(terms[keep])
        indptr.append(total + np.cumsum(counts))
        total += int(counts.sum())
    ind = np.concatenate(indices) if indices else np.zeros(0, np.int32)
    data = rng.gamma(2.0, 0.5, size=ind.size).astype(np.float32)
    return sp.csr_matrix((data, ind, np.concatenate(indptr)), shape=(n, vocab))


def synthetic_collection(n_docs: int, n_queries: int = 1000, seed: int = 0) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """(docs, queries) as float32 CSR [n, 30522]."""
    rng = np.random.default_rng(seed)
    docs = sample_rows(n_docs, DOC_DRAWS, rng)
    queries = sample_rows(n_queries, QUERY_DRAWS, rng)
    return docs, queries
