"""The warning before a corpus is encoded into useless vectors (vtlab.evaluation.vector_check): the rule on synthetic
sparse matrices (dense, empty, usable, the thresholds' edges), and end to end on a random-init tiny model, whose
vectors are dense, against a trained SPLADE-tiny, whose vectors are not."""

from __future__ import annotations

import logging

import numpy as np
import scipy.sparse as sp

from vtlab.backbones import Backbone, TinyBert
from vtlab.core import progress as progress_module
from vtlab.core.progress import INTERVAL_ENV
from vtlab.data.collections import Collection
from vtlab.evaluation import evaluate
from vtlab.evaluation.vector_check import DENSE_SHARE, EMPTY_SHARE, vector_problem, vector_warning
from vtlab.models.encoder import SpladeEncoder

TEXTS = [
    "A sonnet is a poetic form of fourteen lines that originated in Italy.",
    "The Amazon River in South America is the largest river by discharge volume of water.",
    "Python is a high-level programming language whose design emphasizes code readability.",
    "In economics, inflation is a general increase in the prices of goods and services.",
    "The cat sat on the mat.",
    "Jupiter is the largest planet in the Solar System.",
]


def small_collection() -> Collection:
    queries = {"q0": "poem of fourteen lines", "q1": "largest river"}
    return Collection("small", {f"d{i}": t for i, t in enumerate(TEXTS)}, queries, {"q0": {"d0": 1}, "q1": {"d1": 1}})


def rows_with(active: list[int], vocab: int) -> sp.csr_matrix:
    """One row per entry, with that many non-zero weights (the first terms of the vocabulary)."""
    dense = np.zeros((len(active), vocab), dtype=np.float32)
    for i, n in enumerate(active):
        dense[i, :n] = 0.5
    return sp.csr_matrix(dense)


def test_the_rule_on_dense_empty_and_usable_vectors():
    vocab = 200
    assert vector_problem(rows_with([190, 180, 200, 170], vocab)) == "dense"
    assert vector_problem(rows_with([0, 0, 0, 12], vocab)) == "empty"
    assert vector_problem(rows_with([30, 45, 12, 0], vocab)) is None  # one empty passage of four is no verdict
    assert vector_problem(sp.csr_matrix((0, vocab), dtype=np.float32)) is None
    # the edges: exactly half the vocabulary on average, exactly half the passages empty, are not flagged
    assert DENSE_SHARE == 0.5 and EMPTY_SHARE == 0.5
    assert vector_problem(rows_with([100, 100], vocab)) is None
    assert vector_problem(rows_with([101, 101], vocab)) == "dense"
    assert vector_problem(rows_with([0, 0, 5, 5], vocab)) is None
    assert vector_problem(rows_with([0, 0, 0, 5], vocab)) == "empty"
    # explicit zeros are no active terms: stored entries of weight 0 make no vector dense
    stored_zeros = sp.csr_matrix((np.zeros(2 * vocab, np.float32), np.tile(np.arange(vocab), 2), [0, vocab, 2 * vocab]))
    assert stored_zeros.nnz == 2 * vocab and vector_problem(stored_zeros) == "empty"


def test_the_warning_gives_the_figures():
    dense = vector_warning(rows_with([190, 180, 200, 170], 200), 3825, "e5-small on scifact")
    assert dense == (
        "e5-small on scifact: the first 4 passages have 185 of 200 terms active on average (92%): the vectors are "
        "dense, so encoding 3,825 passages is slow and retrieval meaningless; train the head (stage=all) or "
        "calibrate the bias (apc=p60)"
    )
    empty = vector_warning(rows_with([0, 0, 0, 12], 200), 3825, "m")
    assert empty is not None and empty.startswith("m: 3 of the first 4 passages have no active term: the vectors are")
    assert vector_warning(rows_with([30, 45, 12, 0], 200), 3825, "m") is None


def _warnings(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno == logging.WARNING and "terms active" in r.getMessage()]


def test_a_random_init_head_is_warned_of_once_before_the_rest_is_encoded(monkeypatch, caplog, shared_cache):
    monkeypatch.setattr(progress_module, "interactive", lambda: False)
    monkeypatch.setenv(INTERVAL_ENV, "0")
    encoder = SpladeEncoder.from_backbone(TinyBert(), doc_max_length=48, precision="fp32")
    calls = []
    encode = encoder.encode
    monkeypatch.setattr(
        encoder, "encode", lambda texts, side, **kw: calls.append((side, len(texts))) or encode(texts, side, **kw)
    )
    with caplog.at_level(logging.INFO, logger="vtlab"):
        evaluate(encoder, small_collection(), batch_size=4)
    (warning,) = _warnings(caplog)
    vocab = encoder.vocab_size
    reference = encoder.encode(TEXTS, "doc", show_progress=False)  # an independent count: all 6 passages
    share = np.diff(reference.indptr).mean() / vocab
    assert share > 0.5  # the premise: a random-init MLM head after ReLU + log1p is dense
    assert f" of {vocab:,} terms active on average (" in warning.getMessage()
    assert (
        warning.getMessage().startswith("tiny-bert-")
        and " on small: the first 4 passages have " in warning.getMessage()
    )
    # logged after the first batch, before the corpus's first progress line: no passage encoded twice
    messages = [r.getMessage() for r in caplog.records]
    first_corpus_line = next(i for i, m in enumerate(messages) if m.startswith("encoding corpus: "))
    assert messages.index(warning.getMessage()) < first_corpus_line
    assert calls[:2] == [("query", 2), ("doc", 6)]


def test_a_trained_model_is_not_warned_of_and_other_encoders_are_checked_after(caplog, shared_cache):
    encoder = SpladeEncoder.from_backbone(Backbone("asset:splade-tiny"), doc_max_length=48, precision="fp32")
    with caplog.at_level(logging.INFO, logger="vtlab"):
        evaluate(encoder, small_collection(), batch_size=4, show_progress=False)
    assert _warnings(caplog) == []

    class Empty:
        """An encoder without `first_batch`: every passage comes back with no active term."""

        vocab_size = 50

        def encode(self, texts, side, batch_size=64, show_progress=True):
            m = sp.lil_matrix((len(texts), self.vocab_size), dtype=np.float32)
            if side == "query":
                m[:, 0] = 1.0
            return m.tocsr()

    caplog.clear()
    with caplog.at_level(logging.INFO, logger="vtlab"):
        evaluate(Empty(), small_collection(), batch_size=4, show_progress=False)
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING and "no active term" in r.getMessage()]
    assert warning.getMessage().startswith("Empty on small: 4 of the first 4 passages have no active term")
