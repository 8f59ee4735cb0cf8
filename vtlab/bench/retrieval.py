"""Retrieval benchmark worker: one backend on one collection, in this (fresh) process; top-10 per query.

    python -m vtlab.bench.retrieval --collection testbed|synthetic --method scipy|exact|seismic --out FILE
        [--vectors DIR] [--n-docs N] [--n-queries N] [--first-queries N] [--top DIR] [--seismic-* ...]

- `scipy`: the peer baseline, the CSR product Q[16 at a time] @ Dᵀ → dense rows → argpartition, on 1 thread and, for
  a thread-matched figure, on a pool of --threads threads. The bench runs it on the first --first-queries queries only
  (its two passes over all queries take ~100 s at 1M docs): the queries are i.i.d. draws, so the per-query time, and
  each ratio to it, estimates the same quantity.
- `exact`: vtlab's InvertedIndex with the compiled kernel (vtlab/index/taat.c), on --threads threads and on 1.
- `seismic`: vtlab.index.seismic.SeismicIndex (approximate), on --threads threads.

Memory: the index's own arrays where known, the RSS the built index holds (RSS after the build − before it), and how
far the build raised this process's peak RSS (0 when loading the data peaked higher). The top-10 doc indices go to
--top for the parent's recall and equality checks.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from vtlab.bench.common import peak_rss_mb, rss_mb, set_threads, timed, write_result
from vtlab.bench.synthetic import DOC_DRAWS, synthetic_collection

# vtlab.index (scipy and exact) and vtlab.index.seismic are imported after the RSS baseline of the build, and
# vtlab.core.assets only where the synthetic collection is loaded (vtlab.index loads it, with hydra/omegaconf through
# vtlab.core.errors): at module level they would move that import memory (~8 MB) out of the build's figures
# (rss_after_build_mb, build_peak_rise_mb), the scipy peer's included.

K = 10


def synthetic_path(n_docs: int, n_queries: int, seed: int = 0) -> Path:
    """The synthetic collection as two .npz files, generated once and cached (1M docs: ~30 s, ~1 GB)."""
    from vtlab.core.assets import cache_dir  # not at module level: see the note at the top

    d = cache_dir("bench", f"synthetic-v1-d{DOC_DRAWS}-{n_docs}-{n_queries}-{seed}")
    if not (d / "queries.npz").is_file():
        docs, queries = synthetic_collection(n_docs, n_queries, seed)
        sp.save_npz(d / "docs.npz", docs, compressed=False)
        sp.save_npz(d / "queries.npz", queries, compressed=False)  # written last: marks the pair complete
    return d


def load(args: argparse.Namespace) -> tuple[sp.csr_matrix, sp.csr_matrix, dict[str, Any]]:
    if args.collection == "testbed":
        vec = Path(args.vectors)
        docs = sp.load_npz(vec / "vtlab-splade-tiny-doc.npz").tocsr()
        queries = sp.load_npz(vec / "vtlab-splade-tiny-query.npz").tocsr()
        info = {"source": "SPLADE-tiny vectors of the testbed's four sets (their passages and questions together)"}
    else:
        d = synthetic_path(args.n_docs, args.n_queries)
        docs, queries = sp.load_npz(d / "docs.npz").tocsr(), sp.load_npz(d / "queries.npz").tocsr()
        info = {"source": "synthetic Zipf–Mandelbrot (vtlab/bench/synthetic.py)"}
    p_d = np.bincount(docs.indices, minlength=docs.shape[1]) / docs.shape[0]
    p_q = np.bincount(queries.indices, minlength=queries.shape[1]) / queries.shape[0]
    postings_per_query = float(
        np.bincount(docs.indices, minlength=docs.shape[1])[queries.indices].sum() / queries.shape[0]
    )
    info.update(
        n_docs=docs.shape[0],
        n_queries=queries.shape[0],
        doc_nnz=round(docs.nnz / docs.shape[0], 1),
        query_nnz=round(queries.nnz / queries.shape[0], 1),
        flops=round(float(p_q @ p_d), 3),
        postings_per_query=round(postings_per_query),
        doc_csr_mb=round((docs.data.nbytes + docs.indices.nbytes + docs.indptr.nbytes) / 2**20, 1),
    )
    return docs, queries, info


def timed_search(index: Any, queries: sp.csr_matrix, **kwargs: Any) -> tuple[dict[str, float], np.ndarray]:
    index.search(queries[: min(16, queries.shape[0])], K, **kwargs)  # warm-up (page in the index, thread pool)
    with timed() as t:
        _, idx = index.search(queries, K, **kwargs)
    n = queries.shape[0]
    return {
        "ms_per_query": round(1000 * t.wall_s / n, 4),
        "cpu_ms_per_query": round(1000 * t.cpu_s / n, 4),
        "wall_s": round(t.wall_s, 3),
    }, idx


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--collection", required=True, choices=["testbed", "synthetic"])
    ap.add_argument("--method", required=True, choices=["scipy", "exact", "seismic"])
    ap.add_argument("--vectors", default="outputs/bench/vectors")
    ap.add_argument("--n-docs", type=int, default=1_000_000)
    ap.add_argument("--n-queries", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--first-queries", type=int, default=0, help="search only the first N queries (0: all)")
    ap.add_argument("--top", default=None, help="directory for the top-10 doc indices (.npy)")
    ap.add_argument("--seismic-n-postings", type=int, default=None)
    ap.add_argument("--seismic-centroid-fraction", type=float, default=None)
    ap.add_argument("--seismic-summary-energy", type=float, default=None)
    ap.add_argument("--seismic-doc-cut", type=int, default=None)
    ap.add_argument("--seismic-query-cut", type=int, default=None)
    ap.add_argument("--seismic-heap-factor", type=float, default=None)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    set_threads(args.threads)
    docs, queries, info = load(args)
    if args.first_queries > 0:
        queries = queries[: args.first_queries]
    info["n_queries_searched"] = queries.shape[0]
    result: dict[str, Any] = {
        "collection": args.collection,
        "method": args.method,
        "threads": args.threads,
        "data": info,
    }
    rss0, peak0 = rss_mb(), peak_rss_mb()
    tops: dict[str, np.ndarray] = {}
    if args.method in ("scipy", "exact"):
        from vtlab.index import InvertedIndex

        with timed() as t:
            index = InvertedIndex(docs, backend="scipy" if args.method == "scipy" else "native")
        result["build_s"] = round(t.wall_s, 3)
        result["index_mb"] = round(index.memory_bytes() / 2**20, 1)
        result["build_peak_rise_mb"] = round(peak_rss_mb() - peak0, 1)
        result["rss_after_build_mb"] = round(rss_mb() - rss0, 1)
        extra = {"batch_size": 16} if args.method == "scipy" else {}
        # the peer figure: scipy on one thread; vtlab's figure: all --threads (and one, for the same footing)
        runs = {"1_thread": 1, f"{args.threads}_threads": args.threads}
        for name, n in runs.items():
            result[name], tops[name] = timed_search(index, queries, n_threads=n, **extra)
        result["ms_per_query"] = result["1_thread" if args.method == "scipy" else f"{args.threads}_threads"][
            "ms_per_query"
        ]
        top = tops[f"{args.threads}_threads"]
    else:
        from vtlab.index.seismic import SeismicIndex

        params = {
            k: v
            for k, v in {
                "n_postings": args.seismic_n_postings,
                "centroid_fraction": args.seismic_centroid_fraction,
                "summary_energy": args.seismic_summary_energy,
                "doc_cut": args.seismic_doc_cut,
                "query_cut": args.seismic_query_cut,
                "heap_factor": args.seismic_heap_factor,
            }.items()
            if v is not None
        }
        with timed() as t:
            index = SeismicIndex(docs, n_threads=args.threads, **params)
        result["build_s"] = round(t.wall_s, 3)
        result["build_cpu_s"] = round(t.cpu_s, 3)
        result["build_peak_rise_mb"] = round(peak_rss_mb() - peak0, 1)
        result["rss_after_build_mb"] = round(rss_mb() - rss0, 1)
        result["params"] = index.stats()
        result[f"{args.threads}_threads"], top = timed_search(index, queries)
        result["ms_per_query"] = result[f"{args.threads}_threads"]["ms_per_query"]
    if args.top:
        Path(args.top).mkdir(parents=True, exist_ok=True)
        np.save(Path(args.top) / f"{args.collection}-{args.method}.npy", top)
    result["peak_rss_mb"] = round(peak_rss_mb(), 1)
    write_result(args.out, result)


if __name__ == "__main__":
    main()
