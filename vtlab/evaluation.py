"""Retrieval evaluation of a sparse encoder: encode, index, retrieve, score with ir_measures, report sparsity.

Reported keys (all floats): each measure string as given (e.g. "nDCG@10"), "query_active_dims",
"doc_active_dims", "flops", and timings "encode_query_s", "encode_query_ms_per_query", "encode_doc_s", "index_build_s",
"search_ms_per_query", "total_s". With `budgets` (matched term budgets, see `Budget`), each measure and sparsity key
again per budget as `<key>@<budget>`, e.g. "nDCG@10@q16-d64". Per-query values go to per_query.json.

Which queries are measured: those with at least one positive grade in the qrels (`judged_queries`; metrics.json's
`n_judged_queries` counts them). ir_measures would score a query whose judgments are all 0 as 0 on every measure and
average it in; here such a query is left out of the means and of per_query.json (with a warning), and a collection
with no positive grade at all is refused before encoding: it can measure nothing.
"""
from __future__ import annotations

import inspect
import logging
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal, Mapping, Protocol, Sequence, TextIO

import ir_measures
import numpy as np
import scipy.sparse as sp
from rich.table import Table

from vtlab.atomic import atomic_write, write_json
from vtlab.data.collections import Collection, judged_queries
from vtlab.errors import DataError, VtlabError
from vtlab.index import INDEXES, index_factory
from vtlab.index.inverted import InvertedIndex, to_run

log = logging.getLogger(__name__)

DEFAULT_MEASURES: tuple[str, ...] = ("nDCG@10", "RR@10", "R@100")
TIMING_KEYS: tuple[str, ...] = ("encode_query_s", "encode_query_ms_per_query", "encode_doc_s", "index_build_s", "search_ms_per_query", "total_s")
SPARSITY_KEYS: tuple[str, ...] = ("query_active_dims", "doc_active_dims", "flops")


class SparseEncoder(Protocol):
    """What evaluation needs from a model. Only `encode` is called: query encoding may involve no network.

    An encoder may also have `fit_corpus(texts)`, called with the collection's documents before encoding, to compute
    corpus statistics it lacks (the inference-free query IDF when no training corpus gave one).
    """

    vocab_size: int

    def encode(
        self,
        texts: Sequence[str],
        side: Literal["query", "doc"],
        batch_size: int = 64,
        show_progress: bool = True,
    ) -> sp.csr_matrix: ...


# ---------------------------------------------------------------------------------------------------- metrics


def _parse_measures(measures: Sequence[str]) -> dict[Any, str]:
    """measure object -> the key it is reported under (the user's string when it names one measure)."""
    parsed: dict[Any, str] = {}
    for name in measures:
        try:
            objs = [ir_measures.parse_measure(name)]
        except Exception:  # ir_measures raises plain ValueError/NameError/SyntaxError on unknown syntax
            try:
                objs = list(ir_measures.parse_trec_measure(name))
            except Exception:
                objs = []
        if not objs:
            raise VtlabError(f"unknown retrieval measure {name!r} (ir_measures syntax, e.g. nDCG@10, RR@10, R@100)")
        for m in objs:
            parsed[m] = name if len(objs) == 1 else str(m)
    return parsed


def per_query_metrics(
    run: dict[str, dict[str, float]],
    qrels: dict[str, dict[str, int]],
    measures: Sequence[str] = DEFAULT_MEASURES,
) -> dict[str, dict[str, float]]:
    """{measure key: {query id: value}} for every query with a positive grade (`judged_queries`; the input of paired
    significance tests).

    Queries with a positive grade but no (or an empty) run entry score 0 for every measure: we fill that in ourselves
    rather than rely on the ir_measures provider, so the values do not depend on which provider answers.
    Run entries for queries without a positive grade are ignored.
    """
    parsed = _parse_measures(measures)
    judged = {q: {d: int(r) for d, r in qrels[q].items()} for q in judged_queries(qrels)}
    if not judged:
        raise DataError("no query has a positive relevance grade (the qrels are empty or all 0): nothing to measure")
    # empty rankings are dropped: they score 0 through the fill below, and some providers reject them
    run = {q: docs for q, docs in run.items() if q in judged and docs}
    values = {m: dict.fromkeys(judged, 0.0) for m in parsed}
    if run:
        for metric in ir_measures.iter_calc(list(parsed), judged, run):
            values[metric.measure][metric.query_id] = float(metric.value)
    return {parsed[m]: values[m] for m in parsed}


