"""Rank the candidates and suggest the command to run for each (the best first).

Ranking: every candidate is ranked on each criterion (1 = best, ties share the average rank); the score is the mean
rank, so no criterion needs a hand-set weight. Activity criteria count only when every candidate was probed, on the
state the suggestion starts fine-tuning from. Candidates with random-init weights (the generated test backbones) come
after every pretrained one whatever their score: their tokenizer figures hold, their activity says nothing about a
retrieval start, so one is never "best".
The suggestion moves a backbone to `target_vocab` (with `init`) when its own vocabulary puts more than
`redundancy_threshold` of the corpus's tokens away from their normalized form's main entry. APC is suggested only
where the probe says the start needs it and the measured APC moves it toward the sparse range without making it dense
(vtlab/diagnose/sparsity.py); a start already in the range keeps apc=off. An APC that was not measured (a suggested
transfer, or apc=off in the probe) comes with the diagnose command that measures it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import rankdata

from vtlab.diagnose.sparsity import ApcEffect, Place, apc_effect

DEFAULTS: dict[str, Any] = {
    "target_vocab": "bert-uncased",
    "init": "semantic",
    "apc": "p60",
    "redundancy_threshold": 0.05,
    "dead_below": 1.0,
    "dense_above": 0.05,
    "max_active_per_doc": 1000,
}
RANDOM_INIT = (
    "random-init weights (a generated test backbone): ranked after every pretrained candidate, never "
    "suggested as the best; its tokenizer figures hold for the architecture's pretrained model, its "
    "activity does not"
)


def verdict_settings(result: Mapping[str, Any], settings: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """DEFAULTS, then the run's `diagnose.verdict`, then `settings`."""
    return {**DEFAULTS, **((result.get("settings") or {}).get("verdict") or {}), **(settings or {})}


def effect_of(result: Mapping[str, Any], settings: Mapping[str, Any] | None = None) -> ApcEffect | None:
    """The configured APC's measured effect on `result`'s start (None when activity was not probed)."""
    return apc_effect(result.get("activity"), result["candidate"]["apc"], verdict_settings(result, settings))


