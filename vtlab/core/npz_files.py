"""Reading an .npz that vtlab wrote earlier (an index's or a shard's vectors, a process's spill): arrays only, never
objects (np.load with allow_pickle=False: nothing read runs code), only from a regular file, and every way it can be
wrong (missing, truncated, not an npz archive, an array absent, damaged or inconsistent) is one DataError naming the
file and what it should hold."""

from __future__ import annotations

import os
import zipfile
import zlib
from collections.abc import Callable
from typing import TypeVar

import numpy as np
import scipy.sparse as sp

from vtlab.core.errors import DataError
from vtlab.core.json_files import open_regular

T = TypeVar("T")
# what np.load and reading an archive's arrays raise for a file that is not what it should be
_UNREADABLE = (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile, zlib.error)


def read_npz(path: str | os.PathLike[str], read: Callable[[np.lib.npyio.NpzFile], T], expected: str) -> T:
    """`read(archive)` of the .npz at `path`, inside the open file; else a DataError naming the file and `expected`."""
    try:
        with open_regular(path) as f:
            z = np.load(f, allow_pickle=False)
            if not isinstance(z, np.lib.npyio.NpzFile):
                raise DataError(f"{path}: a single .npy array, not an npz archive; expected {expected}")
            with z:
                return read(z)
    except FileNotFoundError:
        raise DataError(f"{path}: missing; expected {expected}") from None
    except _UNREADABLE as e:
        what = " ".join(str(e).split())[:200]
        raise DataError(f"{path}: unreadable ({type(e).__name__}: {what}); expected {expected}") from None


def csr_of(z: np.lib.npyio.NpzFile) -> sp.csr_matrix:
    """The CSR matrix an archive holds in scipy's npz layout (save_npz's arrays), checked by scipy's constructor."""
    return sp.csr_matrix((z["data"], z["indices"], z["indptr"]), shape=tuple(int(s) for s in z["shape"]))
