"""Stage `export`: a model as a sentence-transformers SparseEncoder directory and/or its documents' (and queries')
sparse vectors for Anserini, OpenSearch, Elasticsearch and Qdrant (conf/stage/export.yaml lists the settings)."""
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
from vtlab.export.model_card import model_card, run_metrics, run_overrides
from vtlab.export.onnx import export_onnx
from vtlab.export.sentence_transformers import check_target, describe, export_sentence_transformers
from vtlab.export.vectors import FORMATS, VectorFormat, write_vectors
from vtlab.stages.build import build_encoder

log = logging.getLogger("vtlab")


def model_dir_of(run_dir: Path) -> Path:
    """The Hugging Face directory of a run: <run_dir>/model (what fine-tuning writes), or run_dir itself."""
    for candidate in (run_dir / "model", run_dir):
        if (candidate / "config.json").is_file():
            return candidate
    raise VtlabError(f"run_dir={run_dir}: no model/config.json (the model a training run writes) and no "
                     "config.json in the directory itself")


# What a config read from another run's directory may instantiate: vtlab's own classes and these library targets (the
# ones vtlab's conf/ uses). Anything else in such a file (`os.system`, `builtins.exec`, …) is refused, never imported.
LIBRARY_TARGETS = frozenset({
    "torch.optim.AdamW", "transformers.get_linear_schedule_with_warmup", "pytorch_lightning.Trainer",
    "pytorch_lightning.callbacks.ModelCheckpoint", "pytorch_lightning.callbacks.RichProgressBar",
    "pytorch_lightning.loggers.WandbLogger",
})


def check_targets(node: Any, where: str) -> None:
    """VtlabError (one line, naming `where` and the key) for any `_target_` under `node` that is neither `vtlab.*` nor
    in LIBRARY_TARGETS: a run directory is data, and instantiating its config must not import arbitrary code."""
    def walk(value: Any, key: str) -> None:
        if isinstance(value, dict):
            target = value.get("_target_")
            if target is not None:
                name = str(target)
                if not (name.startswith("vtlab.") and "${" not in name) and name not in LIBRARY_TARGETS:
                    raise VtlabError(f"{where}: {key + '.' if key else ''}_target_={name!r} is not instantiated: a "
                                     "config read from a run directory may only name vtlab.* or "
                                     f"{', '.join(sorted(LIBRARY_TARGETS))}")
            for k, v in value.items():
                walk(v, f"{key}.{k}" if key else str(k))
        elif isinstance(value, list):
            for i, v in enumerate(value):
                walk(v, f"{key}[{i}]")

    container = OmegaConf.to_container(node, resolve=False) if OmegaConf.is_config(node) else node
    walk(container, "")


def encoder_from_run(run_dir: Path, cfg: DictConfig) -> tuple[Any, dict[str, Any]]:
    """The trained encoder of a run directory, rebuilt with that run's own `model.encoder` settings."""
    if not run_dir.is_dir():
        raise VtlabError(f"run_dir={run_dir}: no such directory")
    model_dir = model_dir_of(run_dir)
    run_cfg_path = run_dir / ".hydra" / "config.yaml"
    if run_cfg_path.is_file():
        # the run's own encoder type, lengths, activation and preprocessing (its interpolations resolve in its config)
        run_cfg = OmegaConf.load(run_cfg_path)
        encoder_cfg = run_cfg.model.encoder
        check_targets(encoder_cfg, f"{run_cfg_path} (model.encoder)")
        # its interpolations, resolved as instantiate will resolve them, may point elsewhere in that file
        check_targets(OmegaConf.to_container(encoder_cfg, resolve=True), f"{run_cfg_path} (model.encoder, resolved)")
    else:
        log.warning("export: %s has no .hydra/config.yaml; using this run's model.encoder settings", run_dir)
        encoder_cfg = cfg.model.encoder
    # the saved model is already on the run's vocabulary: no transfer, load it as it is
    encoder = instantiate(encoder_cfg, backbone=Backbone(str(model_dir), name=run_dir.name))
    query_dir = model_dir / "query"
    if encoder.query_model is not None and (query_dir / "config.json").is_file():
        encoder.query_model = Backbone(str(query_dir)).load_model()  # two-tower: the trained query network
    return encoder, {"run_dir": str(run_dir.resolve()), "model_dir": str(model_dir.resolve())}


def load_encoder(cfg: DictConfig) -> tuple[Any, dict[str, Any]]:
    if cfg.get("run_dir"):
        return encoder_from_run(Path(str(cfg.run_dir)), cfg)
    return build_encoder(cfg), {"backbone": OmegaConf.to_container(cfg.backbone, resolve=True),
                                "vocab": str(cfg.vocab.get("name", "")), "init": str(cfg.init.get("name", ""))}


def _eval_collection(cfg: DictConfig, what: str,
                     fix: str = "export.vectors.corpus=<corpus.jsonl> (or model.encoder.idf_path)") -> Any:
    """The configured eval collection (`what` names who needs it and `fix` the way out, for the error)."""
    evaluation = instantiate(cfg.eval) if cfg.get("eval") is not None else None
    if evaluation is None or not hasattr(evaluation, "collection"):
        has = "no eval collection (eval=none)" if evaluation is None else "an evaluation suite, not one collection"
        raise VtlabError(f"{what} comes from the eval collection, but this config has {has}; set {fix}")
    return evaluation.collection


