"""Rank the candidates and suggest the command to run for each (the best first).

Ranking: every candidate is ranked on each criterion (1 = best, ties share the average rank); the score is the mean
rank, so no criterion needs a hand-set weight. Activity criteria count only when every candidate was probed.
The suggestion moves a backbone to `target_vocab` (with `init`) when its own vocabulary puts more than
`redundancy_threshold` of the corpus's tokens away from their normalized form's main entry, and adds `apc` when the
run transfers or the probed start is dead (< `dead_below` active terms per document) or dense (positive share >
`dense_above`).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import rankdata

DEFAULTS: dict[str, Any] = {"target_vocab": "bert-uncased", "init": "semantic", "apc": "p60",
                            "redundancy_threshold": 0.05, "dead_below": 1.0, "dense_above": 0.05}


def final_activity(result: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The activity state fine-tuning would start from: after APC when one is configured, else as built."""
    act = result.get("activity")
    return None if not act else act.get("after") or act["before"]


@dataclass(frozen=True)
class Criterion:
    name: str
    label: str
    get: Callable[[Mapping[str, Any]], float | None]
    lower_is_better: bool
    fmt: str

    def value(self, result: Mapping[str, Any]) -> float | None:
        v = self.get(result)
        return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)

    def show(self, result: Mapping[str, Any]) -> str:
        v = self.value(result)
        return "n/a" if v is None else self.fmt.format(v)


CRITERIA: tuple[Criterion, ...] = (
    Criterion("fertility", "tokens per word", lambda r: r["fit"]["fertility"], True, "{:.3f}"),
    Criterion("split3", "words cut into ≥3 pieces", lambda r: r["fit"]["split3_share"], True, "{:.1%}"),
    Criterion("frequent", "frequent words as one token", lambda r: r["fit"]["frequent_single_token_share"], False,
              "{:.1%}"),
    Criterion("unknown", "unknown/byte-fallback tokens", lambda r: r["fit"]["unk_or_byte_rate"], True, "{:.2%}"),
    Criterion("spread_mass", "corpus tokens off their normalized form's main entry",
              lambda r: r["redundancy"]["corpus"]["spread_mass_share"], True, "{:.1%}"),
)
ACTIVITY_CRITERIA: tuple[Criterion, ...] = (
    Criterion("cosine", "mean cosine between documents (start of fine-tuning)",
              lambda r: final_activity(r)["mean_pairwise_cosine"], True, "{:.3f}"),
)


def criteria_for(results: Sequence[Mapping[str, Any]]) -> tuple[Criterion, ...]:
    probed = bool(results) and all(final_activity(r) is not None for r in results)
    return CRITERIA + (ACTIVITY_CRITERIA if probed else ())


def rank(results: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One entry per candidate, best first: label, score (mean rank), rank per criterion, reasons."""
    criteria = criteria_for(results)
    n = len(results)
    ranks: dict[str, np.ndarray] = {}
    for c in criteria:
        # missing values rank last; higher-is-better criteria are negated so rank 1 is always the best
        vals = [c.value(r) for r in results]
        key = [math.inf if v is None else (v if c.lower_is_better else -v) for v in vals]
        ranks[c.name] = rankdata(key, method="average")
    scores = np.mean([ranks[c.name] for c in criteria], axis=0) if criteria else np.ones(n)
    entries = []
    for i, r in enumerate(results):
        best = [f"best {c.label} ({c.show(r)})" for c in criteria if n > 1 and ranks[c.name][i] == ranks[c.name].min()
                and ranks[c.name][i] < ranks[c.name].max()]
        worst = [f"worst {c.label} ({c.show(r)})" for c in criteria if n > 1 and ranks[c.name][i] == ranks[c.name].max()
                 and ranks[c.name][i] > ranks[c.name].min()]
        entries.append({"label": r["candidate"]["label"], "score": float(scores[i]),
                        "ranks": {c.name: float(ranks[c.name][i]) for c in criteria},
                        "reasons": best + worst or [f"{c.label} {c.show(r)}" for c in criteria[:3]],
                        "_index": i})
    entries.sort(key=lambda e: (e["score"], results[e["_index"]]["fit"]["fertility"]))
    for place, e in enumerate(entries, 1):
        e["place"] = place
    return entries


def suggest(result: Mapping[str, Any], settings: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The command to run for `result`'s backbone, with the reasons for each choice."""
    s = {**DEFAULTS, **(settings or {})}
    cand = result["candidate"]
    why: list[str] = []
    args = {"backbone": cand["backbone"]}
    corpus = result["redundancy"]["corpus"]
    redundant = corpus["spread_mass_share"] > s["redundancy_threshold"] and cand["vocab"] != s["target_vocab"]
    if redundant:
        example = corpus["split_examples"][0] if corpus["split_examples"] else None
        shown = f" (e.g. '{example['form']}': {', '.join(t for t, _ in example['surfaces'][:4])})" if example else ""
        why.append(f"{corpus['spread_mass_share']:.1%} of the corpus's tokens are not on their normalized form's "
                   f"main vocabulary entry{shown}, above {s['redundancy_threshold']:.0%}: move to "
                   f"vocab={s['target_vocab']} with init={s['init']}")
        args.update(vocab=s["target_vocab"], init=s["init"])
    else:
        args["vocab"] = cand["vocab"]
        if cand.get("transfers"):
            args["init"] = cand["init"]
        why.append(f"vocab={cand['vocab']}: only {corpus['spread_mass_share']:.1%} of the corpus's tokens are off "
                   f"their normalized form's main entry (threshold {s['redundancy_threshold']:.0%})")
    act = result.get("activity")
    before = act["before"] if act else None
    if cand.get("apc_enabled"):
        args["apc"] = cand["apc"]
        why.append(f"apc={cand['apc']} as configured")
    elif redundant or cand.get("transfers"):
        args["apc"] = s["apc"]
        why.append(f"apc={s['apc']}: a transferred output layer starts from a different bias scale; calibrate it")
    elif before is not None and before["mean_active_per_doc"] < s["dead_below"]:
        args["apc"] = s["apc"]
        why.append(f"apc={s['apc']}: a dead start ({before['mean_active_per_doc']:.2f} active terms per document)")
    elif before is not None and before["positive_share"] > s["dense_above"]:
        args["apc"] = s["apc"]
        why.append(f"apc={s['apc']}: a dense start ({before['positive_share']:.1%} of (document, term) logits > 0)")
    else:
        args["apc"] = "off"
        why.append("apc=off: the start is neither dead nor dense" if before is not None else
                   "apc=off: activity not probed (diagnose.activity.num_docs=0)")
    command = "python -m vtlab " + " ".join(f"{k}={v}" for k, v in args.items())
    return {"label": cand["label"], "command": command, "args": args, "why": why}
