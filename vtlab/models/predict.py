"""Corpus encoding as Lightning `predict`, sharded over processes and merged into one CSR in corpus order.

The corpus is cut into length-sorted batches once (by character length, so no process has to tokenize the whole
corpus first; with `window`, sorted within consecutive windows of that many batches, so a document's batch depends on
its window alone and a slice of whole windows is batched as in the whole corpus: vtlab.index.shards); each batch is
one dataset item, tokenized in the DataLoader (in worker processes with `num_workers > 0`). Lightning's distributed
sampler deals the batches to the processes, a `BasePredictionWriter` spills each process's vectors to
`shard-r<rank>-<part>.npz` files, and rank 0 merges them by document position (a batch the sampler repeated to even
out the shards is kept once). The merged matrix does not depend on the number of
processes: every batch is the same batch, whichever process encodes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
import scipy.sparse as sp
import torch
from pytorch_lightning.callbacks import BasePredictionWriter
from torch.utils.data import DataLoader, Dataset

from vtlab.models.encoder import SpladeEncoder, dense_to_csr


class TextBatches(Dataset):
    """Item i = batch i of texts (longest first, by characters; within windows of `window` batches, None: all),
    tokenized on access."""

    def __init__(
        self,
        texts: Sequence[str],
        tokenizer: Any,
        max_length: int,
        batch_size: int,
        preprocess: Any = None,
        window: int | None = None,
    ) -> None:
        self.texts = [preprocess(t) for t in texts] if preprocess is not None else list(texts)
        self.tokenizer, self.max_length = tokenizer, int(max_length)
        lengths = np.fromiter(map(len, self.texts), dtype=np.int64, count=len(self.texts))
        span = len(lengths) if window is None else window * batch_size
        self.batches = []
        for w in range(0, len(lengths), max(span, 1)):
            order = w + np.argsort(-lengths[w : w + span], kind="stable")
            self.batches += [order[s : s + batch_size] for s in range(0, len(order), batch_size)]

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, i: int) -> dict[str, Any]:
        idx = self.batches[i]
        enc = self.tokenizer(
            [self.texts[j] for j in idx], padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
        )
        return {
            "positions": torch.from_numpy(idx),
            "input_ids": enc["input_ids"],
            "attention_mask": enc["attention_mask"],
        }


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
        with self.encoder.computing(self.device):  # the encoder's resolved precision, as encode() runs it
            w = self.encoder(batch["input_ids"], batch["attention_mask"], side=self.side)
        return batch["positions"].cpu().numpy(), dense_to_csr(w)


class ShardWriter(BasePredictionWriter):
    """Spills each process's (positions, CSR) to `shard-r<rank>-<part>.npz` every `rows` rows."""

    def __init__(self, out_dir: str | Path, rows: int = 65536) -> None:
        super().__init__(write_interval="batch")
        self.out_dir, self.rows = Path(out_dir), int(rows)
        self._pending: list[tuple[np.ndarray, sp.csr_matrix]] = []
        self._part = 0

    def write_on_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        prediction: Any,
        batch_indices: Sequence[int] | None,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
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
    window: int | None = None,
) -> sp.csr_matrix | None:
    """Encode `texts` with `trainer.predict` (any Lightning strategy); the merged CSR on rank 0, None elsewhere.

    trainer_kwargs: pl.Trainer arguments (accelerator, devices, strategy, ...); logging and checkpointing are off.
    window: length-sort within windows of this many batches (None: the whole corpus; see the module docstring).
    """
    work_dir = Path(work_dir)
    shard_dir = work_dir / "shards"
    for old in shard_dir.glob("shard-r*.npz"):  # a previous run's shards would be merged in
        old.unlink()
    data = TextBatches(texts, encoder.tokenizer, encoder.max_length[side], batch_size, encoder.preprocess, window)
    loader = DataLoader(data, batch_size=None, shuffle=False, num_workers=num_workers, persistent_workers=False)
    kwargs = {"accelerator": "cpu", "devices": 1, **(trainer_kwargs or {})}
    kwargs.update(
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        callbacks=[ShardWriter(shard_dir, shard_rows)],
    )
    kwargs.setdefault("enable_progress_bar", False)
    trainer = pl.Trainer(**kwargs)
    trainer.predict(EncodeModule(encoder, side, threads), dataloaders=loader, return_predictions=False)
    if not trainer.is_global_zero:
        return None
    return merge_shards(shard_dir, len(texts))
