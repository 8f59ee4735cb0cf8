"""BM25 as a sparse encoder (conf/model/bm25.yaml): a baseline that runs through the same evaluation as SPLADE.

Terms are the corpus's own lowercased `\\w+` words (no stopwords, no stemming: vtlab.data.mining's BM25 setting).
A query is its term counts; a document is its BM25 term weights, so their dot product is the document's BM25 score:

    w(t, d) = idf(t) · tf / (tf + k1 · (1 − b + b · |d| / avgdl)),   idf(t) = ln(1 + (N − df + 0.5) / (df + 0.5))

(bm25s's default "lucene" variant). The vocabulary and the statistics (N, df, avgdl) come from `fit_corpus`, which the
evaluation calls with each collection's documents before encoding, so every collection gets its own.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import Literal

import numpy as np
import scipy.sparse as sp

from vtlab.core.errors import VtlabError
from vtlab.data.mining import TOKEN_PATTERN
from vtlab.runtime.policy import check_precision


class BM25Encoder:
    """Encoder for `vtlab.evaluation.evaluate`; `vocab_size` is 0 until `fit_corpus` has built the vocabulary."""

    def __init__(self, k1: float = 0.9, b: float = 0.4, precision: str = "auto") -> None:
        # `precision`: accepted like every encoder's (a table may set model.encoder.precision for all its rows);
        # BM25 has no network, so it computes the same in every precision
        check_precision(precision)
        if k1 < 0 or not 0 <= b <= 1:
            raise VtlabError(f"model.encoder: BM25 needs k1 >= 0 and 0 <= b <= 1, got k1={k1}, b={b}")
        self.k1, self.b = float(k1), float(b)
        self._split = re.compile(TOKEN_PATTERN).findall
        self.vocab: dict[str, int] = {}
        self.idf = np.zeros(0)
        self.avgdl = 0.0

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def _counts(self, texts: Sequence[str]) -> tuple[sp.csr_matrix, np.ndarray]:
        """[len(texts), vocab] term counts over the vocabulary, and each text's length in tokens (unknown ones too)."""
        indptr, indices, data, lengths = [0], [], [], []
        for text in texts:
            tokens = self._split(text.lower())
            # bm25s gives an empty text one empty token; counting it keeps avgdl (hence every score) equal to bm25s's
            lengths.append(max(len(tokens), 1))
            counts = Counter(self.vocab[t] for t in tokens if t in self.vocab)
            indices.extend(counts)
            data.extend(counts.values())
            indptr.append(len(indices))
        m = sp.csr_matrix(
            (
                np.asarray(data, dtype=np.float64),
                np.asarray(indices, dtype=np.int64),
                np.asarray(indptr, dtype=np.int64),
            ),
            shape=(len(texts), self.vocab_size),
        )
        m.sort_indices()
        return m, np.asarray(lengths, dtype=np.float64)

    def fit_corpus(self, texts: Sequence[str]) -> None:
        """Vocabulary (every word of `texts`, in order of first occurrence), document frequencies, N and avgdl."""
        if not texts:
            raise VtlabError("BM25Encoder.fit_corpus: the corpus is empty")
        self.vocab = {}
        for text in texts:
            for t in self._split(text.lower()):
                self.vocab.setdefault(t, len(self.vocab))
        counts, lengths = self._counts(texts)
        df = np.bincount(counts.indices, minlength=self.vocab_size)
        n = len(texts)
        self.idf = np.log1p((n - df + 0.5) / (df + 0.5))
        self.avgdl = float(lengths.mean())

    def encode(
        self, texts: Sequence[str], side: Literal["query", "doc"], batch_size: int = 64, show_progress: bool = True
    ) -> sp.csr_matrix:
        """Queries: term counts. Documents: BM25 weights (words outside the fitted vocabulary are dropped: no query
        can contain them). batch_size and show_progress are accepted for the interface and unused (no network)."""
        if not self.vocab:
            raise VtlabError("BM25Encoder: call fit_corpus(documents) before encode")
        if side not in ("query", "doc"):
            raise VtlabError(f"BM25Encoder.encode: side must be 'query' or 'doc', got {side!r}")
        counts, lengths = self._counts(texts)
        if side == "doc":
            tf = counts.data
            norm = self.k1 * (1 - self.b + self.b * lengths / self.avgdl)
            row_norm = np.repeat(norm, np.diff(counts.indptr))
            counts.data = self.idf[counts.indices] * tf / (tf + row_norm)
        return counts.astype(np.float32)
