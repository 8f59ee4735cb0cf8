"""The model card (README.md) of an exported SparseEncoder directory: what the model is, the commands that made it,
its metrics (the run's eval/<collection>/metrics.json), and how to load it in sentence-transformers and in an engine."""
from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from vtlab.export.vectors import FORMATS

log = logging.getLogger("vtlab")


def run_overrides(run_dir: Path | None) -> list[str] | None:
    """The command-line overrides Hydra recorded for a run (<run_dir>/.hydra/overrides.yaml), None if absent."""
    path = None if run_dir is None else Path(run_dir) / ".hydra" / "overrides.yaml"
    if path is None or not path.is_file():
        return None
    data = yaml.safe_load(path.read_text())
    return [str(x) for x in data] if isinstance(data, list) else None


def run_metrics(run_dir: Path | None) -> dict[str, dict[str, float]]:
    """collection → {measure: value} from <run_dir>/eval/*/metrics.json (unreadable files are skipped, logged)."""
    out: dict[str, dict[str, float]] = {}
    if run_dir is None:
        return out
    for path in sorted(Path(run_dir).glob("eval/*/metrics.json")):
        try:
            metrics = json.loads(path.read_text()).get("metrics")
        except (OSError, ValueError, AttributeError) as exc:
            log.warning("model card: %s skipped (%s)", path, exc)
            continue
        if isinstance(metrics, dict):
            flat = _flatten(metrics)
            if flat:
                out[path.parent.name] = flat
    return out


def _flatten(metrics: dict[str, Any], prefix: str = "") -> dict[str, float]:
    flat: dict[str, float] = {}
    for key, value in metrics.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{name} / "))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            flat[name] = float(value)
    return flat


def _command(overrides: Sequence[str] | None) -> str:
    return "python -m vtlab " + " ".join(overrides) if overrides is not None else "(not recorded)"


def model_card(name: str, encoder: dict[str, Any], source: dict[str, Any], *,
               train_overrides: Sequence[str] | None, export_overrides: Sequence[str] | None,
               metrics: dict[str, dict[str, float]], vector_files: dict[str, Path], onnx_dir: str | None) -> str:
    """The README.md text. `encoder`: vtlab.export.sentence_transformers.describe(); `vector_files`: format → path
    written by the same export; `onnx_dir`: the ONNX subdirectory, if exported."""
    kind = encoder.get("kind", "siamese")
    lengths = encoder.get("max_length", {})
    activation = "log1p(log1p(relu(·)))" if encoder.get("double_log") else "log1p(relu(·))"
    lines = [
        "---", "library_name: sentence-transformers", "pipeline_tag: feature-extraction",
        "tags: [sentence-transformers, sparse-encoder, splade, vtlab]", "---", "",
        f"# {name}", "",
        f"A {kind} SPLADE sparse encoder exported by vtlab: each text becomes a "
        f"{encoder.get('vocab_size')}-dimensional "
        f"sparse vector over the tokenizer's vocabulary, w = {activation} of the max over token positions of the "
        "masked-LM logits; relevance is the dot product of a query vector and a document vector.",
        f"Max length: queries {lengths.get('query')}, documents {lengths.get('doc')} tokens.",
    ]
    if kind == "inference-free":
        lines.append("Queries run no network: a query is its distinct tokens weighted by relu(idf).")
    lines += ["", "Source: " + ", ".join(f"{k} = `{v}`" for k, v in source.items()) if source else "", "",
              "## How it was made", "", "```bash"]
    if train_overrides is not None:
        lines.append(f"# training run\n{_command(train_overrides)}")
    lines += [f"# export\n{_command(export_overrides)}", "```", "", "## Metrics", ""]
    if metrics:
        lines += ["From the run's `eval/<collection>/metrics.json`:", "", "| collection | measure | value |",
                  "|---|---|---|"]
        lines += [f"| {coll} | {m} | {v:.4f} |" for coll, ms in metrics.items() for m, v in ms.items()]
    else:
        lines.append("No evaluation was recorded for this run (no eval/*/metrics.json).")
    lines += ["", "## sentence-transformers", "", "```python", "from sentence_transformers import SparseEncoder", "",
              'model = SparseEncoder("path/to/this/directory")',
              'queries = model.encode_query(["what is vocabulary transfer?"])',
              'docs = model.encode_document(["Vocabulary transfer moves a model to a new tokenizer."])',
              "print(model.similarity(queries, docs))", "```", "",
              "## Search engines", ""]
    if vector_files:
        lines.append("The documents' vectors were written by the same export:")
        lines += [f"- {fmt}: `{path}`" for fmt, path in vector_files.items()]
        lines.append("")
    lines += [
        "- Anserini / Lucene impact index: `python -m vtlab stage=export run_dir=... "
        "export.vectors.formats=[anserini]` writes a JsonVectorCollection (integer weights floor(w·scale+0.5)); index "
        "it with `IndexCollection -collection JsonVectorCollection -impact -pretokenized`, and search with query "
        "vectors quantized the same way.",
        "- OpenSearch / Elasticsearch: `export.vectors.formats=[opensearch]` writes `_bulk` NDJSON for a "
        "`rank_features` field (mapping.json beside it; \".\" in token names escaped as %2E); query with the same "
        "token names and weights.",
        f"- Every engine format vtlab writes (`export.vectors.formats`): {', '.join(FORMATS)}.",
    ]
    if onnx_dir:
        lines += ["", "## ONNX", "",
                  f"`{onnx_dir}/` holds ONNX graphs (see its onnx.json) with the SPLADE pooling inside: inputs "
                  "`input_ids`, `attention_mask` (int64, [batch, sequence]), output `sparse_embedding` "
                  "[batch, vocabulary], the same vectors as above (tested to 1e-4 with ONNX Runtime).", "",
                  "```python", "from vtlab.export.onnx import OnnxSparseEncoder", "",
                  f'vectors = OnnxSparseEncoder("path/to/this/directory/{onnx_dir}").encode(["a text"], side="doc")',
                  "```"]
    return "\n".join(lines) + "\n"
