"""Retrieval evaluation of a sparse encoder: encode, index, retrieve, score with ir_measures, report sparsity.

Reported keys (all floats): each measure string as given (e.g. "nDCG@10"), "query_active_dims",
"doc_active_dims", "flops", and timings "choose_precision_s" (precision=auto's probe, ~0 once cached),
"encode_query_s", "encode_query_ms_per_query", "encode_doc_s", "index_build_s",
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
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np
import scipy.sparse as sp

from vtlab.core.errors import VtlabError
from vtlab.core.progress import progress
from vtlab.core.waiting import Waiting
from vtlab.data.collections import Collection, check_collection
from vtlab.evaluation.budgets import Budget, parse_budgets, search_budgets
from vtlab.evaluation.metrics import DEFAULT_MEASURES, _means, _parse_measures, per_query_metrics, sparsity_stats
from vtlab.evaluation.outputs import write_outputs
from vtlab.evaluation.vector_check import model_label, warn_if_useless
from vtlab.index import index_factory, index_names
from vtlab.index.inverted import InvertedIndex, to_run

log = logging.getLogger("vtlab.evaluation")  # the name it had as one module: `logger=vtlab.evaluation` filters


class SparseEncoder(Protocol):
    """What evaluation needs from a model. Only `encode` is called: query encoding may involve no network.

    An encoder may also have `fit_corpus(texts)`, called with the collection's documents before encoding, to compute
    corpus statistics it lacks (the inference-free query IDF when no training corpus gave one), and its `encode` may
    take `first_batch`, a callable it hands the first batch's vectors before encoding the others (SpladeEncoder): the
    warning about dense or empty vectors (vtlab.evaluation.vector_check) then comes before the long phase, not after.
    """

    vocab_size: int

    def encode(
        self, texts: Sequence[str], side: Literal["query", "doc"], batch_size: int = 64, show_progress: bool = True
    ) -> sp.csr_matrix: ...


# ---------------------------------------------------------------------------------------------------- evaluate


def _check_encoded(x: Any, n: int, vocab_size: int, side: str) -> sp.csr_matrix:
    if not sp.issparse(x):
        raise TypeError(f"encoder.encode(side={side!r}) returned {type(x).__name__}, expected scipy.sparse.csr_matrix")
    x = sp.csr_matrix(x, dtype=np.float32)
    if x.shape != (n, vocab_size):
        raise ValueError(f"encoder.encode(side={side!r}) returned shape {x.shape}, expected {(n, vocab_size)}")
    return x


def _encode(
    encoder: SparseEncoder,
    texts: list[str],
    side: Literal["query", "doc"],
    vocab: int,
    batch_size: int,
    show_progress: bool,
    check: Callable[[sp.csr_matrix], Any] | None = None,
) -> tuple[sp.csr_matrix, float]:
    """(checked float32 csr matrix, seconds the encoder took). `check` sees the first batch's vectors: handed to an
    encoder whose encode takes `first_batch` (SpladeEncoder: before the other batches), else the first rows after."""
    tap = {"first_batch": check} if check is not None and _accepts(encoder.encode, "first_batch") else {}
    t = time.perf_counter()
    x = encoder.encode(texts, side=side, batch_size=batch_size, show_progress=show_progress, **tap)
    seconds = time.perf_counter() - t
    x = _check_encoded(x, len(texts), vocab, side)
    if check is not None and not tap:
        check(x[:batch_size])
    return x, seconds


def _retrieve(
    build_index: Callable[..., Any],
    q: sp.csr_matrix,
    d: sp.csr_matrix,
    query_ids: list[str],
    doc_ids: list[str],
    top_k: int,
    show_progress: bool = True,
) -> tuple[Any, dict[str, dict[str, float]], float, float]:
    """(index, run {query id: {doc id: score}}, index build seconds, search seconds). Each phase shows its progress
    (vtlab.core.progress): the index's build its time (it counts nothing while it runs), the search its queries."""
    t = time.perf_counter()
    with Waiting(f"indexing {len(doc_ids):,} passages", show_progress):
        idx = build_index(d, doc_ids)
    index_build_s = time.perf_counter() - t
    t = time.perf_counter()
    with progress(len(query_ids), "queries", "searching", show_progress) as bar:
        tap = {"progress": bar.update} if _accepts(idx.search, "progress") else {}
        scores, indices = idx.search(q, k=top_k, **tap)
        if not tap:
            bar.update(len(query_ids))
    search_s = time.perf_counter() - t
    return idx, to_run(np.asarray(scores), np.asarray(indices), query_ids, doc_ids), index_build_s, search_s


def _choose_precision(encoder: SparseEncoder) -> float:
    """Seconds the encoder spends deciding its precision (precision=auto's timed probe, once per model and CPU, then
    cached): done before the timed encoding, so that it is never booked as encoding queries."""
    resolve = getattr(encoder, "resolved_precision", None)
    params = getattr(encoder, "parameters", None)
    if resolve is None or params is None:
        return 0.0
    t = time.perf_counter()
    resolve(next(params()).device)
    return time.perf_counter() - t


