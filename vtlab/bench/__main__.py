"""`make bench`: vtlab against its peers on the same model, data, batch and threads, in one run.

    python -m vtlab.bench [--quick] [--only encode,train,retrieval,transfer] [--n-docs 1000000] [--threads 2]

Every measurement runs in a fresh subprocess (peak RSS is per tool); vtlab and the peer of each row run back to back,
so the ratios compare the two under the same machine load. Writes outputs/bench/<part>/*.json, the vectors and
top-10 lists used for the equality / recall checks, and outputs/bench/summary.json; prints a table of absolute figures,
ratios and targets. Numbers are measured, never asserted: a target that is missed is reported with its shortfall.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from vtlab.bench.common import machine, run_worker
from vtlab.bench.encode import model_dir, onnx_dir
from vtlab.bench.retrieval import synthetic_path
from vtlab.data.boolq import boolq_collection
from vtlab.evaluation import compute_metrics
from vtlab.index import InvertedIndex, to_run

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

# Seismic settings of the bench (tuned on the synthetic 1M set; see README "Performance")
SEISMIC = {"n_postings": 2500, "centroid_fraction": 0.05, "summary_energy": 0.4, "query_cut": 10, "heap_factor": 0.8}


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


class Log:
    """Progress lines on stderr with elapsed time (the summary table goes to stdout)."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()

    def __call__(self, msg: str) -> None:
        print(f"[bench {time.perf_counter() - self.t0:7.1f}s] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------------- parts


def encode_part(out: Path, args: argparse.Namespace, log: Log) -> dict[str, Any]:
    import scipy.sparse as sp

    vec = out / "vectors"
    has_ort = importlib.util.find_spec("onnxruntime") is not None
    if not has_ort:
        log("encode: onnxruntime is not installed (pip install -e '.[onnx]'): no ONNX Runtime rows")
    res: dict[str, Any] = {}
    models = ["splade-tiny"] if args.quick else args.models.split(",")
    for model in models:
        # MiniLM-L6 (384 hidden, 6 layers) costs ~4x SPLADE-tiny per text: its three tools share a prefix of the
        # collection so the whole bench fits its 20-minute budget; ratios compare the same texts
        n = args.docs or (args.minilm_docs if model == "minilm" and args.minilm_docs else None)
        limits = ["--docs", str(n), "--queries", str(n)] if n else []
        model_dir(model)  # materialize once, before the workers race for it
        if has_ort:
            log(f"encode {model}: ONNX export (once, cached)")
            onnx_dir(model)
        tools = (
            ["st", "vtlab", "floor"]
            + (["onnx"] if has_ort else [])
            + (["vtlab-bf16"] if model == "splade-tiny" else [])
        )
        r: dict[str, Any] = {}
        for tool in tools:
            log(f"encode {model} {tool}")
            r[tool] = run_worker(
                "vtlab.bench.encode",
                ["--tool", tool, "--model", model, "--threads", str(args.threads), "--vectors", str(vec), *limits],
                out / "encode" / f"{model}-{tool}.json",
                args.threads,
            )
        check = {}
        for side in ("doc", "query"):
            a = sp.load_npz(vec / f"vtlab-{model}-{side}.npz")
            b = sp.load_npz(vec / f"st-{model}-{side}.npz")
            diff = abs(a - b)
            check[side] = {
                "max_abs_diff": float(diff.max()) if diff.nnz else 0.0,
                "same_support": bool(((a != 0) != (b != 0)).nnz == 0),
            }
        r["equal_to_st_1e-5"] = all(c["max_abs_diff"] <= 1e-5 for c in check.values())
        r["vs_st"] = check
        if "onnx" in r:
            r["vs_onnx"] = {
                side: max_abs_diff(vec / f"vtlab-{model}-{side}.npz", vec / f"onnx-{model}-{side}.npz")
                for side in ("doc", "query")
            }
            r["equal_to_onnx_1e-4"] = all(d <= 1e-4 for d in r["vs_onnx"].values())
        res[model] = r
    tiny = res["splade-tiny"]
    tiny["precision_auto"] = machine()["precision_auto"]  # what SpladeEncoder(precision="auto") runs on this CPU
    if "vtlab-bf16" in tiny:
        tiny["bf16_quality"] = bf16_quality(vec)
    return res


def max_abs_diff(a: Path, b: Path) -> float:
    import scipy.sparse as sp

    diff = abs(sp.load_npz(a) - sp.load_npz(b))
    return float(diff.max()) if diff.nnz else 0.0


def bf16_quality(vec: Path) -> dict[str, Any]:
    """nDCG@10 on BoolQ-val of the fp32 and the bf16 vectors (exact retrieval)."""
    import scipy.sparse as sp

    c = boolq_collection("validation")
    q_ids, d_ids = list(c.queries), list(c.corpus)
    out = {}
    for tool in ("vtlab", "vtlab-bf16"):
        d = sp.load_npz(vec / f"{tool}-splade-tiny-doc.npz")
        q = sp.load_npz(vec / f"{tool}-splade-tiny-query.npz")
        if d.shape[0] != len(d_ids) or q.shape[0] != len(q_ids):
            return {"skipped": "partial collection (--docs/--queries)"}
        s, i = InvertedIndex(d).search(q, 100)
        out[tool] = compute_metrics(to_run(s, i, q_ids, d_ids), c.qrels, ["nDCG@10"])["nDCG@10"]
    out["delta_ndcg10"] = out["vtlab-bf16"] - out["vtlab"]
    return out


def train_part(out: Path, args: argparse.Namespace, log: Log) -> dict[str, Any]:
    steps = ["--steps", "6", "--warmup", "2"] if args.quick else []
    res = {}
    for tool in ("st", "vtlab"):
        log(f"train {tool}")
        res[tool] = run_worker(
            "vtlab.bench.train",
            ["--tool", tool, "--threads", str(args.threads), *steps],
            out / "train" / f"{tool}.json",
            args.threads,
        )
    return res


def retrieval_part(out: Path, args: argparse.Namespace, log: Log) -> dict[str, Any]:
    top = out / "top"
    seismic = [f"--seismic-{k.replace('_', '-')}={v}" for k, v in SEISMIC.items()]
    res: dict[str, Any] = {}
    collections = []
    if (out / "vectors" / "vtlab-splade-tiny-doc.npz").is_file():
        collections.append(("boolq", ["--vectors", str(out / "vectors")]))
    else:
        log("retrieval: no BoolQ vectors (run the encode part first); BoolQ rows skipped")
    n_docs = args.n_docs
    log(f"retrieval: synthetic collection of {n_docs:,} docs (generated once, cached)")
    synthetic_path(n_docs, args.n_queries)
    collections.append(("synthetic", ["--n-docs", str(n_docs), "--n-queries", str(args.n_queries)]))
    for name, extra in collections:
        r: dict[str, Any] = {}
        for method in ("scipy", "exact", "seismic"):
            log(f"retrieval {name} {method}")
            r[method] = run_worker(
                "vtlab.bench.retrieval",
                [
                    "--collection",
                    name,
                    "--method",
                    method,
                    "--threads",
                    str(args.threads),
                    "--top",
                    str(top),
                    *extra,
                    *(seismic if method == "seismic" else []),
                ],
                out / "retrieval" / f"{name}-{method}.json",
                args.threads,
            )
        exact = np.load(top / f"{name}-exact.npy")
        r["exact_equals_scipy"] = bool(np.array_equal(exact, np.load(top / f"{name}-scipy.npy")))
        approx = np.load(top / f"{name}-seismic.npy")
        r["seismic_recall_at_10"] = float(
            np.mean([len(set(a) & set(b[b >= 0])) / len(a) for a, b in zip(exact, approx)])
        )
        res[name] = r
    return res


def transfer_part(out: Path, args: argparse.Namespace, log: Log) -> dict[str, Any]:
    log("transfer (ModernBERT-base shapes → bert-uncased, semantic-pmi)")
    return run_worker("vtlab.bench.transfer", ["--similarity", "pmi"], out / "transfer.json", args.threads)


# ---------------------------------------------------------------------------------------------------- summary


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="outputs/bench")
    ap.add_argument("--only", default="encode,train,retrieval,transfer")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-docs", type=int, default=1_000_000, help="synthetic collection size")
    ap.add_argument("--n-queries", type=int, default=1000)
    ap.add_argument("--docs", type=int, default=None, help="encode only the first N passages / questions")
    ap.add_argument("--models", default="splade-tiny,minilm", help="encode bench models (splade-tiny first)")
    ap.add_argument(
        "--minilm-docs", type=int, default=1000, help="MiniLM encodes the first N passages / questions (0: all)"
    )
    ap.add_argument(
        "--quick", action="store_true", help="a smoke run: SPLADE-tiny on 256 texts, 6 train steps, 20k synthetic docs"
    )
    args = ap.parse_args()
    if args.quick:
        args.docs = args.docs or 256
        args.n_docs = min(args.n_docs, 20_000)
        args.n_queries = min(args.n_queries, 200)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = Log()
    parts: dict[str, Any] = {}
    runners = {"encode": encode_part, "train": train_part, "retrieval": retrieval_part, "transfer": transfer_part}
    info = {
        "machine_start": machine(),
        "args": vars(args),
        "gpu": "not measured (no GPU in this environment)",
        "seismic": SEISMIC,
    }
    for name in args.only.split(","):
        if name not in runners:
            raise SystemExit(f"--only: unknown part {name!r} (choose from {', '.join(runners)})")
        began = time.perf_counter()
        parts[name] = runners[name](out, args, log)
        info[f"{name}_wall_s"] = round(time.perf_counter() - began, 1)
    info["machine_end"] = machine()
    info["total_wall_s"] = round(time.perf_counter() - log.t0, 1)
    summary = summarize(parts, args)
    (out / "details.json").write_text(json.dumps({"info": info, **parts}, indent=2, default=float) + "\n")
    (out / "summary.json").write_text(json.dumps({**summary, "info": info}, indent=2, default=float) + "\n")
    print(table(parts, summary, args))
    print(
        f"\nload average at start {info['machine_start']['loadavg_1_5_15']}, end "
        f"{info['machine_end']['loadavg_1_5_15']} on {info['machine_start'].get('cpus')} CPUs; GPU not measured; "
        f"CPU native bf16 (avx512_bf16/amx_bf16): {info['machine_start'].get('avx512_bf16')}/"
        f"{info['machine_start'].get('amx_bf16')}, precision=auto → {info['machine_start'].get('precision_auto')}; "
        f"total {info['total_wall_s']:.0f}s → {out / 'summary.json'}"
    )


if __name__ == "__main__":
    main()
