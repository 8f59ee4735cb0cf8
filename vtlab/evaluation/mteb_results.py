"""An evaluation's scores in the MTEB results format, beside its metrics.json: what `mteb` writes for a task
(mteb.results.TaskResult.to_disk) and its model (model_meta.json), in mteb's layout, so mteb's loaders and the tools
built on them read vtlab's runs:

    <root>/<model name as a path: "/" → "__">/<revision>/<TaskName>.json   + model_meta.json beside it

The revision is the model's: a digest of its weights (model_revision), so two runs that evaluated the same weights
file their results under one revision, and a retrained model under another.

<TaskName>.json: {dataset_revision, task_name, mteb_version, scores: {<split>: [{main_score, ndcg_at_10, mrr_at_10,
recall_at_100, ..., hf_subset: "default", languages: [...]}]}, evaluation_time, kg_co2_emissions, date}. The scores are
metrics.json's measures renamed to MTEB's keys (nDCG@k → ndcg_at_k, RR@k → mrr_at_k, R@k → recall_at_k, P@k →
precision_at_k, AP@k → map_at_k; values as measured, nothing recomputed); main_score is ndcg_at_10, MTEB's main score
for retrieval. The task is the evaluation's `mteb_task` (conf/eval/beir13.yaml names one per BEIR set); a collection
without one is filed under its own name, and the file's `vtlab` block says it is not an MTEB task. mteb did not produce
these numbers (mteb_version null) and vtlab's collections are not pinned to an MTEB dataset revision (dataset_revision
says so): mteb reads them, its submission tools do not take them for its own runs.
"""

from __future__ import annotations

import inspect
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from vtlab.backbones.weights import weights_key
from vtlab.core.atomic import json_hash, write_json
from vtlab.core.paths import child

MAIN_SCORE = "ndcg_at_10"
NOT_PINNED = "not pinned (vtlab)"
REVISION_LENGTH = 12  # hex digits of a model's revision (model_revision)
# ir_measures' names → MTEB's: <name>@<k> → <mteb>_at_<k>
_MEASURE = re.compile(r"(nDCG|RR|R|P|AP)@(\d+)")
_MTEB_NAMES = {"nDCG": "ndcg", "RR": "mrr", "R": "recall", "P": "precision", "AP": "map"}


def model_path_name(name: str) -> str:
    """A model name as mteb files it (ModelMeta.model_name_as_path)."""
    return name.replace("/", "__").replace(" ", "_")


def mteb_scores(metrics: Mapping[str, Any]) -> dict[str, float]:
    """metrics.json's retrieval measures under MTEB's keys (budgeted, sparsity and timing keys are left out)."""
    scores = {}
    for key, value in metrics.items():
        m = _MEASURE.fullmatch(key)
        if m is not None:
            scores[f"{_MTEB_NAMES[m.group(1)]}_at_{m.group(2)}"] = float(value)
    return scores


def task_result(
    task: str, split: str, metrics: Mapping[str, Any], languages: Sequence[str], collection: str, is_mteb_task: bool
) -> dict[str, Any]:
    """The <TaskName>.json object of one evaluation."""
    scores = mteb_scores(metrics)
    if not scores:
        raise ValueError(f"{collection}: no measure with an MTEB name among {sorted(metrics)}")
    main = MAIN_SCORE if MAIN_SCORE in scores else next(iter(scores))
    entry = {"main_score": scores[main], **scores, "hf_subset": "default", "languages": list(languages)}
    return {
        "dataset_revision": NOT_PINNED,
        "task_name": task,
        "mteb_version": None,
        "scores": {split: [entry]},
        "evaluation_time": metrics.get("total_s"),
        "kg_co2_emissions": None,
        "date": time.time(),
        "vtlab": {
            "collection": collection,
            "split": split,
            "mteb_task": is_mteb_task,
            "main_score": main,
            "metrics": f"eval/{collection}/metrics.json",
        },
    }


def model_meta(name: str, revision: str, encoder: Any, adapted_from: str | None) -> dict[str, Any]:
    """model_meta.json: mteb's ModelMeta.to_dict() fields for a vtlab sparse encoder (unknowns null)."""
    params = getattr(encoder, "parameters", None)
    n_parameters = sum(p.numel() for p in params()) if callable(params) else None
    max_length = getattr(encoder, "max_length", None)
    return {
        "name": name,
        "revision": revision,
        "release_date": None,
        "languages": None,
        "n_parameters": n_parameters,
        "n_active_parameters_override": None,
        "n_embedding_parameters": None,
        "memory_usage_mb": None,
        "max_tokens": max_length.get("doc") if isinstance(max_length, Mapping) else None,
        "embed_dim": getattr(encoder, "vocab_size", None),
        "license": None,
        "open_weights": None,
        "public_training_code": None,
        "public_training_data": None,
        "framework": ["PyTorch"],
        "reference": None,
        "similarity_fn_name": "dot",
        "use_instructions": False,
        "training_datasets": None,
        "adapted_from": adapted_from,
        "superseded_by": None,
        "modalities": ["text"],
        "model_type": ["sparse"],
        "citation": None,
        "contacts": None,
        "experiment_kwargs": None,
        "output_dtypes": None,
        "extra_requirements_groups": None,
        "loader_kwargs": {},
        "loader": None,
        "is_cross_encoder": False,
    }


def model_revision(encoder: Any) -> str:
    """The model's revision: a digest of its networks' weights (the same weights, the same revision, whichever run
    directory evaluated them); a model without networks (BM25) by its class and settings."""
    networks = getattr(encoder, "networks", None)
    if callable(networks):
        return weights_key(networks(), REVISION_LENGTH)
    names = inspect.signature(type(encoder)).parameters  # its settings, not what a corpus fitted (BM25's avgdl)
    settings = {k: getattr(encoder, k) for k in names if isinstance(getattr(encoder, k, None), (bool, int, float, str))}
    return json_hash({"class": type(encoder).__name__, **settings}, REVISION_LENGTH)


def write_mteb_results(
    root: str | Path,
    evaluation: Any,
    name: str,
    metrics: Mapping[str, Any],
    model: str,
    revision: str | None = None,
    encoder: Any = None,
    adapted_from: str | None = None,
) -> Path:
    """<root>/<model>/<revision>/<TaskName>.json (and model_meta.json) for evaluation `name`'s `metrics`; `model` is
    the model's name (mteb wants 'organization/name'), `revision` its revision (None: model_revision(encoder)). The
    task, split and languages come from the evaluation (RetrievalEvaluation.mteb_task, .split, .languages; absent: the
    collection's name, test, eng-Latn)."""
    revision = model_revision(encoder) if revision is None else revision
    task = getattr(evaluation, "mteb_task", None)
    languages = list(getattr(evaluation, "languages", None) or ["eng-Latn"])
    split = str(getattr(evaluation, "split", None) or "test")
    out = Path(root) / model_path_name(model) / revision
    path = child(out, f"{task or name}.json", "eval.mteb_task" if task else "eval.name")
    write_json(path, task_result(task or name, split, metrics, languages, name, task is not None))
    write_json(out / "model_meta.json", model_meta(model, revision, encoder, adapted_from))
    return path
