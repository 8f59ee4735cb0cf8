"""The compiled exact top-k kernel (taat.c): built once with the system C compiler, loaded through ctypes.

The library is cached in $VTLAB_CACHE/native/ under a hash of the source, flags and compiler, written atomically so
concurrent first uses do not race. Without a working compiler `load()` returns None and the index falls back to
scipy (same results, slower): nothing in vtlab requires the kernel.
"""
from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("taat.c")
# -ffp-contract=off: no FMA, so each product is rounded before the add, as in scipy's SpGEMM (bitwise-equal scores)
CFLAGS = ("-O3", "-shared", "-fPIC", "-ffp-contract=off", "-fno-math-errno")


class Hit(ctypes.Structure):
    _fields_ = [("s", ctypes.c_float), ("d", ctypes.c_int64)]


def _compiler() -> str | None:
    for cc in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if cc and shutil.which(cc):
            return cc
    return None


@lru_cache(maxsize=1)
def load() -> ctypes.CDLL | None:
    """The kernel library, or None (no compiler, compile error, or VTLAB_NATIVE=0)."""
    if os.environ.get("VTLAB_NATIVE", "1") == "0" or not SOURCE.is_file():
        return None
    cc = _compiler()
    if cc is None:
        log.info("no C compiler found: exact search uses scipy")
        return None
    from vtlab.assets import cache_dir

    try:
        version = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout
        key = hashlib.sha1(SOURCE.read_bytes() + " ".join(CFLAGS).encode() + version.encode()).hexdigest()[:16]
        lib_path = cache_dir("native") / f"taat-{key}.so"
        if not lib_path.is_file():
            fd, tmp = tempfile.mkstemp(dir=lib_path.parent, suffix=".so")
            os.close(fd)
            try:
                subprocess.run([cc, *CFLAGS, "-o", tmp, str(SOURCE)], check=True, capture_output=True, text=True,
                               timeout=120)
                os.replace(tmp, lib_path)
            finally:
                Path(tmp).unlink(missing_ok=True)
        lib = ctypes.CDLL(str(lib_path))
    except (OSError, subprocess.SubprocessError) as e:
        detail = getattr(e, "stderr", "") or e
        log.warning("could not build the exact-search kernel (%s): exact search uses scipy", detail)
        return None
    p = ctypes.c_void_p
    i64 = ctypes.c_int64
    lib.vt_taat_topk.argtypes = [p, p, p, i64, p, p, p, i64, i64, i64, i64, p, p, p, p, p]
    lib.vt_taat_topk.restype = i64
    return lib


def _ptr(a: np.ndarray) -> ctypes.c_void_p:
    return ctypes.c_void_p(a.ctypes.data)


def taat_topk(
    lib: ctypes.CDLL,
    postings: tuple[np.ndarray, np.ndarray, np.ndarray],
    n_docs: int,
    queries: tuple[np.ndarray, np.ndarray, np.ndarray],
    q_begin: int,
    q_end: int,
    k: int,
    scores: np.ndarray,
    indices: np.ndarray,
    block: int,
) -> int:
    """Top-k of queries [q_begin, q_end) into scores/indices rows (C-contiguous float32 / int64 [Q, k]).

    postings / queries: (indptr int64, indices int32, data float32) CSR arrays. Returns the postings scored.
    """
    p_indptr, p_docs, p_w = postings
    q_indptr, q_terms, q_w = queries
    longest = int(np.diff(q_indptr[q_begin : q_end + 1]).max(initial=0))
    acc = np.zeros(min(block, max(n_docs, 1)), dtype=np.float32)
    cursor = np.empty(max(longest, 1), dtype=np.int64)
    heap = (Hit * max(k, 1))()
    return int(lib.vt_taat_topk(
        _ptr(p_indptr), _ptr(p_docs), _ptr(p_w), n_docs, _ptr(q_indptr), _ptr(q_terms), _ptr(q_w), q_begin, q_end,
        k, acc.size, _ptr(acc), _ptr(cursor), ctypes.cast(heap, ctypes.c_void_p), _ptr(scores[q_begin:]),
        _ptr(indices[q_begin:]),
    ))
