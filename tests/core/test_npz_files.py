"""An .npz read from disk (vtlab.core.npz_files.read_npz): every way it can be wrong is one DataError naming the file
and what it should hold, and an archive holding objects is refused, never unpickled."""

from __future__ import annotations

import os

import numpy as np
import pytest
import scipy.sparse as sp

from vtlab.core.errors import DataError
from vtlab.core.npz_files import csr_of, read_npz

EXPECTED = "the CSR rows of 3 documents"


def refused(path) -> str:
    with pytest.raises(DataError) as exc:
        read_npz(path, csr_of, EXPECTED)
    assert "\n" not in str(exc.value) and str(exc.value).endswith(f"; expected {EXPECTED}")
    return str(exc.value)


def test_a_csr_archive_reads_back(tmp_path):
    m = sp.random(3, 5, density=0.4, format="csr", dtype=np.float32, random_state=0)
    sp.save_npz(tmp_path / "m.npz", m, compressed=False)
    assert (read_npz(tmp_path / "m.npz", csr_of, EXPECTED) != m).nnz == 0


def test_every_wrong_file_is_one_line(tmp_path):
    path = tmp_path / "m.npz"
    assert refused(path) == f"{path}: missing; expected {EXPECTED}"
    path.write_bytes(b"")
    assert refused(path).startswith(f"{path}: unreadable (EOFError: ")
    np.save(tmp_path / "a.npy", np.arange(3))
    os.replace(tmp_path / "a.npy", path)
    assert refused(path) == f"{path}: a single .npy array, not an npz archive; expected {EXPECTED}"
    np.savez(path, data=np.array([{"x": 1}], dtype=object), indices=[0], indptr=[0, 1], shape=[1, 1])
    assert "Object arrays cannot be loaded when allow_pickle=False" in refused(path)  # never unpickled
    np.savez(path, data=np.ones(2, np.float32), indices=[0, 1], indptr=[0, 3], shape=[1, 2])
    assert refused(path).startswith(f"{path}: unreadable (ValueError: ")  # inconsistent: scipy's own check
    np.savez(path, data=np.ones(1, np.float32))
    assert refused(path).startswith(f"{path}: unreadable (KeyError: ")
    os.mkfifo(tmp_path / "pipe")
    assert refused(tmp_path / "pipe").startswith(f"{tmp_path / 'pipe'}: unreadable (OSError: ")  # not waited on
