"""Stage `encode`: corpus encoding as Lightning `predict`, sharded over processes, merged into one index.

    python -m vtlab stage=encode backbone=splade-tiny vocab=native eval=boolq
    python -m vtlab stage=encode trainer=ddp trainer.accelerator=cpu trainer.devices=2 ...   # 2 processes

The corpus is cut into length-sorted batches once (by character length, so no process has to tokenize the whole
corpus first); each batch is one dataset item, tokenized in the DataLoader (in worker processes with
`stage.encode.num_workers > 0`). Lightning's distributed sampler deals the batches to the processes, a
`BasePredictionWriter` spills each process's vectors to `shard-r<rank>-<part>.npz` files, and rank 0 merges them by
document position (a batch the sampler repeated to even out the shards is kept once). The merged index does not depend
on the number of processes: every batch is the same batch, whichever process encodes it.

Writes <run_dir>/index/: docs.npz (CSR [n_docs, vocab], float32, corpus order), doc_ids.json, encode.json.
"""
from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
import scipy.sparse as sp
import torch
from hydra.utils import instantiate
from pytorch_lightning.callbacks import BasePredictionWriter
from torch.utils.data import DataLoader, Dataset

from vtlab.atomic import write_json
from vtlab.errors import VtlabError
from vtlab.models.encoder import SpladeEncoder, dense_to_csr
from vtlab.stages.build import build_encoder

log = logging.getLogger("vtlab")


class TextBatches(Dataset):
    """Item i = batch i of texts (longest first, by characters), tokenized on access."""

    def __init__(self, texts: Sequence[str], tokenizer: Any, max_length: int, batch_size: int,
                 preprocess: Any = None) -> None:
        self.texts = [preprocess(t) for t in texts] if preprocess is not None else list(texts)
        self.tokenizer, self.max_length = tokenizer, int(max_length)
        order = np.argsort(-np.fromiter(map(len, self.texts), dtype=np.int64, count=len(self.texts)), kind="stable")
        self.batches = [order[s : s + batch_size] for s in range(0, len(order), batch_size)]

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, i: int) -> dict[str, Any]:
        idx = self.batches[i]
        enc = self.tokenizer([self.texts[j] for j in idx], padding=True, truncation=True,
                             max_length=self.max_length, return_tensors="pt")
        return {"positions": torch.from_numpy(idx), "input_ids": enc["input_ids"],
                "attention_mask": enc["attention_mask"]}


class EncodeModule(pl.LightningModule):
    """predict_step: a batch → (doc positions, CSR rows). `threads` pins torch's intra-op threads per process."""

    def __init__(self, encoder: SpladeEncoder, side: str = "doc", threads: int | None = None) -> None:
        super().__init__()
        self.encoder, self.side, self.threads = encoder, side, threads

    def on_predict_start(self) -> None:
        if self.threads:
            torch.set_num_threads(int(self.threads))
        self.encoder.eval()

    def predict_step(self, batch: dict[str, Any], batch_idx: int, dataloader_idx: int = 0) -> Any:
        w = self.encoder(batch["input_ids"], batch["attention_mask"], side=self.side)
        return batch["positions"].cpu().numpy(), dense_to_csr(w)


class ShardWriter(BasePredictionWriter):
    """Spills each process's (positions, CSR) to `shard-r<rank>-<part>.npz` every `rows` rows."""

    def __init__(self, out_dir: str | Path, rows: int = 65536) -> None:
        super().__init__(write_interval="batch")
        self.out_dir, self.rows = Path(out_dir), int(rows)
        self._pending: list[tuple[np.ndarray, sp.csr_matrix]] = []
        self._part = 0

    def write_on_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, prediction: Any,
                           batch_indices: Sequence[int] | None, batch: Any, batch_idx: int,
                           dataloader_idx: int = 0) -> None:
        self._pending.append(prediction)
        if sum(m.shape[0] for _, m in self._pending) >= self.rows:
            self._flush(trainer.global_rank)

    def on_predict_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._flush(trainer.global_rank)

    def _flush(self, rank: int) -> None:
        if not self._pending:
            return
        self.out_dir.mkdir(parents=True, exist_ok=True)
        positions = np.concatenate([p for p, _ in self._pending])
        m = sp.vstack([m for _, m in self._pending], format="csr")
        path = self.out_dir / f"shard-r{rank:04d}-{self._part:05d}.npz"
        np.savez(path, positions=positions, data=m.data, indices=m.indices, indptr=m.indptr, shape=m.shape)
        self._pending, self._part = [], self._part + 1


