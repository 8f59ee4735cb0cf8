"""Corpus encoding as Lightning `predict`, sharded over processes and merged into one CSR in corpus order.

The corpus is cut into length-sorted batches once (by character length, so no process has to tokenize the whole
corpus first; with `window`, sorted within consecutive windows of that many batches, so a document's batch depends on
its window alone and a slice of whole windows is batched as in the whole corpus: vtlab.index.shards); each batch is
one dataset item, tokenized in the DataLoader (in worker processes with `num_workers > 0`). `DealtBatches` deals the
batches to the processes in turn (rank r of W gets batches r, r+W, ...; with fewer batches than processes, some get
none), in place of Lightning's distributed sampler (the Trainer runs with use_distributed_sampler=False): no batch is
encoded twice, and a corpus of fewer batches than processes encodes too.

A `ShardWriter` spills each process's vectors to `shard-r<rank>-<part>.npz` in the spill directory, each file written
whole (temp file + rename) and carrying its record (the encoding's token, its rank and part), and keeps the processes
in step in the hooks Lightning runs on every process, one with no batch included (setup, teardown):
- setup: rank 0 removes an earlier encoding's spills and manifests, then a barrier (no process deletes another's
  work); rank 0's random token for this encoding is broadcast to all.
- teardown: each process flushes its last rows, writes `manifest-r<rank>.json` (the token, the number of processes,
  its spill files and their rows; a process with no batch lists none), then a barrier.
Only after that barrier does global rank 0 merge (`merge_spills`), checking what it reads: every process's manifest,
all with this encoding's token; every listed spill present, readable (vtlab.core.npz_files: arrays only, nothing
pickled), recording this encoding's token and the rank and part its name says, and holding the rows listed; no other
file in the directory (a second copy of a spill is refused, not skipped); every document position exactly once. The
token, drawn afresh for each encoding, stands for the model, the corpus and the batching: a spill of any other
encoding is refused, never merged. Anything else is one DataError naming the file and what was expected (spills are
scratch files, not a cache: nothing is rebuilt behind the caller's back). The merged matrix does not depend on the
number of processes: every batch is the same batch, whichever process encodes it.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
import scipy.sparse as sp
import torch
from pytorch_lightning.callbacks import BasePredictionWriter
from torch.utils.data import DataLoader, Dataset, Sampler

from vtlab.core.atomic import atomic_write_bytes, write_json
from vtlab.core.errors import DataError
from vtlab.core.json_files import JsonFileError, read_json
from vtlab.core.npz_files import csr_of, read_npz
from vtlab.models.encoder import SpladeEncoder, dense_to_csr

_SPILLS = ("shard-r*.npz", "manifest-r*.json", ".shard-r*", ".manifest-r*")  # with a killed writer's temp files


def spill_name(rank: int, part: int) -> str:
    return f"shard-r{rank:04d}-{part:05d}.npz"


def manifest_name(rank: int) -> str:
    return f"manifest-r{rank:04d}.json"


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


class DealtBatches(Sampler[int]):
    """Batch indices 0..n-1 dealt to `world` processes in turn: rank r gets r, r+world, r+2*world, ... (maybe none)."""

    def __init__(self, n: int, rank: int, world: int) -> None:
        self.indices = range(rank, n, world)

    def __iter__(self) -> Any:
        return iter(self.indices)

    def __len__(self) -> int:
        return len(self.indices)


class CorpusBatches(pl.LightningDataModule):
    """The predict DataLoader of a `TextBatches`, made once the process knows its rank: its `DealtBatches` share."""

    def __init__(self, data: TextBatches, num_workers: int = 0) -> None:
        super().__init__()
        self.data, self.num_workers = data, int(num_workers)
        self.allow_zero_length_dataloader_with_multiple_devices = True  # a process may get no batch

    def predict_dataloader(self) -> DataLoader:
        sampler = DealtBatches(len(self.data), self.trainer.global_rank, self.trainer.world_size)
        return DataLoader(self.data, batch_size=None, sampler=sampler, num_workers=self.num_workers)


class ShardWriter(BasePredictionWriter):
    """Spills each process's (positions, CSR rows) to `shard-r<rank>-<part>.npz` every `rows` rows, and writes its
    manifest at the end; clears the directory first and waits for all processes at both ends (module docstring)."""

    def __init__(self, out_dir: str | Path, rows: int = 65536) -> None:
        super().__init__(write_interval="batch")
        self.out_dir, self.rows = Path(out_dir), int(rows)
        self.token = uuid.uuid4().hex  # every process's is rank 0's once setup has run
        self._pending: list[tuple[np.ndarray, sp.csr_matrix]] = []
        self._parts: list[tuple[str, int]] = []

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if trainer.is_global_zero:
            for pattern in _SPILLS:
                for old in self.out_dir.glob(pattern):
                    old.unlink()
        trainer.strategy.barrier("vtlab: spills cleared")
        self.token = trainer.strategy.broadcast(self.token)
        self._pending, self._parts = [], []

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

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        rank = trainer.global_rank
        self._flush(rank)
        parts = [{"file": name, "rows": rows} for name, rows in self._parts]
        manifest = {"token": self.token, "rank": rank, "world_size": trainer.world_size, "parts": parts}
        write_json(self.out_dir / manifest_name(rank), manifest)
        trainer.strategy.barrier("vtlab: spills written")

    def _flush(self, rank: int) -> None:
        if not self._pending:
            return
        positions = np.concatenate([p for p, _ in self._pending])
        m = sp.vstack([m for _, m in self._pending], format="csr")
        name = spill_name(rank, len(self._parts))
        arrays = {"positions": positions, "data": m.data, "indices": m.indices, "indptr": m.indptr, "shape": m.shape}
        record = {"token": np.array(self.token), "rank": np.array(rank), "part": np.array(len(self._parts))}
        atomic_write_bytes(self.out_dir / name, lambda f: np.savez(f, **arrays, **record))
        self._pending = []
        self._parts.append((name, len(positions)))


def _read_manifest(shard_dir: Path, rank: int, token: str, world: int | None) -> dict[str, Any]:
    """Rank `rank`'s manifest, checked: this encoding's token, this rank, `world` processes (None: any), its spills
    named in order; with "parts" as (path, rows)."""
    path = shard_dir / manifest_name(rank)
    expected = f"expected rank {rank}'s manifest of the encoding with token {token}"
    if not path.exists():
        raise DataError(f"{path}: missing; {expected}")
    try:
        m = read_json(path)
        m["parts"] = [(shard_dir / str(p["file"]), int(p["rows"])) for p in m["parts"]]
        m["world_size"] = int(m["world_size"])
    except JsonFileError as e:  # names the file
        raise DataError(f"{e}; {expected}") from None
    except (ValueError, KeyError, TypeError) as e:
        raise DataError(f"{path}: unreadable ({type(e).__name__}: {e}); {expected}") from None
    if m.get("token") != token:
        raise DataError(f"{path}: written by another encoding (token {m.get('token')}); {expected}")
    if m.get("rank") != rank or (world is not None and m["world_size"] != world):
        raise DataError(f"{path}: says rank {m.get('rank')} of {m['world_size']}; {expected}, one of {world}")
    names = [p.name for p, _ in m["parts"]]
    if names != [spill_name(rank, i) for i in range(len(names))]:
        raise DataError(f"{path}: lists the spills {names}; expected {spill_name(rank, 0)}, ... numbered in order")
    return m


def _read_manifests(shard_dir: Path, token: str) -> tuple[int, list[tuple[Path, int]]]:
    """Every process's manifest (rank 0's says how many processes): that number, and all their spills as
    (path, rows), rank by rank."""
    first = _read_manifest(shard_dir, 0, token, None)
    world = first["world_size"]
    manifests = [first, *(_read_manifest(shard_dir, r, token, world) for r in range(1, world))]
    return world, [part for m in manifests for part in m["parts"]]


def _refuse_strays(shard_dir: Path, listed: set[str]) -> None:
    """DataError naming the first file of `shard_dir` the manifests do not list (temp files, hidden, are skipped)."""
    for path in sorted(shard_dir.iterdir()):
        if not path.name.startswith(".") and path.name not in listed:
            raise DataError(
                f"{path}: not listed by this encoding's manifests (expected only manifest-r*.json and the "
                f"{sum(n.startswith('shard-r') for n in listed)} spills they list): a second copy of a spill, "
                "or another encoding's file; remove it"
            )


def _read_spill(path: Path, rows: int, token: str) -> tuple[np.ndarray, sp.csr_matrix]:
    """A spill's (positions, CSR rows), checked to be this encoding's spill of that name holding the `rows` documents
    its manifest lists."""
    holds = f"the positions and CSR rows of {rows} documents, as its manifest lists"

    def read(z: np.lib.npyio.NpzFile) -> tuple[tuple[str, str], np.ndarray, sp.csr_matrix]:
        record = (str(z["token"]), spill_name(int(z["rank"]), int(z["part"])))
        return record, z["positions"], csr_of(z)

    (written, name), positions, m = read_npz(path, read, holds)
    if (written, name) != (token, path.name):
        raise DataError(
            f"{path}: holds {name} of the encoding with token {written}; expected this encoding's ({token}) "
            f"{path.name}: another encoding's spill, or a copy of another part"
        )
    if positions.shape != (rows,) or m.shape[0] != rows:
        raise DataError(f"{path}: holds {positions.size} positions and {m.shape[0]} rows; expected {holds}")
    return positions, m


def _corpus_order(shard_dir: Path, positions: np.ndarray, n_docs: int) -> np.ndarray:
    """The row order that puts `positions` in corpus order; DataError unless they are 0..n_docs-1, each once."""
    order = np.argsort(positions, kind="stable")
    if np.array_equal(positions[order], np.arange(n_docs)):
        return order
    found, counts = np.unique(positions, return_counts=True)
    missing = np.setdiff1d(np.arange(n_docs), found)
    raise DataError(
        f"{shard_dir}: the spills hold {positions.size} rows for {n_docs} documents ({missing.size} positions "
        f"missing, {int((counts > 1).sum())} repeated, {int((found >= n_docs).sum() + (found < 0).sum())} out of "
        "range); expected every document position exactly once"
    )


def merge_spills(shard_dir: str | Path, n_docs: int, token: str) -> sp.csr_matrix:
    """The spills of the encoding `token` in `shard_dir` → one CSR in corpus order, checked (module docstring)."""
    shard_dir = Path(shard_dir)
    world, parts = _read_manifests(shard_dir, token)
    _refuse_strays(shard_dir, {manifest_name(r) for r in range(world)} | {path.name for path, _ in parts})
    spills = [_read_spill(path, rows, token) for path, rows in parts]
    if not spills:
        raise DataError(f"{shard_dir}: no spill files were written; expected the rows of {n_docs} documents")
    width = {m.shape[1] for _, m in spills}
    if len(width) > 1:
        raise DataError(f"{shard_dir}: spills of {sorted(width)} columns; expected one vocabulary size")
    order = _corpus_order(shard_dir, np.concatenate([p for p, _ in spills]), n_docs)
    out = sp.vstack([m for _, m in spills], format="csr")[order]
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

    trainer_kwargs: pl.Trainer arguments (accelerator, devices, strategy, ...; its callbacks run before the spill
    writer's); logging, checkpointing and Lightning's distributed sampler are off.
    window: length-sort within windows of this many batches (None: the whole corpus; see the module docstring).
    Spills go to <work_dir>/shards/.
    """
    shard_dir = Path(work_dir) / "shards"
    data = TextBatches(texts, encoder.tokenizer, encoder.max_length[side], batch_size, encoder.preprocess, window)
    writer = ShardWriter(shard_dir, shard_rows)
    kwargs = {"accelerator": "cpu", "devices": 1, **(trainer_kwargs or {})}
    kwargs.update(
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        use_distributed_sampler=False,  # DealtBatches deals the batches
        callbacks=[*(kwargs.get("callbacks") or []), writer],
    )
    kwargs.setdefault("enable_progress_bar", False)
    trainer = pl.Trainer(**kwargs)
    module = EncodeModule(encoder, side, threads)
    trainer.predict(module, datamodule=CorpusBatches(data, num_workers), return_predictions=False)
    if not trainer.is_global_zero:
        return None
    return merge_spills(shard_dir, len(texts), writer.token)
