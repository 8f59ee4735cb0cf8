"""Near-duplicate texts between two sets, computed exactly: shared word 8-grams for passages, rarity-weighted shared
words for questions.

Texts are compared as `words` (case-folded; every run of characters that is not a letter or digit breaks words, so
punctuation, quotes and spacing do not matter).

Passages: sets of word 8-grams (`PASSAGE_N`). 8 words are long enough that two different paragraphs on one topic share
almost none, short enough that one edited word costs only the 8 shingles it sits in. Two passages are near-duplicates
when they share at least half of the shingles of the shorter one: overlap coefficient |A ∩ B| / min(|A|, |B|) ≥ 0.5
(`THRESHOLD`). It is never below the Jaccard |A ∩ B| / |A ∪ B|, so every pair with Jaccard ≥ 0.5 is caught, and so is a
passage mostly contained in a longer (or shorter) revision of itself, which the Jaccard misses when the lengths differ.
`near_duplicate_pairs` is an exact similarity join by prefix filtering (Bayardo et al., WWW 2007): shingles are ranked
rarest first; a set sharing ≥ ⌈t·|x|⌉ shingles with x shares one of x's first |x| − ⌈t·|x|⌉ + 1, so only pairs where one
side's prefix meets the other side are verified. No hashing, no false negatives; thousands × tens of thousands of
passages take seconds on one core.

Questions (≈ 9 words, many on a few templates: "is there such a thing as …", "… based on a true story"): word n-grams do
not work. One inserted word removes n − 1 of a question's n-grams and adds n ("does the president live in the white
house" vs "does the us president live in the white house": 3-gram Jaccard 0.44), while two questions on one template
about different things share most of their 2- and 3-grams. So a question is its set of words, each weighted by its
rarity among the training questions (idf = log((1 + N) / (1 + df))), and two questions are near-duplicates at weighted
Jaccard Σ idf(A ∩ B) / Σ idf(A ∪ B) ≥ 0.7 (`QUESTION_THRESHOLD`): template words weigh little, the words that say what
is asked weigh most, and word order does not matter ("is a football field equal to an acre" = "is an acre equal to a
football field").
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import sparse

from vtlab.data.collections import Collection

PASSAGE_N = 8
THRESHOLD = 0.5  # passages: overlap coefficient (or Jaccard) of their word-8-gram sets
MEASURES = ("overlap", "jaccard")
QUESTION_THRESHOLD = 0.7  # questions: idf-weighted word Jaccard
_WORD = re.compile(r"[^\W_]+")  # letters and digits of any script; "_" and punctuation break words


def words(text: str) -> list[str]:
    """The text's words, case-folded: the form every comparison starts from."""
    return _WORD.findall(text.casefold())


def shingles(text: str, n: int) -> frozenset[str]:
    """The set of word n-grams of `text` (a shorter non-empty text: one shingle of all its words)."""
    ws = words(text)
    if len(ws) <= n:
        return frozenset([" ".join(ws)]) if ws else frozenset()
    return frozenset(" ".join(ws[i : i + n]) for i in range(len(ws) - n + 1))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 0.0


@dataclass(frozen=True)
class Pair:
    """texts[i] and references[j] are near-duplicates with similarity `similarity`."""

    i: int
    j: int
    similarity: float