def final_activity(result: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The activity state the suggestion starts fine-tuning from: after APC when the verdict accepts the configured
    APC, else as built."""
    act = result.get("activity")
    if not act:
        return None
    effect = effect_of(result)
    return act["after"] if effect is not None and effect.accepted else act["before"]


def random_init(result: Mapping[str, Any]) -> bool:
    return bool(result["candidate"].get("random_init"))


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
    Criterion(
        "frequent", "frequent words as one token", lambda r: r["fit"]["frequent_single_token_share"], False, "{:.1%}"
    ),
    Criterion("unknown", "unknown/byte-fallback tokens", lambda r: r["fit"]["unk_or_byte_rate"], True, "{:.2%}"),
    Criterion(
        "spread_mass",
        "corpus tokens off their normalized form's main entry",
        lambda r: r["redundancy"]["corpus"]["spread_mass_share"],
        True,
        "{:.1%}",
    ),
)
ACTIVITY_CRITERIA: tuple[Criterion, ...] = (
    Criterion(
        "cosine",
        "mean cosine between documents (start of fine-tuning)",
        lambda r: final_activity(r)["mean_pairwise_cosine"],
        True,
        "{:.3f}",
    ),
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
        best = [
            f"best {c.label} ({c.show(r)})"
            for c in criteria
            if n > 1 and ranks[c.name][i] == ranks[c.name].min() and ranks[c.name][i] < ranks[c.name].max()
        ]
        worst = [
            f"worst {c.label} ({c.show(r)})"
            for c in criteria
            if n > 1 and ranks[c.name][i] == ranks[c.name].max() and ranks[c.name][i] > ranks[c.name].min()
        ]
        reasons = best + worst or [f"{c.label} {c.show(r)}" for c in criteria[:3]]
        entries.append(
            {
                "label": r["candidate"]["label"],
                "score": float(scores[i]),
                "ranks": {c.name: float(ranks[c.name][i]) for c in criteria},
                "random_init": random_init(r),
                "reasons": ["random-init weights: ranked last"] * random_init(r) + reasons,
                "_index": i,
            }
        )
    entries.sort(key=lambda e: (e["random_init"], e["score"], results[e["_index"]]["fit"]["fertility"]))
    for place, e in enumerate(entries, 1):
        e["place"] = place
    return entries


def best(ranking: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The first pretrained candidate of `ranking`; None when every candidate has random-init weights."""
    return next((e for e in ranking if not e["random_init"]), None)


def suggest(result: Mapping[str, Any], settings: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The command to run for `result`'s backbone, with the reasons for each choice."""
    s = verdict_settings(result, settings)
    cand = result["candidate"]
    why: list[str] = [RANDOM_INIT] if random_init(result) else []
    args = {"backbone": cand["backbone"]}
    corpus = result["redundancy"]["corpus"]
    redundant = corpus["spread_mass_share"] > s["redundancy_threshold"] and cand["vocab"] != s["target_vocab"]
    if redundant:
        example = corpus["split_examples"][0] if corpus["split_examples"] else None
        shown = f" (e.g. '{example['form']}': {', '.join(t for t, _ in example['surfaces'][:4])})" if example else ""
        why.append(
            f"{corpus['spread_mass_share']:.1%} of the corpus's tokens are not on their normalized form's "
            f"main vocabulary entry{shown}, above {s['redundancy_threshold']:.0%}: move to "
            f"vocab={s['target_vocab']} with init={s['init']}"
        )
        args.update(vocab=s["target_vocab"], init=s["init"])
    else:
        args["vocab"] = cand["vocab"]
        if cand.get("transfers"):
            args["init"] = cand["init"]
        why.append(
            f"vocab={cand['vocab']}: only {corpus['spread_mass_share']:.1%} of the corpus's tokens are off "
            f"their normalized form's main entry (threshold {s['redundancy_threshold']:.0%})"
        )
    effect = effect_of(result, settings)
    args["apc"], reason = _apc(cand, effect, s, redundant, args)
    why.append(reason)
    command = "python -m vtlab " + " ".join(f"{k}={v}" for k, v in args.items())
    return {
        "label": cand["label"],
        "command": command,
        "args": args,
        "why": why,
        "random_init": random_init(result),
        "sparsity": effect.to_json() if effect else None,
    }


def _apc(
    cand: Mapping[str, Any], effect: ApcEffect | None, s: Mapping[str, Any], moved: bool, args: Mapping[str, str]
) -> tuple[str, str]:
    """(apc, reason): an APC only where the measured start needs one and the measured APC moves it toward the sparse
    range without making it dense; an unmeasured one with the command that measures it."""
    check = "`python -m vtlab stage=diagnose " + " ".join(f"{k}={v}" for k, v in args.items()) + f" apc={s['apc']}`"
    unmeasured = f"not measured here, check with {check}"
    if effect is None:
        if moved or cand.get("transfers"):
            return s["apc"], (
                f"apc={s['apc']}: a transferred output layer starts from a different bias scale; {unmeasured}"
            )
        return "off", "apc=off: activity not probed (diagnose.activity.num_docs=0)"
    bounds = effect.range.show()
    if effect.start is Place.SPARSE:
        densifies = f"; {effect.change()}: not suggested" if effect.after is not None else ""
        moved_note = f"; the transferred start is {unmeasured}" if moved else ""
        return "off", (
            f"apc=off: already sparse as is ({effect.as_built()}, within {bounds}): keep apc=off{densifies}{moved_note}"
        )
    start = f"{effect.start.value} start ({effect.as_built()}, outside {bounds})"
    if moved or effect.after is None:
        what = "the transferred start" if moved else "its effect"
        return s["apc"], f"apc={s['apc']}: a {start}; {what} is {unmeasured}"
    if effect.accepted:
        return cand["apc"], f"apc={cand['apc']}: moves the {start} toward the range: {effect.change()}"
    return "off", (
        f"apc=off: a {start}, but {effect.change()}, no closer to the range or dense: not suggested; "
        "measure another apc.percentile with stage=diagnose"
    )