def _means(per_query: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    return {key: sum(values.values()) / len(values) for key, values in per_query.items()}


def compute_metrics(
    run: dict[str, dict[str, float]],
    qrels: dict[str, dict[str, int]],
    measures: Sequence[str] = DEFAULT_MEASURES,
) -> dict[str, float]:
    """Mean of each measure over every query with a positive grade (`per_query_metrics`, averaged: such a query with
    no run entry counts as 0, so the mean divides by the number of judged queries)."""
    return _means(per_query_metrics(run, qrels, measures))


def sparsity_stats(queries: sp.csr_matrix, docs: sp.csr_matrix) -> dict[str, float]:
    """Mean active (non-zero) dims per query and per doc, and FLOPS as in the SPLADE papers.

    flops = Σ_v p_q(v)·p_d(v), p(v) = fraction of queries (docs) with a non-zero weight on term v: the expected
    number of multiplications for one query-doc pair in an inverted index.
    """
    if queries.shape[1] != docs.shape[1]:
        raise ValueError(f"queries have {queries.shape[1]} dims, docs {docs.shape[1]}")
    vocab = queries.shape[1]

    def term_fraction(m: sp.csr_matrix) -> tuple[float, np.ndarray]:
        m = sp.csr_matrix(m)
        if not m.has_canonical_format:  # duplicate entries would be counted twice
            m = m.copy()
            m.sum_duplicates()
        nz = m.data != 0  # explicit zeros are not active dims
        terms = m.indices if nz.all() else m.indices[nz]
        n = max(m.shape[0], 1)
        return float(terms.size / n), np.bincount(terms, minlength=vocab) / n

    q_dims, p_q = term_fraction(queries)
    d_dims, p_d = term_fraction(docs)
    return {"query_active_dims": q_dims, "doc_active_dims": d_dims, "flops": float(p_q @ p_d)}


# ---------------------------------------------------------------------------------------------------- writing


_WHITESPACE = re.compile(r"\s")


def _bad_trec_field(value: str) -> bool:
    return not value or _WHITESPACE.search(value) is not None


def write_trec_run(path: str | Path, run: dict[str, dict[str, float]], tag: str = "vtlab") -> Path:
    """Atomic TREC run file: `qid Q0 docid rank score tag`, ranks from 1, score descending per query.

    Equal scores keep the run's order (stable sort), i.e. the index's lower-doc-index-first rule. Ids and the tag must
    be non-empty and free of whitespace (the format's field separator): DataError naming the first bad one otherwise,
    before anything is written.
    """
    for qid, docs in run.items():
        for what, value in (("query id", qid), *((f"document id (query {qid!r})", d) for d in docs)):
            if _bad_trec_field(str(value)):
                raise DataError(f"{path}: cannot write the TREC run: {what} {str(value)!r} is empty or contains "
                                "whitespace; TREC run lines are 'qid Q0 docid rank score tag' separated by "
                                "whitespace: use ids without spaces, tabs or newlines")
    if _bad_trec_field(tag):
        raise DataError(f"{path}: cannot write the TREC run: tag {tag!r} is empty or contains whitespace")

    def write(f: TextIO) -> None:
        for qid, docs in run.items():
            ranked = sorted(docs.items(), key=lambda kv: -kv[1])
            for rank, (doc_id, score) in enumerate(ranked, start=1):
                f.write(f"{qid} Q0 {doc_id} {rank} {float(score)!r} {tag}\n")  # repr: exact round trip

    return atomic_write(path, write)


def results_table(metrics: dict[str, float], title: str, baseline: dict[str, float] | None = None,
                  baseline_label: str = "baseline") -> Table:
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
        [("query active dims", "query_active_dims", "{:.1f}"), ("doc active dims", "doc_active_dims", "{:.1f}"),
         ("FLOPS", "flops", "{:.3f}")],
        [("encode queries", "encode_query_s", "{:.1f} s"), ("  per query", "encode_query_ms_per_query", "{:.2f} ms"),
         ("encode docs", "encode_doc_s", "{:.1f} s"),
         ("index build", "index_build_s", "{:.2f} s"), ("search", "search_ms_per_query", "{:.3f} ms/query"),
         ("total", "total_s", "{:.1f} s")],
    ]
    for rows in sections:
        present = [(label, key, fmt) for label, key, fmt in rows if key in metrics]
        if present and table.row_count:
            table.add_section()
        for label, key, fmt in present:
            row(label, key, fmt)
    return table


# ---------------------------------------------------------------------------------------------------- term budgets


