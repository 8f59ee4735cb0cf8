"""On the real data: no passage of any testbed evaluation corpus reaches training, dev, negative pools, MLM corpora or
tokenizer training, neither verbatim nor as a near-copy, and no evaluation question near-copies a training question.
Every config the testbed runs is composed and its data sources instantiated, so a config that points a row at a
leaking source fails here. The evaluation sets come from the evaluation config itself; exact matches are compared in
an independent normalization (case-folded, whitespace collapsed), near-copies with vtlab.data.near_duplicates."""

import re
import time

import pytest
from helpers import CONF, compose_config
from hydra.utils import instantiate

from vtlab.data.boolq import boolq_triplets, train_pairs, validation_pairs
from vtlab.data.clean import boolq_clean_collection, boolq_clean_dropped, clean_validation_pairs
from vtlab.data.near_duplicates import near_duplicate_pairs, shingles, similar_question_pairs
from vtlab.vocab.targets import CorpusWordPiece

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("shared_cache")]
ROWS = sorted(p.stem for p in (CONF / "experiment" / "testbed" / "main").glob("*.yaml"))
WHITE_HOUSE_EVAL, WHITE_HOUSE_TRAIN = (
    "does the president live in the white house",
    "does the us president live in the white house",
)


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def _compose(row: str):
    return compose_config([f"experiment=testbed/main/{row}"])


@pytest.fixture(scope="module")
def evaluation_sets():
    corpora = {}
    for name, ev in _compose("bpe-vt").eval.evaluations.items():
        coll = ev.collection
        # a subsampled set (vtlab.data.collections.subsampled) is checked whole: no passage of the full set may leak
        corpora[name] = instantiate(coll.load if "load" in coll else coll)()
    assert set(corpora) == {"boolq-clean", "squad", "sciriff", "qasper"}
    for name, coll in corpora.items():  # each query's gold passages are in its corpus
        assert all(d in coll.corpus for rel in coll.qrels.values() for d in rel), name
    return corpora


@pytest.fixture(scope="module")
def evaluation_passages(evaluation_sets):
    return {_norm(t) for coll in evaluation_sets.values() for t in coll.corpus.values()}


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


def test_near_duplicate_check_catches_the_white_house_pair():
    """A validation question and passage that the exact check lets through: the passage is the training one with a
    few words changed, the question the training one without "us". The near-duplicate check flags both, and
    BoolQ-clean no longer holds the question."""
    ((q_eval, p_eval),) = [(q, p) for q, p in validation_pairs() if q == WHITE_HOUSE_EVAL]
    ((q_train, p_train),) = [(q, p) for q, p in train_pairs() if q == WHITE_HOUSE_TRAIN]
    assert _norm(p_eval) != _norm(p_train)  # the exact check misses it
    a, b = shingles(p_eval, 8), shingles(p_train, 8)
    assert len(a & b) / len(a | b) >= 0.5 and len(a & b) / min(len(a), len(b)) >= 0.5
    (pair,) = near_duplicate_pairs([p_eval], [p_train])
    assert pair.similarity == pytest.approx(len(a & b) / min(len(a), len(b)))
    (pair,) = near_duplicate_pairs([p_eval], [p_train], measure="jaccard")
    assert pair.similarity == pytest.approx(len(a & b) / len(a | b))
    # questions: word 3-grams miss it (4 of 9 shared), the rarity-weighted word sets catch it
    g3, t3 = shingles(q_eval, 3), shingles(q_train, 3)
    assert len(g3 & t3) / len(g3 | t3) == pytest.approx(4 / 9)
    assert [
        p.j for p in similar_question_pairs([q_eval], [q for q, _ in train_pairs()]) if train_pairs()[p.j][0] == q_train
    ]
    assert q_eval not in {q for q, _ in clean_validation_pairs()}


def test_boolq_clean_holds_no_near_copy_of_a_training_text():
    """The full BoolQ-clean evaluation set against every BoolQ training text (a superset of what training triplets,
    negative pools, dev and the MLM corpora hold): no passage with Jaccard ≥ 0.5 — nor sharing half of the shorter
    one's 8-grams — and no question near-copying a training question."""
    start = time.perf_counter()
    coll = boolq_clean_collection("validation")
    train_passages = list(dict.fromkeys(p for _, p in train_pairs()))
    passages = list(coll.corpus.values())
    assert not near_duplicate_pairs(passages, train_passages, measure="jaccard")
    assert not near_duplicate_pairs(passages, train_passages, measure="overlap")
    assert not similar_question_pairs(list(coll.queries.values()), [q for q, _ in train_pairs()])
    dropped = boolq_clean_dropped()
    assert (len(coll.corpus), len(coll.queries)) == (dropped["passages_kept"], dropped["questions_kept"])
    assert dropped["passages_exact"] == 721 and dropped["passages_near_duplicate"] > 80
    assert dropped["questions_near_duplicate_passage"] > 80 and dropped["questions_near_duplicate_question"] > 30
    assert time.perf_counter() - start < 60


