"""BM25Encoder: the sparse dot product is bm25s's own score; the README's BoolQ BM25 row through evaluate and the
CLI."""

from __future__ import annotations

import math
from pathlib import Path

import bm25s
import numpy as np
import pytest
from helpers import compose_config, need
from omegaconf import OmegaConf

from vtlab.core.errors import VtlabError
from vtlab.data.boolq import boolq_collection
from vtlab.evaluation import evaluate
from vtlab.models.bm25 import BM25Encoder
from vtlab.stages.build import build_encoder

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "A fox, a FOX and a fox: foxes are not the same as a fox.",
    "Dogs and cats; the dog barks, the cat meows.",
    "",  # bm25s counts an empty document as one (empty) token
    "Sparse retrieval with BM25 and SPLADE, 2 models in 1 lab_test",
    "the the the the the the the the the the the the the the the the a dog",
]
# Every query has a corpus word: bm25s maps a query made only of unknown words to its empty-document token (so it would
# "match" the empty document); BM25Encoder gives such a query no terms, and no document a score.
QUERIES = ["fox dog", "the fox the fox", "splade BM25 lab_test 1", "unicorn fox", "cat meows barks", "a"]


def _bm25s_scores(corpus: list[str], queries: list[str], k1: float, b: float) -> np.ndarray:
    """[Q, D] scores from bm25s itself (default "lucene" variant), tokenized the way vtlab.data.mining does."""
    tok = bm25s.tokenization.Tokenizer(lower=True, splitter=r"(?u)\b\w+\b", stopwords=None)
    ids = tok.tokenize(corpus, update_vocab=True, show_progress=False)
    model = bm25s.BM25(k1=k1, b=b)
    model.index(tok.to_tokenized_tuple(ids), show_progress=False)
    out = np.zeros((len(queries), len(corpus)))
    for i, q in enumerate(tok.tokenize(queries, update_vocab=False, show_progress=False)):
        if len(q):
            out[i] = model.get_scores_from_ids(list(q))
    return out


def _encoded_scores(corpus: list[str], queries: list[str], **kw: float) -> np.ndarray:
    enc = BM25Encoder(**kw)
    enc.fit_corpus(corpus)
    q, d = enc.encode(queries, side="query"), enc.encode(corpus, side="doc")
    assert q.shape == (len(queries), enc.vocab_size) and d.shape == (len(corpus), enc.vocab_size)
    return (q @ d.T).toarray()


@pytest.mark.parametrize("k1,b", [(0.9, 0.4), (1.2, 0.75), (0.0, 0.0), (2.0, 1.0)])
def test_dot_product_equals_bm25s_scores(k1: float, b: float) -> None:
    ours = _encoded_scores(CORPUS, QUERIES, k1=k1, b=b)
    ref = _bm25s_scores(CORPUS, QUERIES, k1=k1, b=b)
    assert np.abs(ref).max() > 1.0  # the comparison is not between two all-zero matrices
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-5)


def test_weights_follow_the_formula_written_out() -> None:
    docs = ["apple apple pie", "pie crust", "banana"]
    enc = BM25Encoder(k1=1.5, b=0.5)
    enc.fit_corpus(docs)
    w = enc.encode(docs, side="doc").toarray()
    n, avgdl = 3, (3 + 2 + 1) / 3
    idf = lambda df: math.log(1 + (n - df + 0.5) / (df + 0.5))  # noqa: E731
    tfc = lambda tf, dl: tf / (tf + 1.5 * (1 - 0.5 + 0.5 * dl / avgdl))  # noqa: E731
    assert w[0, enc.vocab["apple"]] == pytest.approx(idf(1) * tfc(2, 3), rel=1e-6)
    assert w[1, enc.vocab["pie"]] == pytest.approx(idf(2) * tfc(1, 2), rel=1e-6)
    assert w[2, enc.vocab["banana"]] == pytest.approx(idf(1) * tfc(1, 1), rel=1e-6)
    assert (w > 0).sum() == 5  # one weight per distinct (doc, word)
    q = enc.encode(["Apple pie, apple! kiwi"], side="query").toarray()[0]
    assert q[enc.vocab["apple"]] == 2 and q[enc.vocab["pie"]] == 1 and q.sum() == 3  # counts; unknown words dropped


def test_refit_replaces_the_vocabulary_and_unfitted_use_fails() -> None:
    enc = BM25Encoder()
    assert enc.vocab_size == 0
    with pytest.raises(VtlabError, match="fit_corpus"):
        enc.encode(["x"], side="query")
    enc.fit_corpus(["a b c"])
    enc.fit_corpus(["d e"])
    assert enc.vocab == {"d": 0, "e": 1}
    with pytest.raises(VtlabError, match="k1"):
        BM25Encoder(k1=-1)


def test_boolq_validation_matches_the_readme_bm25_row() -> None:
    coll = need(boolq_collection, "validation")
    metrics = evaluate(BM25Encoder(k1=0.9, b=0.4), coll, show_progress=False)
    assert round(metrics["nDCG@10"], 4) == 0.7656
    assert round(metrics["RR@10"], 4) == 0.7306
    assert round(metrics["R@100"], 4) == 0.9422


def test_config_builds_bm25_without_a_backbone(tmp_path: Path) -> None:
    cfg = compose_config(["stage=evaluate", "model=bm25", "eval=ood", f"paths.run_dir={tmp_path}"])
    OmegaConf.to_container(cfg, resolve=True)
    assert cfg.vocab.name == "native"  # nothing to transfer, so no backbone baseline either
    enc = build_encoder(cfg)
    assert isinstance(enc, BM25Encoder) and (enc.k1, enc.b) == (0.9, 0.4)
