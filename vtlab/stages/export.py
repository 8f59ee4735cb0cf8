"""Stage `export`: a model as a sentence-transformers SparseEncoder directory and/or its documents' (and queries')
sparse vectors for Anserini, OpenSearch, Elasticsearch and Qdrant (conf/stage/export.yaml lists the settings).

With `run_dir=R`, what describes the run comes from R's recorded config (vtlab/export/run_config.py): its encoder
settings and its eval collection, with this command line's overrides under `model.encoder` / `eval` on top."""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from rich.console import Console

from vtlab.backbones import Backbone
from vtlab.data.collections import iter_corpus_jsonl
from vtlab.errors import VtlabError
from vtlab.export.hub import check_push, push_to_hub
from vtlab.export.model_card import card_info, model_card, portable_values, run_metrics, run_overrides
from vtlab.export.onnx import export_onnx
from vtlab.export.run_config import EvalSource, RunConfig
from vtlab.export.safe_config import ALLOWED_TARGETS, check_targets
from vtlab.export.sentence_transformers import check_target, describe, export_sentence_transformers
from vtlab.export.vectors import FORMATS, VectorFormat, write_vectors
from vtlab.stages.build import build_encoder

__all__ = ["ALLOWED_TARGETS", "check_targets", "encoder_from_run", "model_dir_of", "run"]

log = logging.getLogger("vtlab")

IDF_FIX = "export.vectors.corpus=<corpus.jsonl> (or model.encoder.idf_path)"
QUERIES_FIX = "eval=<one collection> or export.vectors.queries=false"


def model_dir_of(run_dir: Path) -> Path:
    """The Hugging Face directory of a run: <run_dir>/model (what fine-tuning writes), or run_dir itself."""
    for candidate in (run_dir / "model", run_dir):
        if (candidate / "config.json").is_file():
            return candidate
    raise VtlabError(f"run_dir={run_dir}: no model/config.json (the model a training run writes) and no "
                     "config.json in the directory itself")


def encoder_from_run(run_dir: Path, cfg: DictConfig, run: RunConfig | None = None) -> tuple[Any, dict[str, Any]]:
    """The trained encoder of a run directory, rebuilt with that run's own `model.encoder` settings (and the export
    command line's `model.encoder.*` overrides, when `run` carries them)."""
    if not run_dir.is_dir():
        raise VtlabError(f"run_dir={run_dir}: no such directory")
    model_dir = model_dir_of(run_dir)
    run = run or RunConfig(cfg, run_dir)
    if run.recorded is None:
        log.warning("export: %s has no .hydra/config.yaml; using this run's model.encoder settings", run_dir)
    encoder_cfg, _ = run.node("model.encoder")  # checked (vtlab/export/safe_config.py); its recorded backbone dropped
    # the saved model is already on the run's vocabulary: no transfer, load it as it is
    encoder = instantiate(encoder_cfg, backbone=Backbone(str(model_dir), name=run_dir.name))
    query_dir = model_dir / "query"
    if encoder.query_model is not None and (query_dir / "config.json").is_file():
        encoder.query_model = Backbone(str(query_dir)).load_model()  # two-tower: the trained query network
    return encoder, {"run_dir": str(run_dir.resolve()), "model_dir": str(model_dir.resolve())}


def load_encoder(cfg: DictConfig, run: RunConfig) -> tuple[Any, dict[str, Any]]:
    if cfg.get("run_dir"):
        return encoder_from_run(Path(str(cfg.run_dir)), cfg, run)
    return build_encoder(cfg), {"backbone": OmegaConf.to_container(cfg.backbone, resolve=True),
                                "vocab": str(cfg.vocab.get("name", "")), "init": str(cfg.init.get("name", ""))}


def corpus_docs(path: Path | None, source: EvalSource) -> Iterable[tuple[str, str]]:
    """(doc id, text) pairs of export.vectors.corpus: the eval collection (`path` None), or a BEIR corpus.jsonl
    streamed."""
    if path is None:
        return source.collection("export.vectors.corpus=eval", IDF_FIX).corpus.items()
    return iter_corpus_jsonl(path)


def corpus_path(cfg: DictConfig) -> Path | None:
    """export.vectors.corpus as a file (None: `eval`, the eval collection's documents)."""
    source = str(cfg.export.vectors.corpus)
    if source == "eval":
        return None
    path = Path(source)
    if path.is_dir():
        path = path / "corpus.jsonl"
    if not path.is_file():
        raise VtlabError(f"export.vectors.corpus={source}: no such file (expected 'eval' or a BEIR corpus.jsonl)")
    return path


def _plain(node: Any) -> dict[str, Any]:
    return OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else dict(node or {})


def vector_formats(cfg: DictConfig, out_dir: Path) -> tuple[list[VectorFormat], list[VectorFormat]]:
    """(document writers, query writers) of export.vectors.formats; query writers only with export.vectors.queries."""
    v = cfg.export.vectors
    names = [str(n) for n in (v.formats or [])]
    formats: list[VectorFormat] = []
    queries: list[VectorFormat] = []
    for name in dict.fromkeys(names):
        spec = FORMATS.get(name)
        if spec is None:
            raise VtlabError(f"export.vectors.formats: unknown format {name!r} (choose from {', '.join(FORMATS)})")
        fmt = spec.writer(out_dir / spec.docs, **_plain(v.get(name)))
        formats.append(fmt)
        if v.get("queries") and spec.queries is not None:
            queries.append(fmt.queries(out_dir / spec.queries))
    if not cfg.export.overwrite:
        for fmt in formats + queries:
            if fmt.path.exists():
                raise VtlabError(f"export.vectors.dir: {fmt.path} exists (set export.overwrite=true to replace it)")
    return formats, queries


