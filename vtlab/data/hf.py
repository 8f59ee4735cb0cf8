"""Online MS MARCO hard-negative sources (Hugging Face hub). They need the network; offline they raise
AssetError naming the dataset, quickly, instead of retrying or half-loading."""

from __future__ import annotations

import gzip
import json
import pickle
import random
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vtlab.core import hub
from vtlab.core.errors import AssetError, DataError
from vtlab.data.examples import TripletExample

ST_REPO = "sentence-transformers/msmarco-hard-negatives"
ST_CE_SCORES = "cross-encoder-ms-marco-MiniLM-L-6-v2-scores.pkl.gz"
ST_NEGATIVES = "msmarco-hard-negatives.jsonl.gz"
MSMARCO = "mteb/msmarco"
OPENSEARCH_REPO = "opensearch-project/msmarco-hard-negatives"


def _fail(what: str, e: hub.HubUnavailable) -> AssetError:
    hint = "HF offline mode is on and it is not cached" if e.flagged else "needs the Hugging Face hub or a cached copy"
    return AssetError(f"cannot load '{e.repo}' {what} ({hint}): {e.reason}")


def _hub_file(repo: str, filename: str) -> str:
    try:
        return hub.dataset_file(repo, filename)
    except hub.HubUnavailable as e:
        raise _fail(f"file {filename}", e) from None


def _hf_dataset(repo: str, config: str | None, split: str) -> Any:
    try:
        return hub.load_dataset(repo, config, split=split)
    except hub.HubUnavailable as e:
        raise _fail(f"config={config!r} split={split!r}", e) from None


