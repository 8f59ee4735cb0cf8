"""The encode bench's texts and its quality check: the testbed's four evaluation sets (conf/eval/testbed.yaml:
BoolQ-clean in-domain, SQuAD, SciRIFF and Qasper out-of-domain, each the seeded sample every testbed row is evaluated
on) and the nDCG@10 of each tool's vectors of them, by exact search, beside fp32's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import scipy.sparse as sp
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from vtlab.core.paths import CONF_DIR
from vtlab.data.collections import Collection, subsampled
from vtlab.evaluation import compute_metrics
from vtlab.index import InvertedIndex, to_run

MEASURE, TOP_K = "nDCG@10", 100
REFERENCE = "vtlab"  # fp32: the row every other precision's quality is a ratio to


def testbed_sets(per_set: int | None = None) -> dict[str, Collection]:
    """name → collection, as `eval=testbed` composes them (its `collection` nodes, instantiated). `per_set`: each cut
    further to a seeded sample of at most that many passages and questions, with their gold passages (a smoke run)."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        evaluations = compose("config", overrides=["eval=testbed"]).eval.evaluations
    sets = {name: instantiate(node.collection)() for name, node in evaluations.items()}
    if per_set is None:
        return sets
    return {name: subsampled(c, per_set, per_set, seed=0, distractors_per_gold=1) for name, c in sets.items()}


def ndcg10(docs: sp.csr_matrix, queries: sp.csr_matrix, c: Collection) -> float:
    s, i = InvertedIndex(docs).search(queries, TOP_K)
    return compute_metrics(to_run(s, i, list(c.queries), list(c.corpus)), c.qrels, [MEASURE])[MEASURE]


def quality(vec: Path, model: str, tools: dict[str, str | None], sets: dict[str, Collection]) -> dict[str, Any]:
    """nDCG@10 per set of each tool's vectors (`vec`/<tool>-<model>-<side>.npz: rows of `sets` one after the other,
    as write_texts lays them out) and its ratio to REFERENCE's. `tools`: tool → None, or why it is not measured."""
    out: dict[str, Any] = {
        "measure": MEASURE,
        "sets": {name: {"docs": len(c.corpus), "queries": len(c.queries)} for name, c in sets.items()},
        "ndcg10": {},
        "vs_fp32": {},
        "not_measured": {t: why for t, why in tools.items() if why},
    }
    for tool in (t for t, why in tools.items() if not why):
        docs, queries = (sp.load_npz(vec / f"{tool}-{model}-{side}.npz").tocsr() for side in ("doc", "query"))
        d0 = q0 = 0
        scores = {}
        for name, c in sets.items():
            d1, q1 = d0 + len(c.corpus), q0 + len(c.queries)
            scores[name] = ndcg10(docs[d0:d1], queries[q0:q1], c)
            d0, q0 = d1, q1
        if (d0, q0) != (docs.shape[0], queries.shape[0]):
            raise ValueError(f"{tool}: {docs.shape[0]} doc / {queries.shape[0]} query rows for {d0} / {q0} texts")
        out["ndcg10"][tool] = scores
    ref = out["ndcg10"].get(REFERENCE, {})
    for tool, scores in out["ndcg10"].items():
        if tool != REFERENCE:
            out["vs_fp32"][tool] = {k: (v / ref[k] if ref.get(k) else None) for k, v in scores.items()}
    return out
