"""On the real data: no passage of any testbed evaluation corpus reaches training, dev, negative pools, MLM corpora or
tokenizer training. Every config the testbed runs is composed and its data sources instantiated, so a config that
points a row at a leaking source fails here. The evaluation passages come from the evaluation config itself, and texts
are compared in an independent normalization (case-folded, whitespace collapsed)."""
import re

import pytest
from hydra.utils import instantiate

from vtlab.data.boolq import boolq_triplets, train_pairs, validation_pairs
from vtlab.vocab.targets import CorpusWordPiece
from helpers import CONF, compose_cfg

pytestmark = pytest.mark.usefixtures("shared_cache")
ROWS = sorted(p.stem for p in (CONF / "experiment" / "testbed" / "main").glob("*.yaml"))


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def _compose(row: str):
    return compose_cfg([f"experiment=testbed/main/{row}"])


@pytest.fixture(scope="module")
def evaluation_passages():
    corpora = {}
    for name, ev in _compose("bpe-vt").eval.evaluations.items():
        coll = ev.collection
        # a subsampled set (vtlab.data.collections.subsampled) is checked whole: no passage of the full set may leak
        corpora[name] = instantiate(coll.load if "load" in coll else coll)()
    assert set(corpora) == {"boolq-clean", "squad", "sciriff", "qasper"}
    for name, coll in corpora.items():  # each query's gold passages are in its corpus
        assert all(d in coll.corpus for rel in coll.qrels.values() for d in rel), name
    return {_norm(t) for coll in corpora.values() for t in coll.corpus.values()}


def _triplet_texts(examples) -> set[str]:
    return {_norm(t) for ex in examples for t in (ex.positive, *ex.negatives)}


def test_boolq_clean_drops_every_shared_passage(evaluation_passages):
    train = {_norm(p) for _, p in train_pairs()}
    validation = {_norm(p) for _, p in validation_pairs()}
    assert len(validation & train) == 721  # the raw splits share passages (what BoolQ-clean removes)
    assert not (evaluation_passages & train)


def test_the_same_check_catches_the_old_leak_of_raw_boolq():
    """The raw triplets against the raw validation corpus (the old evaluation): the check sees the leak there."""
    leaked = _triplet_texts(boolq_triplets(num_negatives=8, seed=0)) & {_norm(p) for _, p in validation_pairs()}
    assert len(leaked) > 500


@pytest.mark.parametrize("row", ROWS)
def test_no_evaluation_passage_in_training_dev_mlm_or_tokenizer(row, evaluation_passages):
    cfg = _compose(row)
    data = cfg.data
    train = instantiate(data.train)  # the clean triplets: positives and the whole negative pool of each query
    assert len(train) > 8000
    assert not _triplet_texts(train) & evaluation_passages, f"{row}: training triplets hold an evaluation passage"
    dev = instantiate(data.dev)
    assert not {_norm(t) for t in dev.corpus.values()} & evaluation_passages, f"{row}: dev corpus leaks"
    dev_gold = {_norm(dev.corpus[d]) for rel in dev.qrels.values() for d in rel}
    assert not dev_gold & _triplet_texts(train), f"{row}: a dev gold passage is a training passage"
    # MLM corpora: the adaptation every arm gets, and the build of its pretrained model (backbone.mlm)
    for where, corpus in (("mlm", cfg.mlm.corpus), ("backbone.mlm", cfg.backbone.get("mlm", {}).get("corpus"))):
        if corpus is not None:
            texts = {_norm(t) for t in instantiate(corpus)()}
            assert len(texts) > 5000 and not texts & evaluation_passages, f"{row}: {where}.corpus leaks"
    # tokenizer training: a row whose vocabulary is trained on a corpus must train on a clean one
    vocab = instantiate(cfg.vocab)
    if isinstance(vocab, CorpusWordPiece):
        assert not {_norm(t) for t in vocab._texts()} & evaluation_passages, f"{row}: tokenizer corpus leaks"