def this_run_overrides(cfg: DictConfig) -> list[str] | None:
    """The overrides of the running command (Hydra's own record; its .hydra/overrides.yaml when not under Hydra)."""
    if HydraConfig.initialized():
        return [str(o) for o in HydraConfig.get().overrides.task]
    return run_overrides(Path(cfg.paths.run_dir))


def encoding_line(path: Path | None, source: EvalSource, queries: bool) -> str:
    """What the vectors are made of, in one line: the collection, whose config names it, its counts."""
    if path is None:
        coll = source.collection("export.vectors.corpus=eval", IDF_FIX)
        counts = f"{len(coll.corpus):,} documents" + (f", {len(coll.queries):,} queries" if queries else "")
        return f"export: encoding {source.name} from {source.origin}: {counts}"
    line = f"export: encoding the documents of {path} (export.vectors.corpus)"
    if queries:
        coll = source.collection("export.vectors.queries=true: the queries", QUERIES_FIX)
        line += f" and the queries of {source.name} from {source.origin}: {len(coll.queries):,} queries"
    return line


def model_extras(cfg: DictConfig, encoder: Any, run: RunConfig, base: Path, out: Path, trained: bool,
                 vector_files: dict[str, Path], vectors_of: str | None) -> list[Callable[[Path], Any]]:
    """What goes into the SparseEncoder directory besides sentence-transformers' modules: ONNX graphs
    (export.onnx) and the model card README.md (export.model_card), with the run's command and metrics."""
    ex = cfg.export
    extras: list[Callable[[Path], Any]] = []
    if ex.get("onnx"):
        extras.append(lambda model_dir: export_onnx(encoder, model_dir / "onnx"))
    if ex.get("model_card", True):
        run_dir = Path(str(cfg.run_dir)) if cfg.get("run_dir") else None
        info = card_info(run, name=ex.get("name"), run_dir=run_dir or base, trained=trained,
                         license=ex.get("license"), repo_id=ex.get("push_to_hub"))
        card = model_card(
            info, describe(encoder), train_overrides=run_overrides(run_dir), export_overrides=this_run_overrides(cfg),
            metrics=run_metrics(base), vector_files=vector_files, vectors_of=vectors_of,
            onnx_dir="onnx" if ex.get("onnx") else None, card_dir=out, run_dir=base)
        extras.append(lambda model_dir: (model_dir / "README.md").write_text(card))
    return extras


def run(cfg: DictConfig, state: dict[str, Any]) -> dict[str, Any]:
    ex = cfg.export
    if not ex.sentence_transformers and not ex.vectors.formats:
        raise VtlabError("stage=export: nothing to export (export.sentence_transformers=false and no "
                         "export.vectors.formats)")
    base = Path(str(cfg.run_dir)) if cfg.get("run_dir") else Path(cfg.paths.run_dir)
    out = Path(ex.out) if ex.out else base / "sparse-encoder"
    repo = str(ex.push_to_hub) if ex.get("push_to_hub") else None
    if repo is not None:  # before any work: an export meant for the Hub must not run for nothing
        if not ex.sentence_transformers:
            raise VtlabError(f"export.push_to_hub={repo} uploads the SparseEncoder directory: set "
                             "export.sentence_transformers=true")
        check_push(repo, out.absolute())
    # config and target errors before any model is loaded
    formats, query_formats = vector_formats(cfg, Path(ex.vectors.dir) if ex.vectors.dir else base / "vectors")
    if ex.get("onnx") and not ex.sentence_transformers:
        raise VtlabError("export.onnx=true writes <export.out>/onnx inside the SparseEncoder directory: set "
                         "export.sentence_transformers=true")
    if ex.sentence_transformers:
        check_target(out.absolute(), bool(ex.overwrite), "export.out")
    trained = state.get("encoder") is not None or bool(cfg.get("run_dir"))
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
        extras = model_extras(cfg, encoder, run_cfg, base, out, trained,
                              {type(f).__name__: f.path for f in formats + query_formats}, vectors_of)
        result["export_dir"] = export_sentence_transformers(encoder, out, overwrite=bool(ex.overwrite),
                                                            source=portable_values(src, out, base), extras=extras)
        console.print(f"sentence-transformers: {out.resolve()}  (SparseEncoder({str(out)!r}))")
    if formats:
        console.print(line, soft_wrap=True, markup=False, highlight=False)  # one line, whatever the terminal width
        n = write_vectors(encoder, corpus_docs(corpus, source), formats, chunk_size=int(ex.vectors.chunk_size),
                          batch_size=int(ex.vectors.batch_size))
        result["vector_files"] = [f.path for f in formats]
        for f in formats:
            console.print(f"vectors ({type(f).__name__}, {n} documents): {f.path.resolve()}")
    if query_formats:
        queries = source.collection("export.vectors.queries=true: the queries", QUERIES_FIX).queries.items()
        n = write_vectors(encoder, queries, query_formats, chunk_size=int(ex.vectors.chunk_size),
                          batch_size=int(ex.vectors.batch_size), side="query")
        result["query_vector_files"] = [f.path for f in query_formats]
        for f in query_formats:
            console.print(f"query vectors ({type(f).__name__}, {n} queries): {f.path.resolve()}")
    if repo is not None:
        url = push_to_hub(out.absolute(), repo, private=bool(ex.get("private", False)))
        console.print(f"pushed to the Hub: {url}")
        result["hub_url"] = url
    return result
