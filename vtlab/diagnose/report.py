"""The diagnose report over one or more candidates: report.md, report.json and PNG plots in one directory.

Each job of `stage=diagnose` writes its figures as `<run_dir>/diagnose/diagnose.json`; `collect(dir)` reads every such
file under a directory (a multirun's sweep dir) and `render` compares them, so the combined report can be rebuilt at
any time (`python -m vtlab.diagnose DIR`).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vtlab.atomic import atomic_path, atomic_write, write_json
from vtlab.diagnose.verdict import best, criteria_for, effect_of, final_activity, rank, suggest
from vtlab.errors import VtlabError

RESULT_FILE = "diagnose.json"


# -- collecting --------------------------------------------------------------------------------------------------------
def collect(root: str | Path) -> list[dict[str, Any]]:
    """Every `diagnose.json` under `root` (sorted by path), with labels made unique."""
    root = Path(root)
    if not root.is_dir():
        raise VtlabError(f"{root}: not a directory")
    results = []

    # job number order (2 before 10); (0, n) / (1, name) keys never compare an int with a str
    def order(p: Path) -> list[tuple[int, int | str]]:
        return [(0, int(s)) if s.isdigit() else (1, s) for s in p.parts]

    for path in sorted(root.rglob(RESULT_FILE), key=order):
        try:
            result = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise VtlabError(f"{path}: unreadable diagnose result ({e})") from None
        result["candidate"]["job_dir"] = str(path.parent)
        results.append(result)
    return unique_labels(results)


def unique_labels(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Same backbone × vocab twice (e.g. an apc sweep): add the apc, then the job directory, to the label."""
    for extra in (lambda c: f"apc={c['apc']}", lambda c: Path(c.get("job_dir", "?")).parent.name):
        counts = Counter(r["candidate"]["label"] for r in results)
        for r in results:
            if counts[r["candidate"]["label"]] > 1:
                r["candidate"]["label"] += f" · {extra(r['candidate'])}"
    return results


# -- plots -------------------------------------------------------------------------------------------------------------
def _save(fig, path: Path) -> Path:
    """savefig through a temp file + rename: concurrent jobs re-rendering the same report never leave half a PNG."""
    with atomic_path(path, suffix=".png", disk_errors=False) as tmp:  # savefig goes by the extension
        fig.savefig(tmp, dpi=100)
    return path


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _bars(ax, labels: Sequence[str], values: Sequence[float], title: str, pct: bool = False) -> None:
    x = np.arange(len(labels))
    ax.bar(x, values, color=[f"C{i}" for i in range(len(labels))])
    ax.set_xticks(x, labels, rotation=20, ha="right", fontsize=8)
    ax.set_title(title, fontsize=10)
    if pct:
        from matplotlib.ticker import PercentFormatter

        ax.yaxis.set_major_formatter(PercentFormatter(xmax=1.0))  # decimals follow the axis range (0.2%, not 0%)


def _grouped_bars(ax, groups: Sequence[str], series: Sequence[tuple[str, Sequence[float]]], fontsize: int = 8) -> None:
    """One bar per (group, series) pair, series side by side within each group, colored per series."""
    width = 0.8 / len(series)
    for i, (label, values) in enumerate(series):
        ax.bar(np.arange(len(groups)) + i * width, values, width, label=label, color=f"C{i}")
    ax.set_xticks(np.arange(len(groups)) + width * (len(series) - 1) / 2, groups, fontsize=fontsize)


def _finish(fig, path: Path) -> Path:
    fig.tight_layout()
    out = _save(fig, path)
    _plt().close(fig)
    return out


def plot_fit(results: Sequence[Mapping[str, Any]], path: Path) -> Path:
    plt = _plt()
    labels = [r["candidate"]["label"] for r in results]
    fig, axes = plt.subplots(1, 4, figsize=(15, 4))
    _bars(axes[0], labels, [r["fit"]["fertility"] for r in results], "tokens per word (fertility)")
    _bars(axes[1], labels, [r["fit"]["split3_share"] for r in results], "words cut into ≥3 pieces", pct=True)
    _bars(
        axes[2],
        labels,
        [r["fit"]["frequent_single_token_share"] for r in results],
        f"top-{results[0]['fit']['top_words']} words as one token",
        pct=True,
    )
    _bars(axes[3], labels, [r["fit"]["unk_or_byte_rate"] for r in results], "unknown / byte-fallback tokens", pct=True)
    return _finish(fig, path)


def plot_scripts(results: Sequence[Mapping[str, Any]], path: Path) -> Path:
    plt = _plt()
    scripts = list(dict.fromkeys(s for r in results for s in r["fit"]["scripts"]))
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(scripts) * len(results) / 2), 4))
    _grouped_bars(
        ax,
        scripts,
        [
            (r["candidate"]["label"], [r["fit"]["scripts"].get(s, {}).get("fertility", 0.0) for s in scripts])
            for r in results
        ],
    )
    ax.set_ylabel("tokens per word")
    ax.set_title("fertility per script")
    ax.legend(fontsize=8)
    return _finish(fig, path)


