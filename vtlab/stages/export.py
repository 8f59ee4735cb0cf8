"""Stage `export`: a model as a sentence-transformers SparseEncoder directory and/or its documents' (and queries')
sparse vectors for Anserini, OpenSearch, Elasticsearch and Qdrant (conf/stage/export.yaml lists the settings).

With `run_dir=R`, what describes the run comes from R's recorded config (vtlab/export/run_config.py): its encoder
settings and its eval collection, with this command line's overrides under `model.encoder` / `eval` on top.
The library code is in vtlab/export/: outputs.py (what is written where, checked first), run_encoder.py (a run's
trained encoder), corpus.py (what is encoded), vectors.py (the writers), model_extras.py (ONNX graphs, the model card),
hub.py (the upload)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from rich.console import Console

from vtlab.core.logs import print_line
from vtlab.core.waiting import Waiting
from vtlab.export.corpus import IDF_FIX, QUERIES_FIX, corpus_docs, corpus_path, encoding_line
from vtlab.export.hub import push_to_hub
from vtlab.export.model_card import portable_values
from vtlab.export.model_extras import model_extras, this_run_overrides
from vtlab.export.outputs import export_outputs
from vtlab.export.run_config import EvalSource, RunConfig
from vtlab.export.run_encoder import encoder_from_run
from vtlab.export.sentence_transformers import export_sentence_transformers
from vtlab.export.vectors import write_vectors
from vtlab.runs.export_source import evaluated_config, model_dir_of
from vtlab.runs.reads import reads
from vtlab.stages.build import ENCODER_READS, build_encoder

__all__ = ["run"]


def load_encoder(cfg: DictConfig, run: RunConfig) -> tuple[Any, dict[str, Any]]:
    """The encoder to export: run_dir's trained one; the model an evaluate-only run_dir evaluated, built again from its
    record (vtlab.runs.export_source.evaluated_config); else the one this command's config builds."""
    run_dir = Path(str(cfg.run_dir)) if cfg.get("run_dir") else None
    if run_dir is not None and (not run_dir.is_dir() or model_dir_of(run_dir) is not None):
        return encoder_from_run(run_dir, cfg, run)
    built = cfg if run_dir is None else evaluated_config(run_dir, this_run_overrides(cfg) or ())
    return build_encoder(built), {
        **({"run_dir": str(run_dir.resolve())} if run_dir is not None else {}),
        "backbone": OmegaConf.to_container(built.backbone, resolve=True),
        "vocab": str(built.vocab.get("name", "")),
        "init": str(built.init.get("name", "")),
    }


@reads("run_dir", "export", "eval", *ENCODER_READS)
def run(cfg: DictConfig, state: dict[str, Any]) -> dict[str, Any]:
    ex = cfg.export
    base = Path(str(cfg.run_dir)) if cfg.get("run_dir") else Path(cfg.paths.run_dir)
    out, repo, formats, query_formats = export_outputs(cfg, base)  # config and target errors before any model loads
    trained = state.get("encoder") is not None or bool(cfg.get("run_dir") and model_dir_of(base) is not None)
    run_cfg = RunConfig(cfg, Path(str(cfg.run_dir)) if cfg.get("run_dir") else None, this_run_overrides(cfg))
    source = EvalSource(run_cfg, member=ex.vectors.get("collection"))
    corpus = corpus_path(cfg) if formats else None
    if formats and corpus is None:
        source.evaluation("export.vectors.corpus=eval", IDF_FIX)
    if query_formats:
        source.evaluation("export.vectors.queries=true: the queries", QUERIES_FIX)
    if state.get("encoder") is not None:  # a model trained earlier in this pipeline
        encoder, src = state["encoder"], {"run_dir": str(Path(cfg.paths.run_dir).resolve())}
    else:
        encoder, src = load_encoder(cfg, run_cfg)
    console = Console()
    result: dict[str, Any] = {**state, "encoder": encoder}
    line = encoding_line(corpus, source, bool(query_formats)) if formats else None
    if ex.sentence_transformers:
        if getattr(encoder, "needs_idf", False):  # as stage=evaluate does for an untrained inference-free model
            encoder.fit_corpus(list(source.collection("the inference-free query IDF", IDF_FIX).corpus.values()))
        vectors_of = (corpus.name if corpus is not None else source.name) if formats else None
        extras = model_extras(
            cfg,
            encoder,
            run_cfg,
            base,
            out,
            trained,
            {type(f).__name__: f.path for f in formats + query_formats},
            vectors_of,
        )
        with Waiting(f"export: writing {out} (SparseEncoder{', ONNX' if ex.onnx or ex.get('onnx_int8') else ''})"):
            result["export_dir"] = export_sentence_transformers(
                encoder, out, overwrite=bool(ex.overwrite), source=portable_values(src, out, base), extras=extras
            )
        print_line(console, f"sentence-transformers: {out.resolve()}  (SparseEncoder({str(out)!r}))")
    if formats:
        print_line(console, line)
        n = write_vectors(
            encoder,
            corpus_docs(corpus, source),
            formats,
            chunk_size=int(ex.vectors.chunk_size),
            batch_size=int(ex.vectors.batch_size),
            index=ex.vectors.get("index"),
        )
        result["vector_files"] = [f.path for f in formats]
        for f in formats:
            print_line(console, f"vectors ({type(f).__name__}, {n} documents): {f.path.resolve()}")
    if query_formats:
        queries = source.collection("export.vectors.queries=true: the queries", QUERIES_FIX).queries.items()
        n = write_vectors(
            encoder,
            queries,
            query_formats,
            chunk_size=int(ex.vectors.chunk_size),
            batch_size=int(ex.vectors.batch_size),
            side="query",
        )
        result["query_vector_files"] = [f.path for f in query_formats]
        for f in query_formats:
            print_line(console, f"query vectors ({type(f).__name__}, {n} queries): {f.path.resolve()}")
    if repo is not None:
        url = push_to_hub(out.absolute(), repo, private=bool(ex.get("private", False)))
        print_line(console, f"pushed to the Hub: {url}")
        result["hub_url"] = url
    return result
