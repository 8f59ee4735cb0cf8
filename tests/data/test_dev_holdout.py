"""The DEV split (held-out clean training questions, for model selection) is kept out of training by the rule that keeps
the evaluation sets out (vtlab.data.near_duplicates): no dev gold passage or near-copy of one in the training triplets
(positives, negative pools), the MLM corpora or a corpus tokenizer's texts, and no dev question or near-copy of one
among the training queries (vtlab.data.clean.dev_holdout).

A planted near-copy goes through the builders' own input (clean_train_pairs) and must not come out; every row of every
testbed table (conf/tables/testbed.yaml), composed at seeds 0-2, is instantiated the way the pipeline does and checked
against its dev splits (data.dev and its selection suite); so is the quickstart (the default config, whose dev split
and corpus WordPiece follow the seed)."""

import itertools
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import CONF, compose_config
from hydra.utils import instantiate
from omegaconf import DictConfig, ListConfig, OmegaConf

from vtlab.data import clean
from vtlab.data.boolq import split_train
from vtlab.data.corpora import TextCorpus
from vtlab.data.near_duplicates import near_duplicate_pairs, similar_question_pairs, words
from vtlab.data.overlap import normalize

pytestmark = pytest.mark.slow

SEEDS = (0, 1, 2)
TABLES = OmegaConf.to_container(OmegaConf.load(CONF / "tables" / "testbed.yaml"))


def _experiments(table: str) -> list[str]:
    """The `experiment=` names of a table: its row files, or its one sweep config."""
    rows = TABLES[table].get("rows")
    return [f"testbed/{table}/{row}" for row in rows] if rows else [f"testbed/{table}"]


def _clear() -> None:
    """Forget what was derived from clean_train_pairs() in this process."""
    clean._dev_holdout.cache_clear()
    clean._training_passages.cache_clear()