@dataclass(frozen=True)
class Budget:
    """A matched term budget: each query keeps its `query` largest weights, each doc its `doc` largest (None: all).

    Pruning after encoding puts models of different sparsity on the same number of active terms, so a contrast can
    be read at equal cost as well as at each model's own sparsity.
    """

    query: int | None
    doc: int | None

    @property
    def label(self) -> str:
        return f"q{self.query if self.query is not None else 'all'}-d{self.doc if self.doc is not None else 'all'}"


BUDGET_KEY = re.compile(r"^(?P<key>.+)@(?P<budget>q(?:\d+|all)-d(?:\d+|all))$")


def budget_key(key: str, budget: Budget) -> str:
    """`nDCG@10` at budget q16-d64 -> `nDCG@10@q16-d64`."""
    return f"{key}@{budget.label}"


def split_budget_key(key: str) -> tuple[str, str | None]:
    """`nDCG@10@q16-d64` -> (`nDCG@10`, `q16-d64`); a key without a budget -> (key, None)."""
    match = BUDGET_KEY.match(key)
    return (match["key"], match["budget"]) if match else (key, None)


def parse_budgets(budgets: Sequence[Budget | Mapping[str, Any]] | None, key: str = "eval.budgets") -> list[Budget]:
    """Budgets from config entries `{query: Kq, doc: Kd}` (a missing or null side is not pruned)."""
    parsed: list[Budget] = []
    for i, entry in enumerate(budgets or ()):
        if isinstance(entry, Budget):
            parsed.append(entry)
            continue
        where = f"{key}[{i}]"
        if not isinstance(entry, Mapping) or set(entry) - {"query", "doc"}:
            raise VtlabError(f"{where}: expected {{query: K, doc: K}} (positive ints or null), got {entry!r}")
        sides = {side: entry.get(side) for side in ("query", "doc")}
        for side, k in sides.items():
            if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
                raise VtlabError(f"{where}.{side}: expected a positive int or null, got {k!r}")
        parsed.append(Budget(**sides))
    labels = [b.label for b in parsed]
    if len(set(labels)) != len(labels):
        raise VtlabError(f"{key}: a budget is listed twice ({', '.join(labels)})")
    return parsed


def prune_top_k(x: sp.csr_matrix, k: int | None) -> sp.csr_matrix:
    """Each row keeps its k largest weights (ties: the lower term id); k=None keeps all. Explicit zeros go first."""
    x = sp.csr_matrix(x, copy=True)
    x.sum_duplicates()
    x.eliminate_zeros()
    counts = np.diff(x.indptr)
    if k is None or counts.size == 0 or counts.max() <= k:
        return x
    rows = np.repeat(np.arange(x.shape[0]), counts)
    order = np.lexsort((x.indices, -x.data, rows))  # by row, then weight descending, then term id
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size) - x.indptr[rows[order]]  # position within its row
    keep = rank < k
    return sp.csr_matrix((x.data[keep], (rows[keep], x.indices[keep])), shape=x.shape, dtype=x.dtype)


# ---------------------------------------------------------------------------------------------------- evaluate


def _check_collection(collection: Collection, trec_ids: bool) -> list[str]:
    """The judged query ids of a collection evaluate() can measure, checked before any encoding (a collection from
    any loader; load_beir refuses the same problems with file:line). `trec_ids`: the ids go to run.trec, so each
    must be non-empty and free of whitespace."""
    name = collection.name
    if not collection.queries or not collection.corpus:
        raise DataError(f"collection {name!r} has {len(collection.queries)} queries and {len(collection.corpus)} docs")
    judged = judged_queries(collection.qrels)
    if not judged:
        raise DataError(f"collection {name!r}: no query has a positive relevance grade in its qrels "
                        f"({len(collection.qrels)} queries in them, every grade 0 or less): nothing can be measured")
    if trec_ids:
        for what, ids in (("query id", collection.queries), ("document id", collection.corpus)):
            bad = next((i for i in ids if _bad_trec_field(str(i))), None)
            if bad is not None:
                raise DataError(f"collection {name!r}: {what} {bad!r} is empty or contains whitespace: expected ids "
                                "without spaces, tabs or newlines (run.trec separates its fields by whitespace)")
    if len(judged) < len(collection.qrels):
        log.warning("%s: %d of the %d queries in the qrels have no positive grade; they are left out of the measures",
                    name, len(collection.qrels) - len(judged), len(collection.qrels))
    return judged


def _check_encoded(x: Any, n: int, vocab_size: int, side: str) -> sp.csr_matrix:
    if not sp.issparse(x):
        raise TypeError(f"encoder.encode(side={side!r}) returned {type(x).__name__}, expected scipy.sparse.csr_matrix")
    x = sp.csr_matrix(x, dtype=np.float32)
    if x.shape != (n, vocab_size):
        raise ValueError(f"encoder.encode(side={side!r}) returned shape {x.shape}, expected {(n, vocab_size)}")
    return x


