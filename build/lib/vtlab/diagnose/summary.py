"""The few lines `stage=diagnose` prints for one candidate: fit, redundancy, output activity and the verdict's reasons
(the full report is report.md beside diagnose.json)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vtlab.diagnose.verdict import suggest


def console_summary(result: Mapping[str, Any]) -> list[str]:
    fit, red, activity = result["fit"], result["redundancy"], result.get("activity")
    v, c = red["vocab"], red["corpus"]
    lines = [
        f"  fit: {fit['fertility']:.3f} tokens/word, {fit['split3_share']:.1%} words in ≥3 pieces, "
        f"{fit['frequent_single_token_share']:.1%} of top-{fit['top_words']} words one token, "
        f"{fit['unk_or_byte_rate']:.2%} unknown/byte tokens",
        f"  redundancy: {v['entries']:,} entries → {v['normalized_forms']:,} normalized forms "
        f"({v['collapsing_forms']:,} with >1 surface form), effective dims {v['effective_dims']:,}; "
        f"{c['spread_mass_share']:.1%} of corpus tokens off their normalized form's main entry",
    ]
    for when in ("before", "after"):
        s = (activity or {}).get(when)
        if s:
            lines.append(
                f"  activity {when}: {s['mean_active_per_doc']:,.1f} active/doc, "
                f"dead {s['dead_fraction']:.1%}, "
                f"always-on {s['always_on_fraction']:.2%}, mean cosine {s['mean_pairwise_cosine']:.3f}"
            )
    return lines + [f"  verdict: {line}" for line in suggest(result)["why"]]