# -- a planted near-copy ----------------------------------------------------------------------------------------------
def _near_passage(text: str) -> str:
    """`text` with 3 words replaced, spread out: no longer the same text, still sharing most of its word 8-grams."""
    tokens = text.split()
    for at in (len(tokens) // 4, len(tokens) // 2, 3 * len(tokens) // 4):
        tokens[at] = "planted"
    return " ".join(tokens)


AUXILIARY = {"is": "was", "does": "did", "can": "could", "are": "were", "do": "did", "has": "had"}


def _near_question(text: str) -> str:
    """`text` asked in another tense: its first word (an auxiliary, a light word among the training questions)
    replaced."""
    first, rest = text.split(" ", 1)
    return f"{AUXILIARY[first]} {rest}"


@pytest.fixture
def planted(monkeypatch: pytest.MonkeyPatch, empty_cache: Any) -> Iterator[dict[str, Any]]:
    """The real clean training pairs with two training questions rewritten: one judged on a near-copy of a real dev
    gold passage, one a near-copy of a real dev question (dev_size 300, seed 0). Their count is unchanged, so the dev
    split is the real one."""
    real = clean.clean_train_pairs()
    train_idx, dev_idx = split_train(300, 0, n=len(real))
    gold = next(real[k][2] for k in dev_idx if len(words(real[k][2])) >= 80)
    question = next(real[k][1] for k in dev_idx if real[k][1].split(" ", 1)[0] in AUXILIARY)
    near_p, near_q = _near_passage(gold), _near_question(question)
    # the exact check misses both; the near-duplicate rule catches both
    assert normalize(near_p) != normalize(gold) and normalize(near_q) != normalize(question)
    (pair,) = near_duplicate_pairs([near_p], [gold])
    assert 0.5 <= pair.similarity < 1
    held = clean.dev_holdout(300, 0)
    a, b = [k for k in train_idx if k not in held.questions][:2]  # two training questions the builders keep
    pairs = list(real)
    pairs[a] = (real[a][0], real[a][1], near_p)
    pairs[b] = (real[b][0], near_q, real[b][2])
    monkeypatch.setattr(clean, "clean_train_pairs", lambda: tuple(pairs))
    _clear()
    assert [p.j for p in similar_question_pairs([question], [q for _, q, _ in pairs]) if p.j == b] == [b]
    yield {"near_p": near_p, "near_q": near_q, "on_near_p": f"t{real[a][0]}", "near_q_id": f"t{real[b][0]}"}
    _clear()


def test_a_planted_near_copy_of_a_dev_gold_passage_or_question_is_not_trained_on(planted):
    near_p, near_q = normalize(planted["near_p"]), normalize(planted["near_q"])
    # the plant reaches the builders: the exact-only exclusion trains on both
    exact = clean.boolq_clean_triplets(num_negatives=8, dev_size=300, seed=0, dev_near_copies=False)
    assert near_p in {normalize(ex.positive) for ex in exact}
    assert near_q in {normalize(ex.query) for ex in exact}
    assert near_p in {normalize(t) for t in clean.clean_mlm_corpus(dev_near_copies=False)}

    triplets = clean.boolq_clean_triplets(num_negatives=8, dev_size=300, seed=0)
    assert near_p not in {normalize(t) for ex in triplets for t in (ex.positive, *ex.negatives)}
    assert near_q not in {normalize(ex.query) for ex in triplets}
    ids = {ex.query_id for ex in triplets}
    assert planted["on_near_p"] not in ids and planted["near_q_id"] not in ids
    assert len(exact) - len(triplets) == clean.dev_holdout(300, 0).on_near + clean.dev_holdout(300, 0).near_questions
    assert near_p not in {normalize(t) for t in clean.clean_mlm_corpus(dev_size=300, dev_seed=0)}
    assert near_p not in {normalize(t) for t in TextCorpus()()}  # vocab=corpus-wordpiece's default texts


# -- every composed testbed row ---------------------------------------------------------------------------------------
def _key(node: Any) -> str:
    return json.dumps(OmegaConf.to_container(node, resolve=True), sort_keys=True, default=str)


def _text_sources(node: Any, path: str = "") -> Iterator[tuple[str, DictConfig]]:
    """(config path, node) of every text corpus a config trains on besides data.train: each `corpus` of an `mlm`
    node (the run's MLM stage, a backbone's build) and each vocabulary trained on a corpus."""
    if isinstance(node, DictConfig):
        target = str(node.get("_target_", ""))
        if target.endswith(".CorpusWordPiece"):
            yield path, node
            return
        for k, child in node.items_ex(resolve=False):
            if k == "corpus" and path.split(".")[-1] == "mlm" and isinstance(child, DictConfig) and "_target_" in child:
                yield f"{path}.corpus", child
            else:
                yield from _text_sources(child, f"{path}.{k}" if path else str(k))
    elif isinstance(node, ListConfig):
        for i, child in enumerate(node):
            yield from _text_sources(child, f"{path}[{i}]")


def _texts(node: DictConfig) -> list[str]:
    obj = instantiate(node)
    if hasattr(obj, "_texts"):  # a vocabulary trained on a corpus: the texts it trains on
        return list(obj._texts())
    return list(obj() if callable(obj) else obj)


HELD_OUT = "vtlab.data.splits.held_out"


def _collections(suite: DictConfig) -> Iterator[DictConfig]:
    """The dev collections to check against training. The parts cut from an out-of-domain evaluation set
    (vtlab.data.splits.held_out) are left to tests/data/test_testbed_leak.py, which holds every passage of those sets
    (olmo_eval.LOADERS, whole) out of training, the MLM corpora and the tokenizers."""
    for ev in suite.evaluations.values():
        coll = ev.collection
        node = coll.load if "load" in coll else coll
        held = next((c for c in (coll, node) if c.get("_target_") == HELD_OUT), None)
        if held is not None:
            assert held.load._target_.startswith("vtlab.data.olmo_eval."), held
            continue
        yield node


_DEVS: dict[str, tuple[list[str], list[str]]] = {}  # dev collection config -> (gold passages, questions)
_CHECKED: set[tuple[str, str]] = set()  # (dev, training source) pairs already checked: the rows share their data


def _dev(node: DictConfig) -> tuple[list[str], list[str]]:
    key = _key(node)
    if key not in _DEVS:
        coll = instantiate(node)
        coll = coll() if callable(coll) else coll
        gold = list(dict.fromkeys(coll.corpus[d] for rel in coll.qrels.values() for d, g in rel.items() if g > 0))
        _DEVS[key] = (gold, list(coll.queries.values()))
    return _DEVS[key]


def _check_passages(where: str, gold: list[str], texts: list[str]) -> None:
    texts = list(dict.fromkeys(texts))
    assert not {normalize(g) for g in gold} & set(map(normalize, texts)), f"{where} holds a dev gold passage"
    found = near_duplicate_pairs(gold, texts)
    assert not found, f"{where} holds {len(found)} near-copies of dev gold passages, e.g. {texts[found[0].j][:80]!r}"


def _check(row: str, dev_key: str, src: str, gold: list[str], questions: list[str], node: DictConfig, what: str):
    if (dev_key, src) in _CHECKED:
        return
    where = f"{row}: {what}"
    if what == "data.train":
        triplets = instantiate(node)
        assert len(triplets) > 8000, where
        _check_passages(where, gold, [t for ex in triplets for t in (ex.positive, *ex.negatives)])
        queries = {normalize(ex.query) for ex in triplets}
        assert not queries & {normalize(q) for q in questions}, f"{where} holds a dev question"
        # the question rule as dev_holdout applies it: idf over every clean training question
        reference = [q for _, q, _ in clean.clean_train_pairs()]
        near = {normalize(reference[p.j]) for p in similar_question_pairs(questions, reference)}
        assert not queries & near, f"{where} holds {len(queries & near)} near-copies of dev questions"
    else:
        texts = _texts(node)
        assert len(texts) > 5000, where
        _check_passages(where, gold, texts)
    _CHECKED.add((dev_key, src))


def _check_row(row: str, cfg: DictConfig, devs: list[DictConfig]) -> list[str]:
    """Everything `cfg` trains on against each of `devs`; returns the config paths of what it checked."""
    assert devs, f"{row}: no dev split"
    sources = [("data.train", cfg.data.train), *_text_sources(cfg)]
    assert any(p.endswith("mlm.corpus") for p, _ in sources), f"{row}: no MLM corpus found"
    for dev in devs:
        gold, questions = _dev(dev)
        assert len(questions) == 300 and len(gold) > 250, row
        for what, node in sources:
            _check(row, _key(dev), _key(node), gold, questions, node, what)
    return [what for what, _ in sources]


@pytest.mark.usefixtures("shared_cache")
@pytest.mark.parametrize("table", list(TABLES))
def test_every_composed_testbed_row_keeps_dev_out_of_training(table):
    """Each row (a row file, or each value of a sweep config's sweeper params) at each seed: what it trains on against
    its dev splits, data.dev and the suite its settings are selected on (`selection.eval`, composed in place of the
    row's evaluation suite, which holds no dev split)."""
    start = time.perf_counter()
    checked: set[str] = set()
    for experiment in _experiments(table):
        first = compose_config([f"experiment={experiment}"], return_hydra_config=True)
        params = first.hydra.sweeper.params or {}
        sweep = [[f"{k}={v}" for v in str(values).split(",")] for k, values in params.items()]
        selection = [f"eval={first.selection.eval}"] if first.get("selection") and first.selection.get("eval") else []
        for seed, extra in itertools.product(SEEDS, itertools.product(*sweep)):
            row = " ".join([f"experiment={experiment}", f"seed={seed}", *extra])
            cfg = compose_config([f"experiment={experiment}", f"seed={seed}", *extra, *selection])
            devs = [cfg.data.dev] if cfg.data.get("dev") is not None else []
            _check_row(row, cfg, devs + (list(_collections(cfg.eval)) if selection else []))
            checked.add(experiment)
    assert checked == set(_experiments(table))
    assert time.perf_counter() - start < 300


@pytest.mark.usefixtures("shared_cache")
def test_the_quickstart_keeps_its_dev_out_of_training_and_of_its_tokenizer():
    """`python -m vtlab mlm.steps=N` at another seed than the testbed's dev split: its triplets, MLM corpus and corpus
    WordPiece (vocab=corpus-wordpiece, the default) leave out the run's own dev split (data.dev, drawn by the seed)."""
    for seed in (0, 3):
        cfg = compose_config(["mlm.steps=100", f"seed={seed}"])
        assert cfg.vocab._target_.endswith(".CorpusWordPiece") and cfg.data.dev.seed == seed
        assert cfg.vocab.corpus.dev_seed == seed and cfg.vocab.corpus.dev_size == cfg.data.dev.dev_size
        checked = _check_row(f"seed={seed}", cfg, [cfg.data.dev])
        assert sorted(checked) == ["data.train", "mlm.corpus", "vocab"]