def _eval_corpus(cfg: DictConfig, what: str) -> dict[str, str]:
    return _eval_collection(cfg, what).corpus


def corpus_docs(cfg: DictConfig) -> Iterable[tuple[str, str]]:
    """(doc id, text) pairs of export.vectors.corpus: the eval collection, or a BEIR corpus.jsonl streamed."""
    source = str(cfg.export.vectors.corpus)
    if source == "eval":
        return _eval_corpus(cfg, "export.vectors.corpus=eval").items()
    path = Path(source)
    if path.is_dir():
        path = path / "corpus.jsonl"
    if not path.is_file():
        raise VtlabError(f"export.vectors.corpus={source}: no such file (expected 'eval' or a BEIR corpus.jsonl)")
    return iter_corpus_jsonl(path)


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


def _eval_queries(cfg: DictConfig) -> Iterable[tuple[str, str]]:
    return _eval_collection(cfg, "export.vectors.queries=true: the queries", "eval=<one collection> or "
                            "export.vectors.queries=false").queries.items()


def this_run_overrides(cfg: DictConfig) -> list[str] | None:
    """The overrides of the running command (Hydra's own record; its .hydra/overrides.yaml when not under Hydra)."""
    if HydraConfig.initialized():
        return [str(o) for o in HydraConfig.get().overrides.task]
    return run_overrides(Path(cfg.paths.run_dir))


def model_extras(cfg: DictConfig, encoder: Any, source: dict[str, Any], base: Path,
                 vector_files: dict[str, Path]) -> list[Callable[[Path], Any]]:
    """What goes into the SparseEncoder directory besides sentence-transformers' modules: ONNX graphs
    (export.onnx) and the model card README.md (export.model_card), with the run's command and metrics."""
    ex = cfg.export
    extras: list[Callable[[Path], Any]] = []
    if ex.get("onnx"):
        extras.append(lambda model_dir: export_onnx(encoder, model_dir / "onnx"))
    if ex.get("model_card", True):
        trained = Path(str(cfg.run_dir)) if cfg.get("run_dir") else None
        card = model_card(
            (trained or base).name, describe(encoder), source, train_overrides=run_overrides(trained),
            export_overrides=this_run_overrides(cfg), metrics=run_metrics(base), vector_files=vector_files,
            onnx_dir="onnx" if ex.get("onnx") else None)
        extras.append(lambda model_dir: (model_dir / "README.md").write_text(card))
    return extras


def run(cfg: DictConfig, state: dict[str, Any]) -> dict[str, Any]:
    ex = cfg.export
    if not ex.sentence_transformers and not ex.vectors.formats:
        raise VtlabError("stage=export: nothing to export (export.sentence_transformers=false and no "
                         "export.vectors.formats)")
    base = Path(str(cfg.run_dir)) if cfg.get("run_dir") else Path(cfg.paths.run_dir)
    out = Path(ex.out) if ex.out else base / "sparse-encoder"
    # config and target errors before any model is loaded
    formats, query_formats = vector_formats(cfg, Path(ex.vectors.dir) if ex.vectors.dir else base / "vectors")
    if ex.get("onnx") and not ex.sentence_transformers:
        raise VtlabError("export.onnx=true writes <export.out>/onnx inside the SparseEncoder directory: set "
                         "export.sentence_transformers=true")
    if ex.sentence_transformers:
        check_target(out.absolute(), bool(ex.overwrite), "export.out")
    if state.get("encoder") is not None:  # a model trained earlier in this pipeline
        encoder, source = state["encoder"], {"run_dir": str(Path(cfg.paths.run_dir).resolve())}
    else:
        encoder, source = load_encoder(cfg)
    console = Console()
    result: dict[str, Any] = {**state, "encoder": encoder}
    if ex.sentence_transformers:
        if getattr(encoder, "needs_idf", False):  # as stage=evaluate does for an untrained inference-free model
            encoder.fit_corpus(list(_eval_corpus(cfg, "the inference-free query IDF").values()))
        extras = model_extras(cfg, encoder, source, base, {type(f).__name__: f.path.resolve() for f in formats})
        result["export_dir"] = export_sentence_transformers(encoder, out, overwrite=bool(ex.overwrite),
                                                            source=source, extras=extras)
        console.print(f"sentence-transformers: {out.resolve()}  (SparseEncoder({str(out)!r}))")
    if formats:
        n = write_vectors(encoder, corpus_docs(cfg), formats, chunk_size=int(ex.vectors.chunk_size),
                          batch_size=int(ex.vectors.batch_size))
        result["vector_files"] = [f.path for f in formats]
        for f in formats:
            console.print(f"vectors ({type(f).__name__}, {n} documents): {f.path.resolve()}")
    if query_formats:
        n = write_vectors(encoder, _eval_queries(cfg), query_formats, chunk_size=int(ex.vectors.chunk_size),
                          batch_size=int(ex.vectors.batch_size), side="query")
        result["query_vector_files"] = [f.path for f in query_formats]
        for f in query_formats:
            console.print(f"query vectors ({type(f).__name__}, {n} queries): {f.path.resolve()}")
    return result
