"""The bench's parts, each run as fresh worker subprocesses (vtlab.bench.common.run_worker), vtlab and the peer of
each row back to back: encode (vectors checked equal to sentence-transformers' and ONNX Runtime's, bf16 quality),
train, retrieval (exact top-10 checked equal to scipy's, Seismic's recall against it) and transfer."""

from __future__ import annotations

import argparse
import importlib.util
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

# Seismic settings of the bench (tuned on the synthetic 1M set; see README "Performance")
SEISMIC = {"n_postings": 2500, "centroid_fraction": 0.05, "summary_energy": 0.4, "query_cut": 10, "heap_factor": 0.8}


class Log:
    """Progress lines on stderr with elapsed time (the summary table goes to stdout)."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()

    def __call__(self, msg: str) -> None:
        print(f"[bench {time.perf_counter() - self.t0:7.1f}s] {msg}", file=sys.stderr, flush=True)


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