def plot_redundancy(results: Sequence[Mapping[str, Any]], path: Path) -> Path:
    plt = _plt()
    labels = [r["candidate"]["label"] for r in results]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    buckets = list(results[0]["redundancy"]["vocab"]["surface_forms_hist"])
    _grouped_bars(
        axes[0],
        buckets,
        [
            (labels[i], [r["redundancy"]["vocab"]["surface_forms_hist"][b] for b in buckets])
            for i, r in enumerate(results)
        ],
        fontsize=10,
    )
    axes[0].set_yscale("log")
    axes[0].set_xlabel("vocabulary entries per normalized form")
    axes[0].set_ylabel("normalized forms")
    axes[0].legend(fontsize=8)
    _bars(
        axes[1],
        labels,
        [r["redundancy"]["vocab"]["effective_ratio"] for r in results],
        "effective dims / vocabulary entries",
        pct=True,
    )
    _bars(
        axes[2],
        labels,
        [r["redundancy"]["corpus"]["spread_mass_share"] for r in results],
        "corpus tokens off their normalized form's main entry",
        pct=True,
    )
    return _finish(fig, path)


def plot_activity(results: Sequence[Mapping[str, Any]], path: Path) -> Path:
    plt = _plt()
    probed = [r for r in results if r.get("activity")]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    data, names = [], []
    for r in probed:
        for state in ("before", "after"):
            if r["activity"].get(state):
                data.append(np.maximum(r["activity"][state]["active_per_doc"], 1))
                names.append(f"{r['candidate']['label']}\n{state}")
    axes[0].boxplot(data, tick_labels=names, showfliers=False)
    axes[0].set_yscale("log")
    axes[0].set_ylabel("active dims per document")
    axes[0].tick_params(axis="x", labelsize=7, rotation=20)
    buckets = list(probed[0]["activity"]["before"]["activation_frequency_hist"])
    _grouped_bars(
        axes[1],
        buckets,
        [
            (
                r["candidate"]["label"],
                np.asarray([final_activity(r)["activation_frequency_hist"][b] for b in buckets])
                / r["activity"]["vocab_size"],
            )
            for r in probed
        ],
    )
    axes[1].set_title("share of the vocabulary by activation frequency (start of fine-tuning)", fontsize=9)
    axes[1].legend(fontsize=7)
    for i, r in enumerate(probed):
        q = r["activity"]["max_logit_quantiles"]
        for state, style in (("before", "-"), ("after", "--")):
            if q.get(state):
                axes[2].plot(
                    q[state],
                    np.linspace(0, 1, len(q[state])),
                    style,
                    color=f"C{i}",
                    label=f"{r['candidate']['label']} {state}",
                )
    axes[2].axvline(0.0, color="k", linewidth=1)
    axes[2].set_xlabel("max over positions of raw MLM logit")
    axes[2].set_ylabel("cumulative share of sampled (doc, term) values")
    axes[2].legend(fontsize=7)
    return _finish(fig, path)


# -- markdown ----------------------------------------------------------------------------------------------------------
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


def render(results: Sequence[dict[str, Any]], out_dir: str | Path) -> dict[str, Path]:
    """Write report.md, report.json and the PNGs comparing `results` into `out_dir`; return their paths."""
    if not results:
        raise VtlabError(f"{out_dir}: no diagnose results to report")
    out_dir = Path(out_dir)
    ranking = rank(results)
    suggestions = [suggest(results[e["_index"]]) for e in ranking]  # best first
    suggestion = suggestions[0]
    top = best(ranking)
    paths = {
        "fit": plot_fit(results, out_dir / "fit.png"),
        "redundancy": plot_redundancy(results, out_dir / "redundancy.png"),
    }
    if any(r["fit"]["multilingual"] for r in results):
        paths["scripts"] = plot_scripts(results, out_dir / "scripts.png")
    if any(r.get("activity") for r in results):
        paths["activity"] = plot_activity(results, out_dir / "activity.png")
    corpus = results[0]["corpus"]
    md = [
        f"# vtlab diagnose: {len(results)} candidate{'s' * (len(results) != 1)} on {corpus['name']}",
        "",
        f"{corpus['docs']:,} documents, {results[0]['fit']['words']:,} whitespace words. "
        + (
            f"Best: **{top['label']}**; suggested: `{suggestion['command']}` (section 4)."
            if top
            else "Best: none (every candidate has random-init weights); see section 4."
        ),
        "",
    ]
    md += _candidates(results) + _fit(results) + _redundancy(results) + _activity(results)
    md += _verdict(results, ranking, suggestions)
    paths["markdown"] = atomic_write(out_dir / "report.md", lambda f: f.write("\n".join(md)))
    ranking_out = [{k: v for k, v in e.items() if k != "_index"} for e in ranking]
    paths["json"] = write_json(
        out_dir / "report.json",
        {
            "corpus": corpus,
            "best": top["label"] if top else None,
            "ranking": ranking_out,
            "suggestion": suggestion,
            "suggestions": suggestions,
            "candidates": list(results),
        },
    )
    return paths