def st_msmarco_hard_negatives(
    num_negatives: int = 8, max_examples: int | None = 10000, systems: list[str] | None = None, seed: int = 0
) -> list[TripletExample]:
    """sentence-transformers MS MARCO hard negatives with MiniLM-L6 cross-encoder scores as `scores`.

    Per query (`{"qid", "pos": [pid...], "neg": {system: [pid...]}}` lines): one positive (the first qrels
    pid), `num_negatives` negatives sampled from the union of the `systems` lists (all systems if None), and
    the cross-encoder scores `ce[qid][pid]` of [positive] + negatives. Texts come from `mteb/msmarco`
    (corpus and queries configs). Queries lacking a CE score or enough negatives are skipped.
    Note: the score pickle is 1.35 GB and the MS MARCO corpus 8.8M passages: this is a GPU-machine source.
    """
    neg_path = _hub_file(ST_REPO, ST_NEGATIVES)
    ce_path = _hub_file(ST_REPO, ST_CE_SCORES)
    corpus_ds = _hf_dataset(MSMARCO, "corpus", "corpus")
    queries_ds = _hf_dataset(MSMARCO, "queries", "queries")
    with gzip.open(ce_path, "rb") as f:
        ce: dict[int, dict[int, float]] = pickle.load(f)  # noqa: S301 - official dataset file, pinned repo
    queries = {str(r["_id"]): r["text"] for r in queries_ds}
    rng = random.Random(seed)
    picked: list[tuple[str, str, list[str], list[float]]] = []
    with gzip.open(neg_path, "rt", encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if max_examples is not None and len(picked) >= max_examples:
                break
            try:
                row = json.loads(line)
                qid, pos = int(row["qid"]), [int(p) for p in row["pos"]]
                neg_lists = row["neg"]
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
                raise DataError(f"{ST_REPO}/{ST_NEGATIVES}:{lineno}: expected 'qid', 'pos', 'neg' ({e})") from None
            scores = ce.get(qid)
            if not pos or scores is None or pos[0] not in scores or str(qid) not in queries:
                continue
            pool = {p for name, ps in neg_lists.items() if systems is None or name in systems for p in ps}
            pool = sorted(p for p in pool if p not in pos and p in scores)
            if len(pool) < num_negatives:
                continue
            negs = rng.sample(pool, num_negatives)
            picked.append((str(qid), str(pos[0]), [str(n) for n in negs], [scores[pos[0]]] + [scores[n] for n in negs]))
    need = {pid for _, p, ns, _ in picked for pid in [p, *ns]}
    texts = {}
    for r in corpus_ds:
        if r["_id"] in need:
            texts[r["_id"]] = f"{r['title']} {r['text']}" if r.get("title") else r["text"]
    return [
        TripletExample(queries[q], texts[p], [texts[n] for n in ns], [float(s) for s in sc], q, p, ns)
        for q, p, ns, sc in picked
        if p in texts and all(n in texts for n in ns)
    ]


@dataclass
class CEPoolExample(TripletExample):
    """One MS MARCO query sampled as the authors' MsMarcoScoresFromSentenceTransformers does, afresh at every draw:
    a uniformly random qrels positive, then `num_negatives` distinct passages drawn uniformly from the rest of the
    query's cross-encoder-scored pool (the query's other positives included, as theirs), with their CE scores.

    positive, negatives and scores hold the whole pool ([first positive] + the other scored passages);
    other_positives: indices into `negatives` of the query's other qrels positives.
    """

    other_positives: list[int] = field(default_factory=list)

    def positive_texts(self) -> list[str]:
        return [self.positive, *(self.negatives[j] for j in self.other_positives)]

    def negative_texts(self) -> list[str]:
        others = set(self.other_positives)
        return [t for j, t in enumerate(self.negatives) if j not in others]

    def draw(self, num_negatives: int, rng: np.random.Generator) -> tuple[list[str], list[float] | None]:
        pool = [self.positive, *self.negatives]
        k = int(rng.integers(1 + len(self.other_positives)))
        chosen = 0 if k == 0 else 1 + self.other_positives[k - 1]
        rest = [j for j in range(len(pool)) if j != chosen]
        rows = [chosen] + [rest[j] for j in rng.choice(len(rest), size=num_negatives, replace=False)]
        scores = self.scores if self.scores is not None else [0.0] * len(pool)
        return [pool[j] for j in rows], [float(scores[j]) for j in rows]


def ce_pool_examples(
    qrels: Mapping[Hashable, Sequence[Hashable]],
    ce: Mapping[Hashable, Mapping[Hashable, float]],
    queries: Mapping[str, str],
    texts: Mapping[str, str],
    num_negatives: int = 1,
    max_examples: int | None = None,
) -> list[CEPoolExample]:
    """One CEPoolExample per qrels query that has CE scores (qrels order), as the authors' dataset lists them.

    Ids are those of the score file (ints for sentence-transformers' pickle); texts are looked up by str(id). Passages
    without a CE score or a text are left out (the authors' code would fail on them); a query is skipped when no
    positive remains or its pool has fewer than 1 + num_negatives passages.
    """
    out: list[CEPoolExample] = []
    for qid, positives in qrels.items():
        if max_examples is not None and len(out) >= max_examples:
            break
        scores = ce.get(qid)
        if scores is None or str(qid) not in queries:
            continue
        pool = [p for p in scores if str(p) in texts]
        pos = [p for p in dict.fromkeys(positives) if p in scores and str(p) in texts]
        if not pos or len(pool) < 1 + num_negatives:
            continue
        others = [p for p in pool if p != pos[0]]
        index = {p: i for i, p in enumerate(others)}
        out.append(
            CEPoolExample(
                query=queries[str(qid)],
                positive=texts[str(pos[0])],
                negatives=[texts[str(p)] for p in others],
                scores=[float(scores[p]) for p in [pos[0], *others]],
                query_id=str(qid),
                positive_id=str(pos[0]),
                negative_ids=[str(p) for p in others],
                other_positives=[index[p] for p in pos[1:]],
            )
        )
    return out


def st_msmarco_ce_pool(num_negatives: int = 1, max_examples: int | None = None) -> list[CEPoolExample]:
    """The authors' MS MARCO training data (c.yaml `data_type: marco`): every MS MARCO train query with qrels and
    MiniLM-L6 cross-encoder scores (sentence-transformers/msmarco-hard-negatives), sampled per draw by CEPoolExample.
    Qrels, queries and passages from `mteb/msmarco`. A GPU-machine source: the score pickle holds ~500k queries.
    """
    ce_path = _hub_file(ST_REPO, ST_CE_SCORES)
    qrels_ds = _hf_dataset(MSMARCO, "default", "train")
    queries_ds = _hf_dataset(MSMARCO, "queries", "queries")
    corpus_ds = _hf_dataset(MSMARCO, "corpus", "corpus")
    with gzip.open(ce_path, "rb") as f:
        ce: dict[int, dict[int, float]] = pickle.load(f)  # noqa: S301 - official dataset file, pinned repo
    qrels: dict[int, list[int]] = {}
    for r in qrels_ds:
        if float(r["score"]) > 0:
            qrels.setdefault(int(r["query-id"]), []).append(int(r["corpus-id"]))
    queries = {str(r["_id"]): r["text"] for r in queries_ds}
    need = {str(p) for q in qrels if q in ce for p in ce[q]}
    texts = {
        r["_id"]: (f"{r['title']} {r['text']}" if r.get("title") else r["text"]) for r in corpus_ds if r["_id"] in need
    }
    return ce_pool_examples(qrels, ce, queries, texts, num_negatives, max_examples)


def opensearch_msmarco_hard_negatives(
    num_negatives: int = 8, max_examples: int | None = 10000, seed: int = 0
) -> list[TripletExample]:
    """`opensearch-project/msmarco-hard-negatives` (columns: query, docs: list[str], scores: list[float]).

    Each row holds the top-100 docs retrieved for the query with cross-encoder re-ranking scores. The
    positive is the highest-scored doc (the dataset carries no separate qrels column); negatives are
    sampled from the rest, keeping their scores as the teacher `scores`.
    """
    ds = _hf_dataset(OPENSEARCH_REPO, None, "train")
    rng = random.Random(seed)
    out: list[TripletExample] = []
    for i, row in enumerate(ds):
        if max_examples is not None and len(out) >= max_examples:
            break
        docs, scores = row["docs"], row["scores"]
        if len(docs) != len(scores):
            raise DataError(f"{OPENSEARCH_REPO}: row {i} has {len(docs)} docs but {len(scores)} scores")
        if len(docs) < 1 + num_negatives:
            continue
        best = max(range(len(docs)), key=lambda j: scores[j])
        rest = [j for j in range(len(docs)) if j != best and docs[j] != docs[best]]
        if len(rest) < num_negatives:
            continue
        negs = sorted(rng.sample(rest, num_negatives))
        out.append(
            TripletExample(
                query=row["query"],
                positive=docs[best],
                negatives=[docs[j] for j in negs],
                scores=[float(scores[best])] + [float(scores[j]) for j in negs],
            )
        )
    return out
