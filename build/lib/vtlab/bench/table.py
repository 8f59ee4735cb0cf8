"""The table `make bench` prints: absolute figures, each row's peer, the ratio or value and its target verdict; every
row that ran on a sample of the texts says how many."""

from __future__ import annotations

import argparse
from typing import Any

from vtlab.bench.summary import QUALITY_KEYS, model_suffix, on_texts

LABELS = {"vtlab-bf16": "bf16", "vtlab-int8": "int8", "onnx": "ORT", "onnx-int8": "ORT-int8"}  # quality columns


class Rows:
    def __init__(self, summary: dict[str, Any]) -> None:
        self.summary = summary
        self.rows: list[tuple[str, str, str, str, str]] = []

    def add(self, what: str, vt: str, peer: str, key: str | None = None, raw: Any = None) -> None:
        val = self.summary.get(key) if key else raw
        verdict = ""
        j = self.summary.get("targets", {}).get(key)
        if j:
            if j["met"] is None:
                verdict = f"{j['target']}: n/a ({j['not_applicable']})"
            else:
                verdict = f"{j['target']}: " + ("met" if j["met"] else f"MISSED ({j.get('shortfall')})")
        shown = "" if val is None else (f"{val:.3f}" if isinstance(val, float) else str(val))
        self.rows.append((what, vt, peer, shown, verdict))

    def text(self) -> str:
        head = ("measurement", "vtlab", "peer / reference", "ratio / value", "target")
        widths = [max(len(r[i]) for r in [head, *self.rows]) for i in range(5)]
        line = lambda r: " | ".join(c.ljust(w) for c, w in zip(r, widths))  # noqa: E731
        return "\n".join([line(head), "-+-".join("-" * w for w in widths), *map(line, self.rows)])


def of(n: int, total: int) -> str:
    return f"{total:,} texts" if n == total else f"first {n:,} of {total:,}"


def same(a: dict[str, Any], b: dict[str, Any], side: str, field: str = "per_s") -> tuple[float, float, int]:
    """a's and b's `field` on the texts both encoded, and how many."""
    n = min(a[side]["n"], b[side]["n"])
    return on_texts(a, side, n)[field], on_texts(b, side, n)[field], n  # type: ignore[index]


def encode_rows(t: Rows, enc: dict[str, Any]) -> None:
    total, total_q = enc["texts"]["docs"], enc["texts"]["queries"]
    for model, r in enc.get("models", {}).items():
        sfx = model_suffix(model)
        v = r["vtlab"]
        for peer, name in (("st", "ST"), ("onnx", "ORT")):
            if peer not in r:
                continue
            p = r[peer]
            a, b, n = same(v, p, "doc")
            t.add(
                f"encode {model} docs/s ({of(n, total)})",
                f"{a:.1f}",
                f"{name} {b:.1f}",
                f"encode_speedup_vs_{peer}{sfx}",
            )
            a, b, n = same(v, p, "query")
            t.add(
                f"encode {model} queries/s ({of(n, total_q)})",
                f"{a:.1f}",
                f"{name} {b:.1f}",
                f"encode_query_speedup_vs_{peer}{sfx}",
            )
            t.add(
                f"encode {model} peak RSS MB vs {name}",
                f"{v['peak_rss_mb']:.0f}",
                f"{name} {p['peak_rss_mb']:.0f}",
                f"encode_rss_ratio_vs_{peer}{sfx}",
            )
            if peer == "st":
                diffs = ", ".join(f"{k} {c['max_abs_diff']:.1e}" for k, c in r["vs_st"].items())
                t.add(
                    f"encode {model} = ST to 1e-5 ({of(p['doc']['n'], total)})",
                    str(r["equal_to_st_1e-5"]),
                    f"max|Δ| {diffs}",
                )
            else:
                diffs = ", ".join(f"{k} {d:.1e}" for k, d in r["vs_onnx"].items())
                t.add(f"encode {model} = ORT to 1e-4", str(r["equal_to_onnx_1e-4"]), f"max|Δ| {diffs}")
        a, b, n = same(v, r["floor"], "doc", "wall_s")
        t.add(f"encode {model} doc pass s ({of(n, total)})", f"{a:.2f}", f"floor {b:.2f}", f"encode_vs_floor{sfx}")
    r = enc.get("models", {}).get("splade-tiny", {})
    for tool, ref, key in (
        ("vtlab-int8", "vtlab", "encode_int8_speedup_vs_fp32"),
        ("vtlab-bf16", "vtlab", "encode_bf16_speedup_vs_fp32"),
        ("onnx-int8", "onnx", "encode_onnx_int8_speedup_vs_onnx"),
    ):
        if tool in r:
            a, b, n = same(r[tool], r[ref], "doc")
            t.add(f"encode splade-tiny {tool} docs/s ({of(n, total)})", f"{a:.1f}", f"{ref} {b:.1f}", key)
    if "encode_precision_auto" in t.summary:
        t.add(
            f"encode splade-tiny precision=auto → {t.summary['encode_precision_auto']}",
            "",
            "fp32",
            "encode_auto_speedup_vs_fp32",
        )
    q = r.get("quality")
    if q:
        for s, size in q["sets"].items():
            k = s.replace("-", "_")
            others = " · ".join(
                f"{LABELS[tool]} {q['ndcg10'][tool][s]:.4f}" for tool in QUALITY_KEYS if tool in q["ndcg10"]
            )
            t.add(
                f"nDCG@10 {s} ({size['queries']} q, {size['docs']} docs): fp32; others",
                f"{q['ndcg10']['vtlab'][s]:.4f}",
                others,
                f"encode_int8_ndcg10_vs_fp32_{k}",
            )
        for tool, why in q["not_measured"].items():
            t.add(f"nDCG@10 {LABELS[tool]}", "", why)


