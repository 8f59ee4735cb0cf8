"""Did the MLM adaptation keep the encoder it adapts? One line per arm, before the adaptation's first step and after
its last, on text it never trained on:

    python -m vtlab.bench.body experiment=testbed/real-case/e5-vt mlm.lr=0.001 [experiment=... more arms]

- held-out masked-LM loss and own-token top-1 (the adaptation's record, vtlab/models/mlm_probe.py);
- the body's own dense retrieval: e5's recipe (prefixes, mean pooling, cosine) on the dev collection of the run's
  `selection.dataset` (BoolQ-clean dev: 300 questions over 1,000 passages), nDCG@10 with the start's body and with
  the adapted one, and the mean cosine of each passage's embedding before and after. A frozen body changes only
  through the input rows it reads.

Each arm's adaptation must be in the cache already (run `stage=mlm` with the same overrides first): this reads, it
never trains. Exit 2 with one line when one is missing."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from vtlab.backbones import Backbone
from vtlab.core.errors import VtlabError
from vtlab.core.json_files import read_json
from vtlab.core.paths import CONF_DIR
from vtlab.evaluation.metrics import compute_metrics
from vtlab.models.dense import DenseEncoder
from vtlab.models.mlm import entry_dir
from vtlab.runtime.policy import trainer_precision
from vtlab.stages.build import run_backbone
from vtlab.stages.mlm import adaptation_seed

MEASURE = "nDCG@10"
DONE = "vtlab_mlm.json"


def dense_retrieval(backbone: Backbone, collection: Any) -> tuple[float, np.ndarray]:
    """(nDCG@10 of the backbone's body as an e5 dense retriever on `collection`, the passages' embeddings)."""
    encoder = DenseEncoder.from_backbone(backbone)
    ids = list(collection.corpus)
    docs = encoder.encode([collection.corpus[d] for d in ids], "doc", show_progress=False)
    qids = list(collection.queries)
    queries = encoder.encode([collection.queries[q] for q in qids], "query", show_progress=False)
    scores = queries @ docs.T
    top = np.argsort(-scores, axis=1)[:, :100]
    run = {q: {ids[j]: float(scores[i, j]) for j in top[i]} for i, q in enumerate(qids)}
    return compute_metrics(run, collection.qrels, [MEASURE])[MEASURE], docs


def probe_arm(overrides: Sequence[str]) -> dict[str, Any]:
    """One arm's line: its config composed from `overrides`, its start and its cached adaptation compared."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = compose("config", overrides=list(overrides))
        if cfg.selection.get("eval"):  # the selection's own evaluation suite (its dev sets), as the selection scores
            cfg = compose("config", overrides=[*overrides, f"eval={cfg.selection.eval}"])
    start = run_backbone(cfg, {})
    precision = trainer_precision(cfg.trainer.get("precision", "32-true"), cfg.trainer.get("accelerator", "auto"))
    out = entry_dir(start, cfg.mlm, adaptation_seed(cfg), instantiate(cfg.vocab).preprocess, str(precision))
    if not (out / DONE).is_file():
        raise VtlabError(f"{out}: no MLM adaptation for {' '.join(overrides)}: run stage=mlm with them first")
    record = read_json(out / DONE, dict, "an MLM adaptation's record")
    evaluation = cfg.eval.evaluations[cfg.selection.dataset]
    collection = instantiate(evaluation.collection)()
    before, docs_before = dense_retrieval(start, collection)
    after, docs_after = dense_retrieval(start.derived(str(out), name=f"{start.name}-mlm"), collection)
    held = record.get("held_out") or {}
    return {
        "arm": cfg.name,
        "entry": str(out),
        "steps": record.get("steps"),
        "held_out": held,
        "dense": {"before": before, "after": after},
        "passage_cosine": float(np.mean(np.sum(docs_before * docs_after, axis=1))),
        "collection": {"name": evaluation.name, "queries": len(collection.queries), "docs": len(collection.corpus)},
    }


def render(rows: list[dict[str, Any]]) -> str:
    head = (
        "| arm | steps | held-out MLM loss | own-token top-1 | dense nDCG@10 (dev) | passage cosine |\n"
        "|---|---:|---|---|---|---:|"
    )
    lines = [head]
    for r in rows:
        h = r["held_out"]
        b, a = h.get("before") or {}, h.get("after") or {}
        lines.append(
            f"| {r['arm']} | {r['steps']} | {b.get('loss', float('nan')):.3f} → {a.get('loss', float('nan')):.3f} "
            f"| {b.get('own_top1', float('nan')):.3f} → {a.get('own_top1', float('nan')):.3f} "
            f"| {r['dense']['before']:.4f} → {r['dense']['after']:.4f} | {r['passage_cosine']:.4f} |"
        )
    return "\n".join(lines)


def split_arms(argv: Sequence[str]) -> list[list[str]]:
    """Overrides → one list per arm: each `experiment=` starts an arm; overrides before the first apply to all."""
    common, arms = [], []
    for arg in argv:
        if arg.startswith("experiment="):
            arms.append([arg])
        elif arms:
            arms[-1].append(arg)
        else:
            common.append(arg)
    return [[*arm, *common] for arm in arms]


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    arms = split_arms(argv)
    if not arms:
        print("vtlab: error: expected one experiment=<arm> or more, each with its overrides", file=sys.stderr)
        return 2
    try:
        rows = [probe_arm(arm) for arm in arms]
    except VtlabError as e:
        print(f"vtlab: error: {e}", file=sys.stderr)
        return 2
    for r in rows:
        c = r["collection"]
        print(f"{r['arm']}: {r['entry']} ({c['name']}: {c['queries']} queries, {c['docs']} passages)")
    print(render(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