def _ids(sets: Sequence[frozenset[str]], vocab: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """(row, shingle id) of every shingle of every set, ids from `vocab` (grown as needed)."""
    rows = np.repeat(np.arange(len(sets)), [len(s) for s in sets])
    cols = np.fromiter((vocab.setdefault(g, len(vocab)) for s in sets for g in s), dtype=np.int64, count=len(rows))
    return rows, cols


def _matrix(
    rows: np.ndarray, cols: np.ndarray, shape: tuple[int, int], values: np.ndarray | None = None
) -> sparse.csr_matrix:
    data = np.ones(len(rows), dtype=np.float64) if values is None else values
    return sparse.csr_matrix((data, (rows, cols)), shape=shape)


def _prefix(rows: np.ndarray, ranks: np.ndarray, n_rows: int, threshold: float) -> np.ndarray:
    """Mask of the entries in each row's prefix: its |x| − ⌈t·|x|⌉ + 1 lowest ranks (the rarest shingles)."""
    order = np.lexsort((ranks, rows))
    sizes = np.bincount(rows, minlength=n_rows)
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    position = np.empty(len(rows), dtype=np.int64)
    position[order] = np.arange(len(rows)) - starts[rows[order]]
    keep = sizes - np.ceil(threshold * sizes - 1e-9).astype(np.int64) + 1  # 1e-9: 0.8 × 5 is 4.000…1 in floats
    return position < keep[rows]


def near_duplicate_pairs(
    texts: Sequence[str],
    references: Sequence[str],
    n: int = PASSAGE_N,
    threshold: float = THRESHOLD,
    measure: str = "overlap",
) -> list[Pair]:
    """Every (text, reference) pair whose word-n-gram shingle sets have `measure` ≥ `threshold`, exactly; sorted.
    measure: "overlap" (|A ∩ B| / min(|A|, |B|)) or "jaccard" (|A ∩ B| / |A ∪ B|)."""
    if not 0 < threshold <= 1 or measure not in MEASURES:
        raise ValueError(
            f"near_duplicate_pairs: threshold={threshold!r} must be in (0, 1] and measure={measure!r} one of {MEASURES}"
        )
    vocab: dict[str, int] = {}
    (ra, ca), (rb, cb) = (_ids([shingles(t, n) for t in side], vocab) for side in (texts, references))
    freq = np.bincount(np.concatenate((ca, cb)), minlength=len(vocab))
    rank = np.empty(len(vocab), dtype=np.int64)
    rank[np.lexsort((np.arange(len(vocab)), freq))] = np.arange(len(vocab))  # rarest first, ties by id
    ca, cb = rank[ca], rank[cb]
    shape_a, shape_b = (len(texts), len(vocab)), (len(references), len(vocab))
    full_a, full_b = _matrix(ra, ca, shape_a), _matrix(rb, cb, shape_b)
    pa, pb = _prefix(ra, ca, len(texts), threshold), _prefix(rb, cb, len(references), threshold)
    # both measures need |A ∩ B| ≥ ⌈t·|smaller side|⌉: the smaller side's prefix meets the other side
    candidates = (_matrix(ra[pa], ca[pa], shape_a) @ full_b.T + full_a @ _matrix(rb[pb], cb[pb], shape_b).T).tocoo()
    if candidates.nnz == 0:
        return []
    i, j = candidates.row, candidates.col
    shared = np.asarray(full_a[i].multiply(full_b[j]).sum(axis=1)).ravel()
    size_a, size_b = np.bincount(ra, minlength=len(texts))[i], np.bincount(rb, minlength=len(references))[j]
    sim = shared / (np.minimum(size_a, size_b) if measure == "overlap" else size_a + size_b - shared)
    return _pairs(i, j, sim, threshold)


def _pairs(i: np.ndarray, j: np.ndarray, sim: np.ndarray, threshold: float) -> list[Pair]:
    keep = sim >= threshold - 1e-12
    i, j, sim = i[keep], j[keep], sim[keep]
    order = np.lexsort((j, i))
    return [Pair(int(x), int(y), float(s)) for x, y, s in zip(i[order], j[order], sim[order])]


def similar_question_pairs(
    questions: Sequence[str], references: Sequence[str], threshold: float = QUESTION_THRESHOLD
) -> list[Pair]:
    """Every (question, reference) pair whose word sets have idf-weighted Jaccard ≥ `threshold` (idf: rarity among
    the references, log((1 + N) / (1 + df))), exactly; sorted.

    Candidates by weighted prefix filtering: the pair's shared weight must reach t·w(A), so it cannot lie wholly in
    A's lightest words that weigh less than t·w(A) together; only references holding one of A's other words are
    verified."""
    if not 0 < threshold <= 1:
        raise ValueError(f"similar_question_pairs: threshold={threshold!r} must be in (0, 1]")
    vocab: dict[str, int] = {}
    (ra, ca), (rb, cb) = (_ids([frozenset(words(t)) for t in side], vocab) for side in (questions, references))
    # rarity among the references only, so a pair's similarity does not depend on which other questions are asked
    idf = np.log((1 + len(references)) / (1 + np.bincount(cb, minlength=len(vocab))))
    weight_a = np.bincount(ra, weights=idf[ca], minlength=len(questions))  # Σ idf of each question's words
    weight_b = np.bincount(rb, weights=idf[cb], minlength=len(references))
    order = np.lexsort((idf[ca], ra))  # grouped by question, lightest word first
    before = np.concatenate(([0.0], np.cumsum(weight_a)))[ra[order]]  # the earlier questions' words
    upto = np.empty(len(ra))
    upto[order] = np.cumsum(idf[ca][order]) - before  # per word: its question's words up to it, lightest first
    prefix = upto >= threshold * weight_a[ra] - 1e-9
    shape_a, shape_b = (len(questions), len(vocab)), (len(references), len(vocab))
    full_b = _matrix(rb, cb, shape_b)
    candidates = (_matrix(ra[prefix], ca[prefix], shape_a) @ full_b.T).tocoo()
    if candidates.nnz == 0:
        return []
    i, j = candidates.row, candidates.col
    shared = np.asarray(_matrix(ra, ca, shape_a, idf[ca])[i].multiply(full_b[j]).sum(axis=1)).ravel()
    union = weight_a[i] + weight_b[j] - shared
    return _pairs(i, j, np.divide(shared, union, out=np.zeros_like(shared), where=union > 0), threshold)


@dataclass(frozen=True)
class Dropped:
    """What `drop_near_duplicates` removed from an evaluation collection."""

    passages: int  # corpus passages that near-duplicate a training passage
    questions: int  # questions that near-duplicate a training question, or are judged on a dropped passage

    def describe(self, name: str) -> str:
        return (
            f"{name}: dropped {self.passages} passages (≥ {THRESHOLD:.0%} of the word {PASSAGE_N}-grams of the "
            f"shorter one shared with a training passage) and {self.questions} questions (idf-weighted word "
            f"Jaccard ≥ {QUESTION_THRESHOLD} with a training question, or judged on a dropped passage)"
        )


def drop_near_duplicates(
    coll: Collection, train_passages: Sequence[str], train_questions: Sequence[str]
) -> tuple[Collection, Dropped]:
    """`coll` without its passages that near-duplicate a training passage and without its questions that
    near-duplicate a training question or are judged on a dropped passage (a question whose answer passage was
    trained on is no held-out question)."""
    doc_ids, q_ids = list(coll.corpus), list(coll.queries)
    bad_docs = {doc_ids[p.i] for p in near_duplicate_pairs(list(coll.corpus.values()), train_passages)}
    bad_q = {q_ids[p.i] for p in similar_question_pairs(list(coll.queries.values()), train_questions)}
    bad_q |= {q for q, rel in coll.qrels.items() if any(g > 0 and d in bad_docs for d, g in rel.items())}
    kept = Collection(
        name=coll.name,
        corpus={d: t for d, t in coll.corpus.items() if d not in bad_docs},
        queries={q: t for q, t in coll.queries.items() if q not in bad_q},
        qrels={q: rel for q, rel in coll.qrels.items() if q not in bad_q},
    )
    return kept, Dropped(passages=len(bad_docs), questions=len(set(coll.queries) & bad_q))