def merge_shards(shard_dir: str | Path, n_docs: int) -> sp.csr_matrix:
    """All shards → one CSR in corpus order; each position kept once; every position must be present."""
    parts, positions = [], []
    for path in sorted(Path(shard_dir).glob("shard-r*.npz")):
        z = np.load(path)
        parts.append(sp.csr_matrix((z["data"], z["indices"], z["indptr"]), shape=tuple(z["shape"])))
        positions.append(z["positions"])
    if not parts:
        raise RuntimeError(f"{shard_dir}: no shards were written")
    stacked = sp.vstack(parts, format="csr")
    pos = np.concatenate(positions)
    first = np.unique(pos, return_index=True)[1]  # rows sorted by position, first occurrence of each
    if pos[first].size != n_docs or not np.array_equal(pos[first], np.arange(n_docs)):
        raise RuntimeError(f"{shard_dir}: shards hold {pos[first].size} of {n_docs} documents")
    out = stacked[first]
    out.sort_indices()
    return out


def encode_corpus(
    encoder: SpladeEncoder,
    texts: Sequence[str],
    work_dir: str | Path,
    trainer_kwargs: dict[str, Any] | None = None,
    batch_size: int = 64,
    num_workers: int = 0,
    side: str = "doc",
    threads: int | None = None,
    shard_rows: int = 65536,
) -> sp.csr_matrix | None:
    """Encode `texts` with `trainer.predict` (any Lightning strategy); the merged CSR on rank 0, None elsewhere.

    trainer_kwargs: pl.Trainer arguments (accelerator, devices, strategy, ...); logging and checkpointing are off.
    """
    work_dir = Path(work_dir)
    shard_dir = work_dir / "shards"
    for old in shard_dir.glob("shard-r*.npz"):  # a previous run's shards would be merged in
        old.unlink()
    data = TextBatches(texts, encoder.tokenizer, encoder.max_length[side], batch_size, encoder.preprocess)
    loader = DataLoader(data, batch_size=None, shuffle=False, num_workers=num_workers,
                        persistent_workers=False)
    kwargs = {"accelerator": "cpu", "devices": 1, **(trainer_kwargs or {})}
    kwargs.update(logger=False, enable_checkpointing=False, enable_model_summary=False,
                  callbacks=[ShardWriter(shard_dir, shard_rows)])
    kwargs.setdefault("enable_progress_bar", False)
    trainer = pl.Trainer(**kwargs)
    trainer.predict(EncodeModule(encoder, side, threads), dataloaders=loader, return_predictions=False)
    if not trainer.is_global_zero:
        return None
    return merge_shards(shard_dir, len(texts))


_TRAINER_KEYS = ("accelerator", "devices", "strategy", "num_nodes", "precision")


def run(cfg: Any, state: dict[str, Any]) -> dict[str, Any]:
    if cfg.eval is None:
        raise VtlabError("stage=encode encodes the eval collection's corpus: choose an eval (e.g. eval=boolq)")
    opts = cfg.stage.get("encode") or {}
    encoder = state.get("encoder") or build_encoder(cfg, state)
    collection = instantiate(cfg.eval).collection
    doc_ids = list(collection.corpus)
    out = Path(cfg.paths.run_dir) / "index"
    trainer_kwargs = {k: cfg.trainer[k] for k in _TRAINER_KEYS if cfg.trainer.get(k) is not None}
    began = time.perf_counter()
    docs = encode_corpus(encoder, [collection.corpus[i] for i in doc_ids], out, trainer_kwargs,
                         batch_size=int(opts.get("batch_size", 64)), num_workers=int(opts.get("num_workers", 0)),
                         threads=opts.get("threads"))
    seconds = time.perf_counter() - began
    if docs is None:  # not rank 0 (ddp launched as subprocesses): rank 0 writes the index
        return state
    sp.save_npz(out / "docs.npz", docs, compressed=False)
    (out / "doc_ids.json").write_text(json.dumps(doc_ids))
    report = {"collection": collection.name, "n_docs": len(doc_ids), "seconds": round(seconds, 2),
              "docs_per_s": round(len(doc_ids) / seconds, 1), "doc_active_dims": round(docs.nnz / max(len(doc_ids), 1), 1),
              "processes": trainer_kwargs.get("devices", 1), "strategy": str(trainer_kwargs.get("strategy", "auto"))}
    write_json(out / "encode.json", report)
    print(f"encoded {len(doc_ids)} docs in {seconds:.1f}s → {out / 'docs.npz'}")
    return {**state, "encoder": encoder, "doc_vectors": docs, "doc_ids": doc_ids, "index_dir": out}
