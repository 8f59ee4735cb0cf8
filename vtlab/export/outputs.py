"""What stage=export writes, checked before any model is loaded: the SparseEncoder directory (export.out), the vector
files (export.vectors.formats) and the Hub repository (export.push_to_hub), with one-line errors for settings that
disagree (nothing to export; an upload or ONNX graphs without the SparseEncoder directory) and for targets that may
not be written."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from omegaconf import DictConfig

from vtlab.core.errors import VtlabError
from vtlab.export.hub import check_push
from vtlab.export.sentence_transformers import check_target
from vtlab.export.vectors import VectorFormat, vector_formats


class ExportOutputs(NamedTuple):
    out: Path  # the SparseEncoder directory
    repo: str | None  # the Hub repository it is pushed to
    formats: list[VectorFormat]  # document vectors
    query_formats: list[VectorFormat]  # query vectors


def export_outputs(cfg: DictConfig, base: Path) -> ExportOutputs:
    """The outputs `cfg.export` asks for; `base` is the run directory they go into by default (`base`/sparse-encoder,
    `base`/vectors)."""
    ex = cfg.export
    if not ex.sentence_transformers and not ex.vectors.formats:
        raise VtlabError(
            "stage=export: nothing to export (export.sentence_transformers=false and no export.vectors.formats)"
        )
    out = Path(ex.out) if ex.out else base / "sparse-encoder"
    repo = str(ex.push_to_hub) if ex.get("push_to_hub") else None
    if repo is not None:  # before any work: an export meant for the Hub must not run for nothing
        if not ex.sentence_transformers:
            raise VtlabError(
                f"export.push_to_hub={repo} uploads the SparseEncoder directory: set export.sentence_transformers=true"
            )
        check_push(repo, out.absolute())
    formats, query_formats = vector_formats(cfg, Path(ex.vectors.dir) if ex.vectors.dir else base / "vectors")
    for key, value, folder in (("onnx", "true", "onnx"), ("onnx_int8", ex.get("onnx_int8"), "onnx-int8")):
        if ex.get(key) and not ex.sentence_transformers:
            raise VtlabError(
                f"export.{key}={value} writes <export.out>/{folder} inside the SparseEncoder directory: set "
                "export.sentence_transformers=true"
            )
    if ex.sentence_transformers:
        check_target(out.absolute(), bool(ex.overwrite), "export.out")
    return ExportOutputs(out, repo, formats, query_formats)
