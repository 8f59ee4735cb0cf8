"""Online MS MARCO hard-negative sources (Hugging Face hub). They need the network; offline they raise
AssetError naming the dataset, quickly, instead of retrying or half-loading."""
from __future__ import annotations

import gzip
import json
import os
import pickle
import random
from typing import Any

from vtlab.data.examples import TripletExample
from vtlab.errors import AssetError, DataError

ST_REPO = "sentence-transformers/msmarco-hard-negatives"
ST_CE_SCORES = "cross-encoder-ms-marco-MiniLM-L-6-v2-scores.pkl.gz"
ST_NEGATIVES = "msmarco-hard-negatives.jsonl.gz"
OPENSEARCH_REPO = "opensearch-project/msmarco-hard-negatives"


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("HF_DATASETS_OFFLINE") == "1"


def _fail(repo: str, what: str, e: BaseException) -> AssetError:
    first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
    hint = "HF offline mode is on and it is not cached" if _offline() else "needs the Hugging Face hub or a cached copy"
    return AssetError(f"cannot load '{repo}' {what} ({hint}): {type(e).__name__}: {first}")


def _hub_file(repo: str, filename: str) -> str:
    from huggingface_hub import hf_hub_download

    try:
        return hf_hub_download(repo_id=repo, filename=filename, repo_type="dataset")
    except Exception as e:  # noqa: BLE001 - hub raises many types; all mean "not available here"
        raise _fail(repo, f"file {filename}", e) from None


def _hf_dataset(repo: str, config: str | None, split: str) -> Any:
    import datasets

    try:
        return datasets.load_dataset(repo, config, split=split)
    except Exception as e:  # noqa: BLE001
        raise _fail(repo, f"config={config!r} split={split!r}", e) from None


def st_msmarco_hard_negatives(
    num_negatives: int = 8,
    max_examples: int | None = 10000,
    systems: list[str] | None = None,
    seed: int = 0,
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
    corpus_ds = _hf_dataset("mteb/msmarco", "corpus", "corpus")
    queries_ds = _hf_dataset("mteb/msmarco", "queries", "queries")
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
