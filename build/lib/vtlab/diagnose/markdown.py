"""The diagnose report's report.md: the candidates, then one section per figure (tokenizer fit, vocabulary redundancy,
output activity) and the verdict, the PNGs of vtlab/diagnose/plots.py linked where they belong."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from vtlab.diagnose.verdict import criteria_for, effect_of


def _pct(v: float, digits: int = 1) -> str:
    return f"{v:.{digits}%}"


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines + [""]


def _code(tokens: Sequence[str]) -> str:
    return " ".join(f"`{t}`" for t in tokens)


def _weights(result: Mapping[str, Any]) -> str:
    return "**random-init**" if result["candidate"].get("random_init") else "pretrained"


def _candidates(results: Sequence[Mapping[str, Any]]) -> list[str]:
    rows = [
        [
            i,
            f"**{r['candidate']['label']}**",
            r["candidate"]["backbone"],
            _weights(r),
            r["candidate"]["vocab"],
            f"{r['candidate']['vocab_size']:,} ({r['candidate']['tokenizer_kind']})",
            r["candidate"]["apc"],
        ]
        for i, r in enumerate(results, 1)
    ]
    lines = _table(["#", "candidate", "backbone", "weights", "vocab", "vocabulary (kind)", "apc"], rows)
    if any(r["candidate"].get("random_init") for r in results):
        lines += [
            "Random-init weights (a generated test backbone): the tokenizer figures hold for the architecture's "
            "pretrained model, the activity figures do not; ranked after every pretrained candidate, never the "
            "best.",
            "",
        ]
    return lines


def _fit(results: Sequence[Mapping[str, Any]]) -> list[str]:
    top = results[0]["fit"]["top_words"]
    lines = ["## 1. Tokenizer fit", ""]
    lines += _table(
        [
            "candidate",
            "tokens / word",
            "words in ≥3 pieces",
            f"top-{top} words as one token",
            "unknown",
            "byte fallback",
        ],
        [
            [
                r["candidate"]["label"],
                f"{r['fit']['fertility']:.3f}",
                _pct(r["fit"]["split3_share"]),
                _pct(r["fit"]["frequent_single_token_share"]),
                _pct(r["fit"]["unk_rate"], 2),
                _pct(r["fit"]["byte_fallback_rate"], 2),
            ]
            for r in results
        ],
    )
    lines += ["Most frequent words the tokenizer does not keep whole:", ""]
    for r in results:
        ex = r["fit"]["frequent_split_examples"][:5]
        shown = "; ".join(f"{e['word']} ({e['count']}×) → {_code(e['tokens'])}" for e in ex) or "none"
        lines.append(f"- {r['candidate']['label']}: {shown}")
    lines.append("")
    if any(r["fit"]["multilingual"] for r in results):
        scripts = list(dict.fromkeys(s for r in results for s in r["fit"]["scripts"]))
        lines += ["Per script (tokens per word / words in ≥3 pieces / unknown+byte tokens):", ""]
        lines += _table(
            ["candidate", *scripts],
            [
                [
                    r["candidate"]["label"],
                    *[
                        (
                            lambda v: (
                                f"{v['fertility']:.2f} / {_pct(v['split3_share'])} / {_pct(v['unk_or_byte_rate'])}"
                                if v
                                else "–"
                            )
                        )(r["fit"]["scripts"].get(s))
                        for s in scripts
                    ],
                ]
                for r in results
            ],
        )
        lines += ["![fertility per script](scripts.png)", ""]
    return lines + ["![tokenizer fit](fit.png)", ""]


def _redundancy(results: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = [
        "## 2. Vocabulary redundancy (the Vocabulary Gap)",
        "",
        "Normalized form: the canonical token text without word-initial marker (`Ġ`, `▁`, no `##`), case-folded, "
        "NFKC. Effective dims = normalized forms + entries without one (character fragments, whitespace).",
        "",
    ]
    lines += _table(
        [
            "candidate",
            "entries",
            "normalized forms",
            "forms with >1 surface",
            "merged by marker / by case",
            "max surfaces",
            "effective dims",
            "corpus tokens off the main entry",
            "corpus tokens in multi-entry forms",
        ],
        [
            [
                r["candidate"]["label"],
                f"{v['entries']:,}",
                f"{v['normalized_forms']:,}",
                f"{v['collapsing_forms']:,}",
                f"{v['merged_by_marker']:,} / {v['merged_by_case']:,}",
                v["max_surface_forms"],
                f"{v['effective_dims']:,} ({_pct(v['effective_ratio'])})",
                _pct(c["spread_mass_share"]),
                _pct(c["split_mass_share"]),
            ]
            for r in results
            for v, c in [(r["redundancy"]["vocab"], r["redundancy"]["corpus"])]
        ],
    )
    lines += ["Normalized forms with the most corpus tokens off their main entry (entry: count):", ""]
    for r in results:
        ex = r["redundancy"]["corpus"]["split_examples"][:4]
        shown = "; ".join(f"{e['form']}: " + ", ".join(f"`{t}` {n:,}" for t, n in e["surfaces"][:6]) for e in ex)
        lines.append(f"- {r['candidate']['label']}: {shown or 'none'}")
    return lines + ["", "![redundancy](redundancy.png)", ""]


def _activity(results: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = ["## 3. Output-space activity", ""]
    probed = [r for r in results if r.get("activity")]
    if not probed:
        return lines + ["Not probed (diagnose.activity.num_docs=0).", ""]
    rows = []
    for r in probed:
        a = r["activity"]
        for state in ("before", "after"):
            s = a.get(state)
            if not s:
                continue
            q = a["max_logit_quantiles"].get(state) or []
            p50 = f"{q[50]:+.2f} / {q[90]:+.2f}" if len(q) > 90 else "–"
            apc = "as built" if state == "before" else f"{a['apc']['name']} (bias {-a['apc']['cutoff']:+.3f})"
            spread = f"{s['p10_active_per_doc']:,.0f}–{s['p90_active_per_doc']:,.0f}"
            place = effect_of(r).range.place(s["mean_active_per_doc"]).value
            rows.append(
                [
                    r["candidate"]["label"],
                    apc,
                    f"{s['mean_active_per_doc']:,.1f} ({place})",
                    f"{s['median_active_per_doc']:,.0f} ({spread})",
                    _pct(s["positive_share"], 2),
                    _pct(s["dead_fraction"]),
                    _pct(s["always_on_fraction"], 2),
                    f"{s['mean_pairwise_cosine']:.3f}",
                    p50,
                ]
            )
    lines += [
        f"{probed[0]['activity']['docs']} documents, {probed[0]['activity']['max_length']} tokens at most "
        "(statistics of `APC.probe`; per-document figures from one more `max_logits` pass).",
        "",
    ]
    lines += _table(
        [
            "candidate",
            "state",
            "active dims / doc: mean (range)",
            "median (p10–p90)",
            "positive share",
            "dead entries",
            "always-on entries",
            "mean cosine",
            "max-logit p50 / p90",
        ],
        rows,
    )
    lines += [
        "Range: sparse between `diagnose.verdict.dead_below` and min(`max_active_per_doc`, `dense_above` × "
        "vocabulary) active dims per document. APC is suggested only when it moves the start toward that range "
        "without making it dense; a start already in it keeps apc=off:",
        "",
    ]
    for r in probed:
        effect = effect_of(r)
        verdict = ("suggested" if effect.accepted else "not suggested") if effect.after is not None else "no APC probed"
        change = f"; {effect.change()}" if effect.after is not None else ""
        lines.append(
            f"- {r['candidate']['label']}: {effect.as_built()}, {effect.start.value} (range "
            f"{effect.range.show()}){change}: {verdict}"
        )
    return lines + ["", "![activity](activity.png)", ""]


def _verdict(
    results: Sequence[Mapping[str, Any]], ranking: Sequence[Mapping[str, Any]], suggestions: Sequence[Mapping[str, Any]]
) -> list[str]:
    suggestion = suggestions[0]
    names = ", ".join(c.label for c in criteria_for(results))
    lines = [
        "## 4. Verdict",
        "",
        f"Ranked by the mean rank over: {names} (1 = best); candidates with random-init "
        "weights after the pretrained ones.",
        "",
    ]
    for e in ranking:
        lines.append(f"{e['place']}. **{e['label']}** (mean rank {e['score']:.2f}): {'; '.join(e['reasons'])}")
    lead = "Suggested" if not suggestion["random_init"] else "No pretrained candidate; the first random-init one"
    lines += ["", f"{lead} for **{suggestion['label']}**:", "", "```bash", suggestion["command"], "```", ""]
    lines += [f"- {w}" for w in suggestion["why"]]
    if len(suggestions) > 1:
        lines += ["", "For the other candidates:", ""]
        lines += [f"- {s['label']}{' (random-init)' * s['random_init']}: `{s['command']}`" for s in suggestions[1:]]
    return lines + [""]


def report_markdown(
    results: Sequence[Mapping[str, Any]],
    ranking: Sequence[Mapping[str, Any]],
    suggestions: Sequence[Mapping[str, Any]],
    top: Mapping[str, Any] | None,
) -> list[str]:
    """The lines of report.md: `ranking` and `suggestions` best first (vtlab.diagnose.verdict), `top` the best
    pretrained candidate (None when every candidate has random-init weights)."""
    corpus = results[0]["corpus"]
    md = [
        f"# vtlab diagnose: {len(results)} candidate{'s' * (len(results) != 1)} on {corpus['name']}",
        "",
        f"{corpus['docs']:,} documents, {results[0]['fit']['words']:,} whitespace words. "
        + (
            f"Best: **{top['label']}**; suggested: `{suggestions[0]['command']}` (section 4)."
            if top
            else "Best: none (every candidate has random-init weights); see section 4."
        ),
        "",
    ]
    md += _candidates(results) + _fit(results) + _redundancy(results) + _activity(results)
    return md + _verdict(results, ranking, suggestions)
