"""A dev set never overlaps its training set: checked where the two meet (TripletDataModule.setup), before any step.

Checkpoints are chosen on the dev set, so what it shares with training decides what the choice measures:

- **refused**: a dev question that is a training question. The checkpoint is then chosen on training loss, not on
  retrieval of unseen questions.
- **refused**: a dev gold passage (a relevant document of a dev question) that training saw as a *positive*. The dev
  score then rewards recalling a passage the model was taught to retrieve: memorisation, not generalisation.
- **warned**: a dev gold passage that training saw only as a *negative* (e.g. BM25 negatives mined from a pool that
  holds it). The model was taught to rank it low for other questions; that biases dev scores down, it does not
  inflate them, and mined pools of real data (BoolQ: many questions share a passage) hit it legitimately.
- **not reported**: dev *distractors* (unjudged dev corpus documents) that are training passages, and passages shared
  between training questions: neither tells the dev score anything about memorised relevance.

Texts are compared after `normalize` (whitespace runs collapsed, case-folded): a copy that differs only in case or
spacing is the same text. The check keeps only the dev side in memory (a dict of normalized dev texts) and streams the
distinct training texts past it once, so it costs one pass over the training texts.

The one-line error names the config keys that produced the two sides when they are known (`Collection.source`,
`Triplets.source`: the settings a source was built from), e.g.
`data.dev.seed=1 vs data.train.seed=0: 289 of 300 dev questions are training questions (...)`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from vtlab.core.errors import DataError
from vtlab.data.collections import Collection
from vtlab.data.examples import TripletExample

log = logging.getLogger("vtlab")


def normalize(text: str) -> str:
    """The form texts are compared in: runs of whitespace as one space, stripped, case-folded. (str.split() splits on
    exactly the characters the regex `\\s` matches, so this equals `re.sub(r"\\s+", " ", t).strip().casefold()`, at a
    third of its cost.)"""
    return " ".join(text.split()).casefold()


def _named(prefix: str, source: Mapping[str, Any]) -> str:
    return f"{prefix}.path={source['path']}" if "path" in source else prefix


def split_labels(
    dev_source: Mapping[str, Any], train_source: Mapping[str, Any], dev_path: str | None = None
) -> tuple[str, str]:
    """(dev label, train label) for messages: the settings that differ between the two sources (the keys of a split
    given twice: `data.dev.seed=1`, `data.train.seed=0`), else the file each was read from, else the node's key."""
    if dev_path:
        return f"data.dev_path={dev_path}", _named("data.train", train_source)
    differ = [k for k in sorted(set(dev_source) & set(train_source)) if dev_source[k] != train_source[k]]
    if differ:
        return (
            ", ".join(f"data.dev.{k}={dev_source[k]}" for k in differ),
            ", ".join(f"data.train.{k}={train_source[k]}" for k in differ),
        )
    return _named("data.dev", dev_source), _named("data.train", train_source)


def _distinct(texts: Iterable[str]) -> Iterator[str]:
    seen: set[str] = set()
    for t in texts:
        if t not in seen:  # a raw-text set first: normalizing is the costly part, repeats are common (shared pools)
            seen.add(t)
            yield t


def _matches(wanted: Mapping[str, Any], texts: Iterable[str]) -> set[str]:
    """The normalized forms in `wanted` that one of `texts` has."""
    return {n for n in map(normalize, _distinct(texts)) if n in wanted}


def _clip(text: str) -> str:
    return repr(text[:60] + ("…" if len(text) > 60 else ""))


def check_disjoint(
    dev: Collection, train: Sequence[TripletExample], dev_label: str = "data.dev", train_label: str = "data.train"
) -> None:
    """DataError when `dev` shares a question with `train`, or a gold passage with its positives; a warning when a
    dev gold passage is only a training negative (the policy: this module's docstring)."""
    where = f"{dev_label} vs {train_label}"
    questions: dict[str, list[str]] = {}
    for qid, q in dev.queries.items():
        questions.setdefault(normalize(q), []).append(qid)
    shared = {qid for n in _matches(questions, (ex.query for ex in train)) for qid in questions[n]}
    if shared:
        first = next(qid for qid in dev.queries if qid in shared)
        raise DataError(
            f"{where}: {len(shared)} of {len(dev.queries)} dev questions are training questions (e.g. "
            f"{first!r} of {dev.name}: {_clip(dev.queries[first])}); a dev set must hold questions "
            "training never saw"
        )

    gold: dict[str, list[tuple[str, str]]] = {}  # normalized text -> (doc id, a dev question it is relevant to)
    for qid, rels in dev.qrels.items():
        for did, grade in rels.items():
            if grade > 0 and did in dev.corpus and qid in dev.queries:
                entry = gold.setdefault(normalize(dev.corpus[did]), [])
                if did not in (d for d, _ in entry):
                    entry.append((did, qid))
    n_gold = sum(len(v) for v in gold.values())
    positives = _matches(gold, (t for ex in train for t in ex.positive_texts()))
    if positives:
        did, qid = min((e for n in positives for e in gold[n]), key=lambda e: e[0])
        n = sum(len(gold[t]) for t in positives)
        raise DataError(
            f"{where}: {n} of {n_gold} dev gold passages are training positives (e.g. {did!r}, relevant "
            f"to dev question {qid!r} of {dev.name}: {_clip(dev.corpus[did])}); a checkpoint chosen on "
            "passages training taught the model to retrieve measures memorisation: a dev question's "
            "relevant passages must be no training positives"
        )
    negatives = _matches(gold, (t for ex in train for t in ex.negative_texts()))
    if negatives:
        did, _ = min((e for n in negatives for e in gold[n]), key=lambda e: e[0])
        log.warning(
            "%s: %d of %d dev gold passages are training negatives (e.g. %r of %s); allowed (the model was "
            "taught to rank them low for other questions), but dev scores may read low",
            where,
            sum(len(gold[t]) for t in negatives),
            n_gold,
            did,
            dev.name,
        )