def evaluate(
    encoder: SparseEncoder,
    collection: Collection,
    out_dir: str | Path | None = None,
    measures: Sequence[str] = DEFAULT_MEASURES,
    top_k: int = 100,
    batch_size: int = 64,
    index: Callable[[sp.csr_matrix, Sequence[str]], Any] | None = None,
    show_progress: bool = True,
    budgets: Sequence[Budget | Mapping[str, Any]] = (),
) -> dict[str, float]:
    """Encode queries and corpus, retrieve top_k per query, and score the run against the qrels.

    index: optional factory (docs, doc_ids) -> object with `.search(queries, k) -> (scores, indices)`;
    default InvertedIndex (exact; `vtlab.index.index_factory("seismic", {...})` is approximate).
    budgets: matched term budgets ({query: Kq, doc: Kd} or Budget): the encoded queries/docs are pruned to their top-K
    weights and searched again (no re-encoding); measures and sparsity come back as `<key>@q<Kq>-d<Kd>`.
    With out_dir, writes out_dir/run.trec (unpruned), out_dir/per_query.json ({measure key: {query id: value}},
    budgets included) and out_dir/metrics.json. Before any encoding, DataError for a collection with no positive
    grade, or (with out_dir) with an id run.trec cannot hold.
    """
    _parse_measures(measures)  # fail on a bad measure name before spending minutes on encoding
    budgets = parse_budgets(budgets)
    judged = _check_collection(collection, trec_ids=out_dir is not None)  # likewise bad data
    query_ids, doc_ids = list(collection.queries), list(collection.corpus)
    t_start = time.perf_counter()
    fit_corpus = getattr(encoder, "fit_corpus", None)
    if fit_corpus is not None:  # encoders with corpus statistics (an inference-free IDF, BM25's vocabulary)
        fit_corpus([collection.corpus[i] for i in doc_ids])
    vocab = int(encoder.vocab_size)  # after fit_corpus: BM25's vocabulary is the corpus's

    t = time.perf_counter()
    q = encoder.encode([collection.queries[i] for i in query_ids], side="query", batch_size=batch_size,
                       show_progress=show_progress)
    encode_query_s = time.perf_counter() - t
    q = _check_encoded(q, len(query_ids), vocab, "query")

    t = time.perf_counter()
    d = encoder.encode([collection.corpus[i] for i in doc_ids], side="doc", batch_size=batch_size,
                       show_progress=show_progress)
    encode_doc_s = time.perf_counter() - t
    d = _check_encoded(d, len(doc_ids), vocab, "doc")

    t = time.perf_counter()
    idx = (index or InvertedIndex)(d, doc_ids)
    index_build_s = time.perf_counter() - t

    t = time.perf_counter()
    scores, indices = idx.search(q, k=top_k)
    search_s = time.perf_counter() - t

    run = to_run(np.asarray(scores), np.asarray(indices), query_ids, doc_ids)
    per_query = per_query_metrics(run, collection.qrels, measures)
    metrics: dict[str, float] = _means(per_query)
    metrics.update(sparsity_stats(q, d))
    for budget in budgets:
        q_b, d_b = prune_top_k(q, budget.query), prune_top_k(d, budget.doc)
        b_scores, b_indices = (index or InvertedIndex)(d_b, doc_ids).search(q_b, k=top_k)
        b_run = to_run(np.asarray(b_scores), np.asarray(b_indices), query_ids, doc_ids)
        b_per_query = per_query_metrics(b_run, collection.qrels, measures)
        per_query.update({budget_key(k, budget): v for k, v in b_per_query.items()})
        metrics.update({budget_key(k, budget): v for k, v in _means(b_per_query).items()})
        metrics.update({budget_key(k, budget): v for k, v in sparsity_stats(q_b, d_b).items()})
    metrics.update(
        encode_query_s=encode_query_s,
        encode_query_ms_per_query=1000.0 * encode_query_s / len(query_ids),
        encode_doc_s=encode_doc_s,
        index_build_s=index_build_s,
        search_ms_per_query=1000.0 * search_s / len(query_ids),
        total_s=time.perf_counter() - t_start,
    )

    if out_dir is not None:
        out = Path(out_dir)
        write_trec_run(out / "run.trec", run)
        write_json(out / "per_query.json", per_query)
        report = {
            "collection": {
                "name": collection.name,
                "n_docs": len(doc_ids),
                "n_queries": len(query_ids),
                "n_judged_queries": len(judged),  # with a positive grade: the queries the means are over
            },
            "measures": list(measures),
            "top_k": top_k,
            "budgets": [{"query": b.query, "doc": b.doc} for b in budgets],
            "metrics": metrics,
            "index": {"type": type(idx).__name__, "backend": getattr(idx, "backend", None),
                      **(idx.stats() if hasattr(idx, "stats") else {})},
        }
        write_json(out / "metrics.json", report)  # last: its presence means run.trec and per_query.json are complete
    return metrics


