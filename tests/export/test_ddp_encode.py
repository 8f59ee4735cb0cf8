"""A corpus encoded by several processes (vtlab.models.predict): the batches are dealt to the ranks in turn, so a
corpus of fewer batches than processes encodes; rank 0 merges only after every rank's spills and manifest are
written, and refuses, in one line naming the file, a missing or damaged spill, another encoding's manifest or spill,
a spill copied over another part, or a file no manifest lists. The merged index is bitwise the one-process index."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import pytorch_lightning as pl
import scipy.sparse as sp
import torch
from ddp_encode_runs import RUNS, SETTINGS, TEXTS, tiny_encoder
from helpers import ROOT, TESTS, child_env
from torch.utils.data import DataLoader

from vtlab.core.errors import DataError
from vtlab.models.predict import DealtBatches, ShardWriter, encode_corpus, merge_spills

ROWS = sp.random(10, 16, density=0.3, format="csr", dtype=np.float32, random_state=0)
ROWS.sort_indices()
BATCHES = ([5, 1, 7], [0, 9], [3, 2, 8], [6, 4])  # spills of 4 rows or more: [5, 1, 7, 0, 9], [3, 2, 8, 6, 4]


def assert_same_csr(a: sp.csr_matrix, b: sp.csr_matrix) -> None:
    assert a.shape == b.shape
    np.testing.assert_array_equal(a.indptr, b.indptr)
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_array_equal(a.data, b.data)


class Rows(pl.LightningModule):
    """predict_step: a batch of document positions → (positions, those rows of ROWS), as EncodeModule returns them."""

    def predict_step(self, batch: torch.Tensor, batch_idx: int) -> tuple[np.ndarray, sp.csr_matrix]:
        return batch.numpy(), ROWS[batch.numpy()]


def write_spills(shard_dir: Path, batches=BATCHES) -> str:
    """One process's spills and manifest, written by the ShardWriter of a real predict run; the encoding's token."""
    writer = ShardWriter(shard_dir, rows=4)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[writer],
    )
    loader = DataLoader([torch.tensor(b) for b in batches], batch_size=None)
    trainer.predict(Rows(), loader, return_predictions=False)
    return writer.token


def refused(shard_dir: Path, token: str, n_docs: int = 10) -> str:
    with pytest.raises(DataError) as exc:
        merge_spills(shard_dir, n_docs, token)
    assert "\n" not in str(exc.value)
    return str(exc.value)


def test_batches_are_dealt_to_the_ranks_in_turn():
    assert [list(DealtBatches(7, r, 3)) for r in range(3)] == [[0, 3, 6], [1, 4], [2, 5]]
    assert [len(DealtBatches(1, r, 2)) for r in range(2)] == [1, 0]  # fewer batches than ranks: rank 1 gets none


def test_the_merge_puts_the_spills_in_corpus_order(tmp_path):
    token = write_spills(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "manifest-r0000.json",
        "shard-r0000-00000.npz",
        "shard-r0000-00001.npz",
    ]
    manifest = json.loads((tmp_path / "manifest-r0000.json").read_text())
    assert manifest == {
        "token": token,
        "rank": 0,
        "world_size": 1,
        "parts": [{"file": "shard-r0000-00000.npz", "rows": 5}, {"file": "shard-r0000-00001.npz", "rows": 5}],
    }
    assert_same_csr(merge_spills(tmp_path, 10, token), ROWS)
    again = write_spills(tmp_path, BATCHES[:2])  # a new encoding clears the old one's files first
    assert again != token and len(list(tmp_path.glob("shard-r*"))) == 1
    assert "written by another encoding" in refused(tmp_path, token)


def test_a_missing_or_damaged_spill_is_one_line_naming_it(tmp_path):
    token = write_spills(tmp_path)
    part = tmp_path / "shard-r0000-00001.npz"
    blob = part.read_bytes()
    part.write_bytes(blob[: len(blob) // 2])
    assert refused(tmp_path, token).startswith(
        f"{part}: unreadable (BadZipFile: File is not a zip file); expected the positions and CSR rows of 5 documents"
    )
    part.unlink()
    assert refused(tmp_path, token) == (
        f"{part}: missing; expected the positions and CSR rows of 5 documents, as its manifest lists"
    )


def test_a_spill_records_its_encoding_and_part(tmp_path):
    token = write_spills(tmp_path / "ours")
    other = write_spills(tmp_path / "theirs")
    part = tmp_path / "ours" / "shard-r0000-00001.npz"
    shutil.copy(tmp_path / "theirs" / part.name, part)  # another encoding's spill of the same name and rows
    assert refused(tmp_path / "ours", token) == (
        f"{part}: holds shard-r0000-00001.npz of the encoding with token {other}; expected this encoding's ({token}) "
        "shard-r0000-00001.npz: another encoding's spill, or a copy of another part"
    )
    shutil.copy(tmp_path / "ours" / "shard-r0000-00000.npz", part)  # a second copy of part 0 as part 1
    assert refused(tmp_path / "ours", token).startswith(
        f"{part}: holds shard-r0000-00000.npz of the encoding with token {token}; expected this encoding's"
    )


def test_another_encodings_or_a_missing_manifest_is_refused(tmp_path):
    token = write_spills(tmp_path)
    manifest = tmp_path / "manifest-r0000.json"
    assert refused(tmp_path, "f" * 32) == (
        f"{manifest}: written by another encoding (token {token}); expected rank 0's manifest of the encoding with "
        f"token {'f' * 32}"
    )
    meta = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**meta, "world_size": 2}))  # rank 1's manifest never written
    assert refused(tmp_path, token).startswith(f"{tmp_path / 'manifest-r0001.json'}: missing; expected rank 1's")
    manifest.write_text("{")
    assert refused(tmp_path, token).startswith(f"{manifest}: invalid JSON (")


@pytest.mark.parametrize("name", ["shard-r0000-00000 (copy).npz", "shard-r0001-00000.npz", "manifest-r0001.json"])
def test_a_file_no_manifest_lists_is_refused_not_skipped(tmp_path, name):
    token = write_spills(tmp_path)
    src = "manifest-r0000.json" if name.startswith("manifest") else "shard-r0000-00000.npz"
    shutil.copy(tmp_path / src, tmp_path / name)
    assert refused(tmp_path, token).startswith(f"{tmp_path / name}: not listed by this encoding's manifests")


def test_every_document_exactly_once(tmp_path):
    token = write_spills(tmp_path)
    assert refused(tmp_path, token, n_docs=11).endswith(
        "hold 10 rows for 11 documents (1 positions missing, 0 repeated, 0 out of range); "
        "expected every document position exactly once"
    )
    token = write_spills(tmp_path, [*BATCHES, [3]])
    assert "(0 positions missing, 1 repeated, 0 out of range)" in refused(tmp_path, token)


def index_rows(path: Path) -> sp.csr_matrix:
    return sp.load_npz(path).tocsr()


# the command line's two-process encode of a corpus smaller than a batch per rank, equal to one process's index:
# `make gpu-check-cpu`'s encode step (tests/runs/test_gpu_check.py)


@pytest.mark.cli
@pytest.mark.slow
def test_five_ddp_encodes_in_a_row_with_a_slow_rank_equal_one_process(tmp_path):
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--standalone"),
            str(ROOT / "tests" / "ddp_encode_runs.py"),
            str(tmp_path / "ddp"),
        ],
        cwd=ROOT,
        env=child_env(TESTS),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    one = encode_corpus(tiny_encoder(), TEXTS, tmp_path / "one", **SETTINGS)
    assert one.shape[0] == len(TEXTS)
    for i in range(RUNS):
        assert_same_csr(index_rows(tmp_path / "ddp" / f"run-{i}.npz"), one)
    manifests = sorted((tmp_path / "ddp" / "work" / "shards").glob("manifest-r*.json"))
    assert [json.loads(m.read_text())["parts"] for m in manifests] == [
        [{"file": "shard-r0000-00000.npz", "rows": 8}, {"file": "shard-r0000-00001.npz", "rows": 4}],
        [{"file": "shard-r0001-00000.npz", "rows": 8}, {"file": "shard-r0001-00001.npz", "rows": 1}],
    ]
