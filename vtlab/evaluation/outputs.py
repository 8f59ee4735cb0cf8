"""What an evaluation writes and shows: run.trec, per_query.json, metrics.json (last), and the results table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from rich.table import Table

from vtlab.core.atomic import atomic_write, write_json
from vtlab.core.errors import DataError
from vtlab.data.collections import bad_trec_field
from vtlab.evaluation.budgets import Budget
from vtlab.evaluation.metrics import SPARSITY_KEYS

TIMING_KEYS: tuple[str, ...] = (
    "choose_precision_s",
    "encode_query_s",
    "encode_query_ms_per_query",
    "encode_doc_s",
    "index_build_s",
    "search_ms_per_query",
    "total_s",
)


def write_trec_run(path: str | Path, run: dict[str, dict[str, float]], tag: str = "vtlab") -> Path:
    """Atomic TREC run file: `qid Q0 docid rank score tag`, ranks from 1, score descending per query.

    Equal scores keep the run's order (stable sort), i.e. the index's lower-doc-index-first rule. Ids and the tag must
    be non-empty and free of whitespace (the format's field separator): DataError naming the first bad one otherwise,
    before anything is written.
    """
    for qid, docs in run.items():
        for what, value in (("query id", qid), *((f"document id (query {qid!r})", d) for d in docs)):
            if bad_trec_field(str(value)):
                raise DataError(
                    f"{path}: cannot write the TREC run: {what} {str(value)!r} is empty or contains "
                    "whitespace; TREC run lines are 'qid Q0 docid rank score tag' separated by "
                    "whitespace: use ids without spaces, tabs or newlines"
                )
    if bad_trec_field(tag):
        raise DataError(f"{path}: cannot write the TREC run: tag {tag!r} is empty or contains whitespace")

    def write(f: TextIO) -> None:
        for qid, docs in run.items():
            ranked = sorted(docs.items(), key=lambda kv: -kv[1])
            for rank, (doc_id, score) in enumerate(ranked, start=1):
                f.write(f"{qid} Q0 {doc_id} {rank} {float(score)!r} {tag}\n")  # repr: exact round trip

    return atomic_write(path, write)


def results_table(
    metrics: dict[str, float], title: str, baseline: dict[str, float] | None = None, baseline_label: str = "baseline"
) -> Table:
    """One screen: retrieval measures, then sparsity (active dims, FLOPS), then timings; optionally a baseline column
    (e.g. the untransferred, untrained backbone on the same collection)."""
    table = Table(title=title)
    table.add_column("metric")
    table.add_column("value", justify="right")
    if baseline is not None:
        table.add_column(baseline_label, justify="right")

    def row(label: str, key: str, fmt: str) -> None:
        cells = [fmt.format(metrics[key])]
        if baseline is not None:
            cells.append(fmt.format(baseline[key]) if key in baseline else "")
        table.add_row(label, *cells)

    measures = [k for k in metrics if k not in SPARSITY_KEYS and k not in TIMING_KEYS]
    for key in measures:
        row(key, key, "{:.4f}")
    sections = [
        [
            ("query active dims", "query_active_dims", "{:.1f}"),
            ("doc active dims", "doc_active_dims", "{:.1f}"),
            ("FLOPS", "flops", "{:.3f}"),
        ],
        [
            ("choosing precision", "choose_precision_s", "{:.1f} s"),
            ("encode queries", "encode_query_s", "{:.1f} s"),
            ("  per query", "encode_query_ms_per_query", "{:.2f} ms"),
            ("encode docs", "encode_doc_s", "{:.1f} s"),
            ("index build", "index_build_s", "{:.2f} s"),
            ("search", "search_ms_per_query", "{:.3f} ms/query"),
            ("total", "total_s", "{:.1f} s"),
        ],
    ]
    for rows in sections:
        present = [(label, key, fmt) for label, key, fmt in rows if key in metrics]
        if present and table.row_count:
            table.add_section()
        for label, key, fmt in present:
            row(label, key, fmt)
    return table


def write_outputs(
    out_dir: str | Path,
    run: dict[str, dict[str, float]],
    per_query: Mapping[str, Any],
    metrics: dict[str, float],
    collection: dict[str, Any],
    measures: Sequence[str],
    top_k: int,
    budgets: Sequence[Budget],
    index: Any,
) -> None:
    """out_dir/run.trec (unpruned), out_dir/per_query.json, then out_dir/metrics.json: last, so its presence means
    the other two are complete. `collection`: its name and counts (n_docs, n_queries, n_judged_queries)."""
    out = Path(out_dir)
    write_trec_run(out / "run.trec", run)
    write_json(out / "per_query.json", per_query)
    report = {
        "collection": collection,
        "measures": list(measures),
        "top_k": top_k,
        "budgets": [{"query": b.query, "doc": b.doc} for b in budgets],
        "metrics": metrics,
        "index": {
            "type": type(index).__name__,
            "backend": getattr(index, "backend", None),
            **(index.stats() if hasattr(index, "stats") else {}),
        },
    }
    write_json(out / "metrics.json", report)
