"""The bench's summary: ratios of vtlab to each peer, each judged against its target (a missed target with its
shortfall), and the table `make bench` prints."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

# key → (comparison, target): ">=" means higher is better
TARGETS: dict[str, tuple[str, float]] = {
    "encode_speedup_vs_st": (">=", 4.0),
    "encode_rss_ratio_vs_st": ("<=", 0.3),
    "encode_vs_floor": ("<=", 1.2),
    "train_speedup_vs_st": (">=", 1.5),
    "train_rss_ratio_vs_st": ("<=", 0.8),
    "exact_speedup_vs_scipy": (">=", 2.0),
    "seismic_speedup_vs_scipy": (">=", 5.0),
    "seismic_recall_at_10": (">=", 0.99),
    "transfer_seconds": ("<=", 60.0),
    "transfer_peak_gb": ("<=", 6.0),
}


def judge(key: str, value: float | None) -> dict[str, Any]:
    """Target verdict; `shortfall` says by how much a missed target is missed (a factor, or points of recall)."""
    op, target = TARGETS[key]
    if value is None or not np.isfinite(value):
        return {"value": None, "target": f"{op} {target:g}", "met": False, "shortfall": "not measured"}
    met = value >= target if op == ">=" else value <= target
    out: dict[str, Any] = {"value": round(float(value), 4), "target": f"{op} {target:g}", "met": bool(met)}
    if not met:
        if key == "seismic_recall_at_10":
            out["shortfall"] = f"{(target - value) * 100:.2f} points of recall short"
        elif op == ">=":
            out["shortfall"] = f"needs {target / value:.2f}x more"
        else:
            out["shortfall"] = f"{value / target:.2f}x over"
    return out


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def summarize(parts: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    keys: dict[str, Any] = {}
    enc = parts.get("encode", {})
    for model, r in enc.items():
        suffix = "" if model == "splade-tiny" else f"_{model.replace('-', '_')}"
        keys[f"encode_speedup_vs_st{suffix}"] = ratio(r["vtlab"]["doc"]["per_s"], r["st"]["doc"]["per_s"])
        keys[f"encode_query_speedup_vs_st{suffix}"] = ratio(r["vtlab"]["query"]["per_s"], r["st"]["query"]["per_s"])
        keys[f"encode_rss_ratio_vs_st{suffix}"] = ratio(r["vtlab"]["peak_rss_mb"], r["st"]["peak_rss_mb"])
        keys[f"encode_vs_floor{suffix}"] = ratio(r["vtlab"]["doc"]["wall_s"], r["floor"]["doc"]["wall_s"])
        keys[f"encode_equal_to_st{suffix}"] = r["equal_to_st_1e-5"]
        if "onnx" in r:  # ONNX Runtime: the same ratios as against sentence-transformers (vtlab / ORT)
            keys[f"encode_speedup_vs_onnx{suffix}"] = ratio(r["vtlab"]["doc"]["per_s"], r["onnx"]["doc"]["per_s"])
            keys[f"encode_query_speedup_vs_onnx{suffix}"] = ratio(
                r["vtlab"]["query"]["per_s"], r["onnx"]["query"]["per_s"]
            )
            keys[f"encode_rss_ratio_vs_onnx{suffix}"] = ratio(r["vtlab"]["peak_rss_mb"], r["onnx"]["peak_rss_mb"])
            keys[f"encode_equal_to_onnx{suffix}"] = r["equal_to_onnx_1e-4"]
    if "vtlab-bf16" in enc.get("splade-tiny", {}):
        r = enc["splade-tiny"]
        keys["encode_bf16_speedup_vs_fp32"] = ratio(r["vtlab-bf16"]["doc"]["per_s"], r["vtlab"]["doc"]["per_s"])
        # precision=auto runs one of the two measured rows: its speed-up over fp32 (1.0 where auto picks fp32)
        auto = r.get("precision_auto")
        if auto is not None:
            keys["encode_precision_auto"] = auto
            chosen = r["vtlab-bf16" if auto == "bf16" else "vtlab"]
            keys["encode_auto_speedup_vs_fp32"] = ratio(chosen["doc"]["per_s"], r["vtlab"]["doc"]["per_s"])
        if "delta_ndcg10" in r.get("bf16_quality", {}):
            keys["encode_bf16_ndcg10_delta"] = r["bf16_quality"]["delta_ndcg10"]
    tr = parts.get("train")
    if tr:
        keys["train_speedup_vs_st"] = ratio(tr["st"]["s_per_step"], tr["vtlab"]["s_per_step"])
        keys["train_rss_ratio_vs_st"] = ratio(tr["vtlab"]["peak_rss_mb"], tr["st"]["peak_rss_mb"])
    ret = parts.get("retrieval", {})
    for name, r in ret.items():
        suffix = "" if name == "synthetic" else f"_{name}"
        scipy_ms = r["scipy"]["ms_per_query"]  # the peer: one thread
        keys[f"exact_speedup_vs_scipy{suffix}"] = ratio(scipy_ms, r["exact"]["ms_per_query"])
        t = f"{args.threads}_threads"
        keys[f"exact_speedup_vs_scipy_same_threads{suffix}"] = ratio(
            r["scipy"][t]["ms_per_query"], r["exact"]["ms_per_query"]
        )
        keys[f"seismic_speedup_vs_scipy{suffix}"] = ratio(scipy_ms, r["seismic"]["ms_per_query"])
        keys[f"seismic_recall_at_10{suffix}"] = r["seismic_recall_at_10"]
        keys[f"exact_equals_scipy{suffix}"] = r["exact_equals_scipy"]
    if "transfer" in parts:
        keys["transfer_seconds"] = parts["transfer"]["transfer_s"]
        keys["transfer_peak_gb"] = parts["transfer"]["peak_rss_gb"]
    keys = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in keys.items()}
    return {**keys, "targets": {k: judge(k, keys.get(k)) for k in TARGETS if k in keys}}


def table(parts: dict[str, Any], summary: dict[str, Any], args: argparse.Namespace) -> str:
    rows: list[tuple[str, str, str, str, str]] = []

    def add(what: str, vt: str, peer: str, key: str | None = None, raw: float | None = None) -> None:
        val = summary.get(key) if key else raw
        verdict = ""
        if key in summary.get("targets", {}):
            j = summary["targets"][key]
            verdict = f"{j['target']}: " + ("met" if j["met"] else f"MISSED ({j.get('shortfall')})")
        rows.append(
            (what, vt, peer, "" if val is None else (f"{val:.3f}" if isinstance(val, float) else str(val)), verdict)
        )

    for model, r in parts.get("encode", {}).items():
        sfx = "" if model == "splade-tiny" else f"_{model.replace('-', '_')}"
        v, s, f = r["vtlab"], r["st"], r["floor"]
        model = f"{model} ({v['doc']['n']:,} docs)"
        add(
            f"encode {model} docs/s",
            f"{v['doc']['per_s']:.1f}",
            f"ST {s['doc']['per_s']:.1f}",
            f"encode_speedup_vs_st{sfx}",
        )
        add(
            f"encode {model} queries/s",
            f"{v['query']['per_s']:.1f}",
            f"ST {s['query']['per_s']:.1f}",
            f"encode_query_speedup_vs_st{sfx}",
        )
        add(
            f"encode {model} peak RSS MB",
            f"{v['peak_rss_mb']:.0f}",
            f"ST {s['peak_rss_mb']:.0f}",
            f"encode_rss_ratio_vs_st{sfx}",
        )
        add(
            f"encode {model} doc pass s",
            f"{v['doc']['wall_s']:.2f}",
            f"floor {f['doc']['wall_s']:.2f}",
            f"encode_vs_floor{sfx}",
        )
        add(
            f"encode {model} = ST to 1e-5",
            str(r["equal_to_st_1e-5"]),
            "max|Δ| " + ", ".join(f"{k} {c['max_abs_diff']:.1e}" for k, c in r["vs_st"].items()),
        )
        if "onnx" in r:
            o = r["onnx"]
            add(
                f"encode {model} docs/s vs ONNX Runtime",
                f"{v['doc']['per_s']:.1f}",
                f"ORT {o['doc']['per_s']:.1f}",
                f"encode_speedup_vs_onnx{sfx}",
            )
            add(
                f"encode {model} queries/s vs ONNX Runtime",
                f"{v['query']['per_s']:.1f}",
                f"ORT {o['query']['per_s']:.1f}",
                f"encode_query_speedup_vs_onnx{sfx}",
            )
            add(
                f"encode {model} peak RSS MB vs ONNX Runtime",
                f"{v['peak_rss_mb']:.0f}",
                f"ORT {o['peak_rss_mb']:.0f}",
                f"encode_rss_ratio_vs_onnx{sfx}",
            )
            add(
                f"encode {model} = ORT to 1e-4",
                str(r["equal_to_onnx_1e-4"]),
                "max|Δ| " + ", ".join(f"{k} {d:.1e}" for k, d in r["vs_onnx"].items()),
            )
        if "vtlab-bf16" in r:
            b = r["vtlab-bf16"]
            add(
                f"encode {model} bf16 docs/s",
                f"{b['doc']['per_s']:.1f}",
                f"fp32 {v['doc']['per_s']:.1f}",
                "encode_bf16_speedup_vs_fp32",
            )
            if "encode_precision_auto" in summary:
                add(
                    f"encode {model} precision=auto → {summary['encode_precision_auto']}",
                    "",
                    "fp32",
                    "encode_auto_speedup_vs_fp32",
                )
            if "delta_ndcg10" in r.get("bf16_quality", {}):
                q = r["bf16_quality"]
                add(
                    "encode bf16 nDCG@10 BoolQ",
                    f"{q['vtlab-bf16']:.4f}",
                    f"fp32 {q['vtlab']:.4f}",
                    "encode_bf16_ndcg10_delta",
                )
    tr = parts.get("train")
    if tr:
        add(
            "train step s (batch 16, len 128)",
            f"{tr['vtlab']['s_per_step']:.3f}",
            f"ST {tr['st']['s_per_step']:.3f}",
            "train_speedup_vs_st",
        )
        add(
            "train peak RSS MB",
            f"{tr['vtlab']['peak_rss_mb']:.0f}",
            f"ST {tr['st']['peak_rss_mb']:.0f}",
            "train_rss_ratio_vs_st",
        )
    for name, r in parts.get("retrieval", {}).items():
        sfx = "" if name == "synthetic" else f"_{name}"
        n = r["exact"]["data"]["n_docs"]
        sc, ex, se = r["scipy"], r["exact"], r["seismic"]
        t = f"{args.threads}_threads"
        add(
            f"{name} ({n:,} docs) exact ms/query",
            f"{ex['ms_per_query']:.3f}",
            f"scipy 1 thr {sc['ms_per_query']:.3f}",
            f"exact_speedup_vs_scipy{sfx}",
        )
        add(
            f"{name} exact ms/query, {args.threads} threads both",
            f"{ex['ms_per_query']:.3f}",
            f"scipy {sc[t]['ms_per_query']:.3f}",
            f"exact_speedup_vs_scipy_same_threads{sfx}",
        )
        add(
            f"{name} exact build s / index MB",
            f"{ex['build_s']:.2f} / {ex['index_mb']:.0f}",
            f"scipy {sc['build_s']:.2f} / {sc['index_mb']:.0f}",
            raw=None,
        )
        add(
            f"{name} seismic ms/query",
            f"{se['ms_per_query']:.3f}",
            f"scipy 1 thr {sc['ms_per_query']:.3f}",
            f"seismic_speedup_vs_scipy{sfx}",
        )
        add(f"{name} seismic recall@10", "", "", f"seismic_recall_at_10{sfx}")
        add(
            f"{name} seismic build s / index RSS MB",
            f"{se['build_s']:.1f} / {se['rss_after_build_mb']:.0f}",
            f"exact {ex['build_s']:.2f} / {ex.get('rss_after_build_mb', ex['index_mb']):.0f}",
            raw=None,
        )
    if "transfer" in parts:
        t = parts["transfer"]
        add("transfer s (ModernBERT-base shapes)", f"{t['transfer_s']:.1f}", "", "transfer_seconds")
        add("transfer peak GB", f"{t['peak_rss_gb']:.2f}", "", "transfer_peak_gb")
    head = ("measurement", "vtlab", "peer / reference", "ratio / value", "target")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(5)]
    line = lambda r: " | ".join(c.ljust(w) for c, w in zip(r, widths))  # noqa: E731
    return "\n".join([line(head), "-+-".join("-" * w for w in widths), *map(line, rows)])
