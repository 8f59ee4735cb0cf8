"""BM25 retrieval and hard-negative mining: a thin wrapper over the `bm25s` library."""

from __future__ import annotations

import bm25s
import numpy as np

# Lowercased `\w+` tokens, single characters included, no stopwords and no stemming: the setting
# behind the BM25 baselines in the research notes (BoolQ val nDCG@10 0.766 at k1=0.9, b=0.4).
TOKEN_PATTERN = r"(?u)\b\w+\b"


class BM25Index:
    """An in-memory BM25 index over `texts`; search returns positions into `texts`."""

    def __init__(self, texts: list[str], k1: float = 0.9, b: float = 0.4) -> None:
        if not texts:
            raise ValueError("BM25Index needs at least one text")
        self.num_docs = len(texts)
        self._tokenizer = bm25s.tokenization.Tokenizer(lower=True, splitter=TOKEN_PATTERN, stopwords=None)
        corpus_ids = self._tokenizer.tokenize(list(texts), update_vocab=True, show_progress=False)
        self._model = bm25s.BM25(k1=k1, b=b)
        self._model.index(self._tokenizer.to_tokenized_tuple(corpus_ids), show_progress=False)

    def search(self, queries: list[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k docs per query: (indices int64 [Q,k'], scores float32 [Q,k']) with k' = min(k, num_docs).

        Scores are sorted descending; docs with score 0 may fill the tail when a query matches few docs.
        """
        k = min(int(k), self.num_docs)
        if not queries or k <= 0:
            return (
                np.zeros((len(queries), max(k, 0)), dtype=np.int64),
                np.zeros((len(queries), max(k, 0)), dtype=np.float32),
            )
        # update_vocab=False: unseen query words cannot match any doc, so they are simply dropped.
        q_ids = self._tokenizer.tokenize(list(queries), update_vocab=False, show_progress=False)
        docs, scores = self._model.retrieve(
            self._tokenizer.to_tokenized_tuple(q_ids), k=k, show_progress=False, n_threads=1
        )
        return np.asarray(docs, dtype=np.int64), np.asarray(scores, dtype=np.float32)

    def score(self, queries: list[str], doc_idx: list[int]) -> np.ndarray:
        """BM25 score of each (queries[i], texts[doc_idx[i]]) pair, float32 [Q] (e.g. a positive outside the top-k)."""
        if len(queries) != len(doc_idx):
            raise ValueError(f"{len(queries)} queries but {len(doc_idx)} doc indices")
        q_ids = self._tokenizer.tokenize(list(queries), update_vocab=False, show_progress=False)
        out = np.zeros(len(queries), dtype=np.float32)
        for i, (ids, d) in enumerate(zip(q_ids, doc_idx)):
            out[i] = self._model.get_scores_from_ids(list(ids))[d]
        return out


def mine_hard_negatives(
    queries: list[str],
    positives_idx: list[int],
    corpus: list[str],
    num_negatives: int,
    skip_top: int = 0,
    k1: float = 0.9,
    b: float = 0.4,
    index: BM25Index | None = None,
) -> list[list[tuple[int, float]]]:
    """For each query, up to `num_negatives` (corpus index, BM25 score) pairs, best first.

    The query's positive and any corpus text identical to it are excluded (duplicates would be false
    negatives). `skip_top` drops that many of the remaining top hits first: the very top BM25 hits are
    the likeliest unjudged relevant passages. Pass a prebuilt `index` over `corpus` to reuse it.
    """
    if len(queries) != len(positives_idx):
        raise ValueError(f"{len(queries)} queries but {len(positives_idx)} positives_idx")
    if index is None:
        index = BM25Index(corpus, k1=k1, b=b)
    # Group identical texts so one lookup finds every duplicate of a positive.
    by_text: dict[str, list[int]] = {}
    for i, t in enumerate(corpus):
        by_text.setdefault(t, []).append(i)
    max_dup = max(len(v) for v in by_text.values()) if by_text else 1
    docs, scores = index.search(queries, num_negatives + skip_top + max_dup)
    out: list[list[tuple[int, float]]] = []
    for qi, pos in enumerate(positives_idx):
        banned = set(by_text.get(corpus[pos], [pos])) | {pos}
        kept = [(int(d), float(s)) for d, s in zip(docs[qi], scores[qi]) if int(d) not in banned]
        out.append(kept[skip_top : skip_top + num_negatives])
    return out