def _accepts(fn: Callable[..., Any], param: str) -> bool:
    """Whether fn takes `param` as a keyword that is not already bound (functools.partial binds keywords)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    bound = getattr(fn, "keywords", None) or {}
    if param in bound:
        return False
    return param in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


class RetrievalEvaluation:
    """Evaluation config as an object Hydra can build (conf/eval/*.yaml); call it with an encoder.

    collection: a Collection, or a loader (e.g. a Hydra `_partial_`) called on first use; the result is kept.
    name, path: short top-level config keys (`eval.path=DIR`, `eval.name=scifact`). When set, each is passed to
        the loader as a keyword if the loader has a parameter of that name (load_beir's path, load_hf_beir's
        name); otherwise it is only a label. A config interpolation (`path: ${..path}`) would do the same, but
        OmegaConf.missing_keys cannot resolve interpolations to `???`, so the configs pass the value here instead.
        name also labels logs and tables; it defaults to the collection's name once loaded.
    budgets: matched term budgets `[{query: Kq, doc: Kd}, ...]` evaluated after the full run (see `evaluate`).
    """

    def __init__(
        self,
        collection: Collection | Callable[[], Collection],
        measures: Sequence[str] = DEFAULT_MEASURES,
        top_k: int = 100,
        batch_size: int = 64,
        name: str | None = None,
        path: str | None = None,
        index: str = "exact",
        index_options: dict[str, Any] | None = None,
        budgets: Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        if not isinstance(collection, Collection) and not callable(collection):
            raise TypeError(f"collection must be a Collection or a loader, got {type(collection).__name__}")
        self.measures = [str(m) for m in measures]  # Hydra passes a ListConfig
        _parse_measures(self.measures)  # config errors surface when the config is built, not after training
        if top_k < 1:
            raise VtlabError(f"eval.top_k must be >= 1, got {top_k}")
        self.top_k = int(top_k)
        self.batch_size = int(batch_size)
        self.path = path
        if index not in INDEXES:
            raise VtlabError(f"eval.index={index!r}: choose one of {', '.join(INDEXES)}")
        self.index = str(index)
        self.index_options = dict(index_options or {})  # Hydra passes a DictConfig
        self.budgets = parse_budgets(budgets)  # config errors surface when the config is built, not after training
        self._source = collection
        self._collection: Collection | None = collection if isinstance(collection, Collection) else None
        self._name = name

    @property
    def collection(self) -> Collection:
        if self._collection is None:
            loader = self._source
            kwargs = {k: v for k, v in (("path", self.path), ("name", self._name)) if v is not None
                      and _accepts(loader, k)}
            loaded = loader(**kwargs)  # type: ignore[operator]
            if not isinstance(loaded, Collection):
                raise TypeError(f"collection loader returned {type(loaded).__name__}, expected Collection")
            self._collection = loaded
        return self._collection

    @property
    def name(self) -> str:
        """What results are filed under (eval/<name>/): `eval.name`, else the collection's own name (a BEIR
        directory's name), which loads the collection."""
        return self._name if self._name is not None else self.collection.name

    def __call__(self, encoder: SparseEncoder, out_dir: str | Path | None = None, **kwargs: Any) -> dict[str, float]:
        """kwargs go to `evaluate` (show_progress=..., or index=<factory> to override eval.index)."""
        kwargs.setdefault("index", index_factory(self.index, self.index_options))
        kwargs.setdefault("budgets", self.budgets)
        return evaluate(encoder, self.collection, out_dir=out_dir, measures=self.measures, top_k=self.top_k,
                        batch_size=self.batch_size, **kwargs)

    def __repr__(self) -> str:
        name = self._name or (self._collection.name if self._collection is not None else None)  # never loads
        return (f"RetrievalEvaluation(name={name!r}, measures={self.measures}, top_k={self.top_k}, "
                f"batch_size={self.batch_size}, index={self.index!r}"
                + (f", budgets={[b.label for b in self.budgets]})" if self.budgets else ")"))