def test_no_evaluation_set_holds_a_near_copy_of_a_training_text(evaluation_sets):
    """Every set of the testbed's evaluation config, out-of-domain ones included (their loaders leave out what
    near-copies BoolQ train), against every BoolQ training passage and question."""
    train_passages = list(dict.fromkeys(p for _, p in train_pairs()))
    train_questions = [q for q, _ in train_pairs()]
    for name, coll in evaluation_sets.items():
        assert not near_duplicate_pairs(list(coll.corpus.values()), train_passages), name
        assert not similar_question_pairs(list(coll.queries.values()), train_questions), name


_NEAR_CHECKED: set[int] = set()  # training-text sets already checked: the rows share their data


def _assert_no_near_copy(row: str, where: str, texts: set[str], evaluation_passages: set[str]) -> None:
    key = hash(frozenset(texts))
    if key not in _NEAR_CHECKED:
        pairs = near_duplicate_pairs(sorted(evaluation_passages), sorted(texts))
        assert not pairs, f"{row}: {where} near-copies {len(pairs)} evaluation passages"
        _NEAR_CHECKED.add(key)


@pytest.mark.parametrize("row", ROWS)
def test_no_evaluation_passage_in_training_dev_mlm_or_tokenizer(row, evaluation_passages):
    cfg = _compose(row)
    data = cfg.data
    train = instantiate(data.train)  # the clean triplets: positives and the whole negative pool of each query
    assert len(train) > 8000
    assert not _triplet_texts(train) & evaluation_passages, f"{row}: training triplets hold an evaluation passage"
    assert {ex.query for ex in train} <= {q for q, _ in train_pairs()}  # what the question check compares against
    dev = instantiate(data.dev)
    assert not {_norm(t) for t in dev.corpus.values()} & evaluation_passages, f"{row}: dev corpus leaks"
    dev_gold = {_norm(dev.corpus[d]) for rel in dev.qrels.values() for d in rel}
    assert not dev_gold & _triplet_texts(train), f"{row}: a dev gold passage is a training passage"
    seen = _triplet_texts(train) | {_norm(t) for t in dev.corpus.values()}
    # MLM corpora: the adaptation every arm gets, and the build of its pretrained model (backbone.mlm)
    for where, corpus in (("mlm", cfg.mlm.corpus), ("backbone.mlm", cfg.backbone.get("mlm", {}).get("corpus"))):
        if corpus is not None:
            texts = {_norm(t) for t in instantiate(corpus)()}
            assert len(texts) > 5000 and not texts & evaluation_passages, f"{row}: {where}.corpus leaks"
            assert not texts & dev_gold, f"{row}: {where}.corpus holds a dev gold passage"
            seen |= texts
    _assert_no_near_copy(row, "training, dev or MLM", seen, evaluation_passages)
    # tokenizer training: a row whose vocabulary is trained on a corpus must train on a clean one
    vocab = instantiate(cfg.vocab)
    if isinstance(vocab, CorpusWordPiece):
        assert not {_norm(t) for t in vocab._texts()} & evaluation_passages, f"{row}: tokenizer corpus leaks"


def test_the_default_mlm_corpus_reads_no_evaluation_or_dev_passage(evaluation_passages):
    """`python -m vtlab mlm.steps=N` (the quickstart with an MLM stage): its corpus is the clean training passages
    less the run's own dev golds, at any seed — never a BoolQ validation passage."""
    cfg = compose_config(["mlm.steps=100", "seed=3"])
    texts = {_norm(t) for t in instantiate(cfg.mlm.corpus)()}
    dev = instantiate(cfg.data.dev)
    assert cfg.data.dev.seed == 3 and len(texts) > 5000
    assert not texts & evaluation_passages
    assert not texts & {_norm(dev.corpus[d]) for rel in dev.qrels.values() for d in rel}
