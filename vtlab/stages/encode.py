"""Stage `encode`: the eval collection's corpus encoded with Lightning `predict` (vtlab/models/predict.py), sharded
over processes, merged into one index.

    python -m vtlab stage=encode backbone=splade-tiny vocab=native eval=boolq
    python -m vtlab stage=encode trainer=ddp trainer.accelerator=cpu trainer.devices=2 ...   # 2 processes

Writes <run_dir>/index/: docs.npz (CSR [n_docs, vocab], float32, corpus order), doc_ids.json, encode.json.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import scipy.sparse as sp
from hydra.utils import instantiate

from vtlab.core.atomic import write_json
from vtlab.core.errors import VtlabError
from vtlab.models.predict import encode_corpus
from vtlab.runs.reads import reads
from vtlab.runtime.precision import trainer_precision
from vtlab.stages.build import ENCODER_READS, build_encoder

_TRAINER_KEYS = ("accelerator", "devices", "strategy", "num_nodes", "precision")


@reads("eval", "trainer", *ENCODER_READS)
def run(cfg: Any, state: dict[str, Any]) -> dict[str, Any]:
    if cfg.eval is None:
        raise VtlabError("stage=encode encodes the eval collection's corpus: choose an eval (e.g. eval=boolq)")
    opts = cfg.stage.get("encode") or {}
    encoder = state.get("encoder") or build_encoder(cfg, state)
    collection = instantiate(cfg.eval).collection
    doc_ids = list(collection.corpus)
    out = Path(cfg.paths.run_dir) / "index"
    trainer_kwargs = {k: cfg.trainer[k] for k in _TRAINER_KEYS if cfg.trainer.get(k) is not None}
    if "precision" in trainer_kwargs:
        trainer_kwargs["precision"] = trainer_precision(trainer_kwargs["precision"], trainer_kwargs.get("accelerator"))
    began = time.perf_counter()
    docs = encode_corpus(
        encoder,
        [collection.corpus[i] for i in doc_ids],
        out,
        trainer_kwargs,
        batch_size=int(opts.get("batch_size", 64)),
        num_workers=int(opts.get("num_workers", 0)),
        threads=opts.get("threads"),
    )
    seconds = time.perf_counter() - began
    if docs is None:  # not rank 0 (ddp launched as subprocesses): rank 0 writes the index
        return state
    sp.save_npz(out / "docs.npz", docs, compressed=False)
    (out / "doc_ids.json").write_text(json.dumps(doc_ids))
    report = {
        "collection": collection.name,
        "n_docs": len(doc_ids),
        "seconds": round(seconds, 2),
        "docs_per_s": round(len(doc_ids) / seconds, 1),
        "doc_active_dims": round(docs.nnz / max(len(doc_ids), 1), 1),
        "processes": trainer_kwargs.get("devices", 1),
        "strategy": str(trainer_kwargs.get("strategy", "auto")),
    }
    write_json(out / "encode.json", report)
    print(f"encoded {len(doc_ids)} docs in {seconds:.1f}s → {out / 'docs.npz'}")
    return {**state, "encoder": encoder, "doc_vectors": docs, "doc_ids": doc_ids, "index_dir": out}