def table(parts: dict[str, Any], summary: dict[str, Any], args: argparse.Namespace) -> str:
    t = Rows(summary)
    if "encode" in parts:
        encode_rows(t, parts["encode"])
    tr = parts.get("train")
    if tr:
        t.add(
            "train step s (batch 16, len 128)",
            f"{tr['vtlab']['s_per_step']:.3f}",
            f"ST {tr['st']['s_per_step']:.3f}",
            "train_speedup_vs_st",
        )
        t.add(
            "train peak RSS MB",
            f"{tr['vtlab']['peak_rss_mb']:.0f}",
            f"ST {tr['st']['peak_rss_mb']:.0f}",
            "train_rss_ratio_vs_st",
        )
    for name, r in parts.get("retrieval", {}).items():
        sfx = "" if name == "synthetic" else f"_{name}"
        n = r["exact"]["data"]["n_docs"]
        sc, ex, se = r["scipy"], r["exact"], r["seismic"]
        th = f"{args.threads}_threads"
        t.add(
            f"{name} ({n:,} docs) exact ms/query",
            f"{ex['ms_per_query']:.3f}",
            f"scipy 1 thr {sc['ms_per_query']:.3f}",
            f"exact_speedup_vs_scipy{sfx}",
        )
        t.add(
            f"{name} exact ms/query, {args.threads} threads both",
            f"{ex['ms_per_query']:.3f}",
            f"scipy {sc[th]['ms_per_query']:.3f}",
            f"exact_speedup_vs_scipy_same_threads{sfx}",
        )
        t.add(
            f"{name} exact build s / index MB",
            f"{ex['build_s']:.2f} / {ex['index_mb']:.0f}",
            f"scipy {sc['build_s']:.2f} / {sc['index_mb']:.0f}",
        )
        t.add(
            f"{name} seismic ms/query",
            f"{se['ms_per_query']:.3f}",
            f"scipy 1 thr {sc['ms_per_query']:.3f}",
            f"seismic_speedup_vs_scipy{sfx}",
        )
        t.add(f"{name} seismic recall@10", "", "", f"seismic_recall_at_10{sfx}")
        t.add(
            f"{name} seismic build s / index RSS MB",
            f"{se['build_s']:.1f} / {se['rss_after_build_mb']:.0f}",
            f"exact {ex['build_s']:.2f} / {ex.get('rss_after_build_mb', ex['index_mb']):.0f}",
        )
    if "transfer" in parts:
        tf = parts["transfer"]
        t.add("transfer s (ModernBERT-base shapes)", f"{tf['transfer_s']:.1f}", "", "transfer_seconds")
        t.add("transfer peak GB", f"{tf['peak_rss_gb']:.2f}", "", "transfer_peak_gb")
    if "total_wall_s" in summary:
        t.add("make bench wall s (all parts)", "", "", "total_wall_s")
    return t.text()