def _timings(
    precision_s: float,
    encode_query_s: float,
    encode_doc_s: float,
    index_build_s: float,
    search_s: float,
    n_queries: int,
    t_start: float,
) -> dict[str, float]:
    """The TIMING_KEYS; total_s runs from t_start (before fit_corpus) to now."""
    return {
        "choose_precision_s": precision_s,
        "encode_query_s": encode_query_s,
        "encode_query_ms_per_query": 1000.0 * encode_query_s / n_queries,
        "encode_doc_s": encode_doc_s,
        "index_build_s": index_build_s,
        "search_ms_per_query": 1000.0 * search_s / n_queries,
        "total_s": time.perf_counter() - t_start,
    }


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
    judged = check_collection(collection, trec_ids=out_dir is not None)  # likewise bad data
    build_index = index or InvertedIndex
    query_ids, doc_ids = list(collection.queries), list(collection.corpus)
    t_start = time.perf_counter()
    fit_corpus = getattr(encoder, "fit_corpus", None)
    if fit_corpus is not None:  # encoders with corpus statistics (an inference-free IDF, BM25's vocabulary)
        fit_corpus([collection.corpus[i] for i in doc_ids])
    vocab = int(encoder.vocab_size)  # after fit_corpus: BM25's vocabulary is the corpus's
    precision_s = _choose_precision(encoder)
    q, encode_query_s = _encode(
        encoder, [collection.queries[i] for i in query_ids], "query", vocab, batch_size, show_progress
    )
    label = f"{model_label(encoder)} on {collection.name}"
    d, encode_doc_s = _encode(
        encoder,
        [collection.corpus[i] for i in doc_ids],
        "doc",
        vocab,
        batch_size,
        show_progress,
        lambda sample: warn_if_useless(sample, len(doc_ids), label),
    )
    idx, run, index_build_s, search_s = _retrieve(build_index, q, d, query_ids, doc_ids, top_k, show_progress)

    per_query = per_query_metrics(run, collection.qrels, measures)
    metrics: dict[str, float] = _means(per_query)
    metrics.update(sparsity_stats(q, d))
    b_per_query, b_metrics = search_budgets(
        q, d, budgets, build_index, query_ids, doc_ids, collection.qrels, measures, top_k
    )
    per_query.update(b_per_query)
    metrics.update(b_metrics)
    metrics.update(
        _timings(precision_s, encode_query_s, encode_doc_s, index_build_s, search_s, len(query_ids), t_start)
    )

    if out_dir is not None:
        counts = {
            "name": collection.name,
            "n_docs": len(doc_ids),
            "n_queries": len(query_ids),
            "n_judged_queries": len(judged),
        }  # with a positive grade: the queries the means are over
        write_outputs(out_dir, run, per_query, metrics, counts, measures, top_k, budgets, idx)
    return metrics


def _accepts(fn: Callable[..., Any], param: str) -> bool:
    """Whether fn takes `param` as a keyword that is not already bound (functools.partial binds keywords).

    Why the loader's signature is read rather than a keyword list in the config: `eval.path` / `eval.name` are the
    short top-level keys users set (`eval=beir eval.path=DIR`, `eval=hf-beir eval.name=scifact`), and whether the
    loader takes them is a fact of the loader the conf node names (load_beir takes path, load_hf_beir name, boolq's
    and the OLMo loaders neither). A second list in every eval node would restate that signature and could drift
    from it (a listed keyword the loader lacks is a TypeError after training); an interpolation into the loader
    node is what OmegaConf.missing_keys cannot see (RetrievalEvaluation's docstring). The callable inspected is
    the conf's own `_partial_` loader (allow-listed when read from a run directory), never user code."""
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
    mteb_task, languages: the MTEB task this collection is (e.g. SciFact; None: none) and its languages, for the copy
        of the scores in MTEB's results format (vtlab.evaluation.mteb_results).
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
        mteb_task: str | None = None,
        languages: Sequence[str] = ("eng-Latn",),
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
        if index not in index_names():
            raise VtlabError(f"eval.index={index!r}: choose one of {', '.join(index_names())}")
        self.index = str(index)
        self.index_options = dict(index_options or {})  # Hydra passes a DictConfig
        self.budgets = parse_budgets(budgets)  # config errors surface when the config is built, not after training
        self._source = collection
        self._collection: Collection | None = collection if isinstance(collection, Collection) else None
        self._name = name
        self.mteb_task = None if mteb_task is None else str(mteb_task)
        self.languages = [str(x) for x in languages]

    @property
    def split(self) -> str | None:
        """The split its loader reads (a `_partial_` loader's `split` keyword); None where it names none."""
        return (getattr(self._source, "keywords", None) or {}).get("split")

    @property
    def collection(self) -> Collection:
        if self._collection is None:
            loader = self._source
            kwargs = {
                k: v for k, v in (("path", self.path), ("name", self._name)) if v is not None and _accepts(loader, k)
            }
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
        return evaluate(
            encoder,
            self.collection,
            out_dir=out_dir,
            measures=self.measures,
            top_k=self.top_k,
            batch_size=self.batch_size,
            **kwargs,
        )

    def __repr__(self) -> str:
        name = self._name or (self._collection.name if self._collection is not None else None)  # never loads
        return (
            f"RetrievalEvaluation(name={name!r}, measures={self.measures}, top_k={self.top_k}, "
            f"batch_size={self.batch_size}, index={self.index!r}"
            + (f", budgets={[b.label for b in self.budgets]})" if self.budgets else ")")
        )
