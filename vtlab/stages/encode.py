"""Stage `encode`: the eval collection's corpus encoded with Lightning `predict` (vtlab/models/predict.py), sharded
over the processes of one trainer and, with stage.encode.num_shards=n, over n independent jobs (vtlab/index/shards.py).

    python -m vtlab stage=encode backbone=splade-tiny vocab=native eval=boolq
    python -m vtlab stage=encode trainer=ddp trainer.accelerator=cpu trainer.devices=2 ...   # 2 processes
    python -m vtlab stage=encode stage.encode.num_shards=3 stage.encode.shard=1 stage.encode.dir=IDX ...  # job 1 of 3
    python -m vtlab stage=encode stage.encode.merge=true stage.encode.dir=IDX                             # the merge

Writes <index>/ (stage.encode.dir, default <run_dir>/index): docs.npz (CSR [n_docs, vocab], float32, corpus order),
doc_ids.json, encode.json (with the model: vtlab.models.encoder.vectors_key); a job of n writes
<index>/shard-<i>-of-<n>/ (its slice, and shard.json: its record) instead, and the merge checks the n shards (one
encoding: vtlab.index.shards, where a foreign, duplicated, missing or damaged shard is one line) and writes
<index>/docs.npz and doc_ids.json, byte-equal to one job's.

With several processes, the batches are dealt to them in turn (a corpus of fewer batches than processes encodes too,
a process with none writing an empty shard); each spills its vectors to <index>/shards/ (a job of n: under
<index>/parts/, removed once its shard is written), and rank 0 merges them, once every process has written its
manifest, after checking they are one complete encoding (vtlab.models.predict): the index is the same, bit for bit,
whatever the number of processes.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from hydra.utils import instantiate

from vtlab.core.atomic import atomic_write_text, write_json
from vtlab.core.errors import ConfigError, VtlabError
from vtlab.index.shards import corpus_fingerprint, merge_shards, save_csr, shard_bounds, shard_index, write_shard
from vtlab.models.encoder import vectors_key
from vtlab.models.predict import encode_corpus
from vtlab.runs.reads import reads
from vtlab.runtime.precision import trainer_precision
from vtlab.stages.build import ENCODER_READS, build_encoder

_TRAINER_KEYS = ("accelerator", "devices", "strategy", "num_nodes", "precision")


def _positive(opts: Any, key: str, default: int) -> int:
    value = opts.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"stage.encode.{key}={value!r}: expected an integer >= 1")
    return value


@reads("eval", "trainer", *ENCODER_READS)
def run(cfg: Any, state: dict[str, Any]) -> dict[str, Any]:
    opts = cfg.stage.get("encode") or {}
    out = Path(str(opts.dir)) if opts.get("dir") else Path(cfg.paths.run_dir) / "index"
    if opts.get("merge"):
        docs = merge_shards(out)
        print(f"merged {out}/shard-*-of-* → {docs}")
        return {**state, "index_dir": out}
    num_shards = opts.get("num_shards", 1)
    shard = shard_index(opts.get("shard"), num_shards)  # before the model loads
    batch_size, window = _positive(opts, "batch_size", 64), _positive(opts, "window", 64)
    if cfg.eval is None:
        raise VtlabError("stage=encode encodes the eval collection's corpus: choose an eval (e.g. eval=boolq)")
    encoder = state.get("encoder") or build_encoder(cfg, state)
    collection = instantiate(cfg.eval).collection
    doc_ids = list(collection.corpus)
    bounds = (0, len(doc_ids)) if shard is None else shard_bounds(len(doc_ids), num_shards, window * batch_size)[shard]
    ids = doc_ids[bounds[0] : bounds[1]]
    work = out if shard is None else out / "parts" / f"{shard}-of-{num_shards}"
    trainer_kwargs = {k: cfg.trainer[k] for k in _TRAINER_KEYS if cfg.trainer.get(k) is not None}
    if "precision" in trainer_kwargs:
        trainer_kwargs["precision"] = trainer_precision(trainer_kwargs["precision"], trainer_kwargs.get("accelerator"))
    began = time.perf_counter()
    empty = sp.csr_matrix((0, encoder.vocab_size), dtype=np.float32)  # a shard with no window of its own
    docs = (
        empty
        if not ids
        else encode_corpus(
            encoder,
            [collection.corpus[i] for i in ids],
            work,
            trainer_kwargs,
            batch_size=batch_size,
            num_workers=int(opts.get("num_workers", 0)),
            threads=opts.get("threads"),
            window=window,
        )
    )
    seconds = time.perf_counter() - began
    if docs is None:  # not rank 0 (ddp launched as subprocesses): rank 0 writes the index
        return state
    report = {
        "collection": collection.name,
        "n_docs": len(doc_ids),
        "seconds": round(seconds, 2),
        "docs_per_s": round(len(ids) / max(seconds, 1e-9), 1),
        "doc_active_dims": round(docs.nnz / max(len(ids), 1), 1),
        "processes": trainer_kwargs.get("devices", 1),
        "strategy": str(trainer_kwargs.get("strategy", "auto")),
        "model": vectors_key(encoder),
    }
    if shard is None:
        save_csr(out / "docs.npz", docs)
        atomic_write_text(out / "doc_ids.json", [json.dumps(doc_ids)])
        write_json(out / "encode.json", report)
        where = out / "docs.npz"
    else:
        batching = {"fingerprint": corpus_fingerprint(doc_ids), "batch_size": batch_size, "window": window}
        where = write_shard(out, shard, num_shards, bounds, docs, ids, {**report, **batching})
        shutil.rmtree(work, ignore_errors=True)  # the processes' spill files, merged into the shard
    print(f"encoded {len(ids)} of {len(doc_ids)} docs in {seconds:.1f}s → {where}")
    return {**state, "encoder": encoder, "doc_vectors": docs, "doc_ids": ids, "index_dir": out}
