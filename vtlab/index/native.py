"""The compiled exact top-k kernel (taat.c), built and loaded through vtlab.runtime.native (a library only this user
built, its sha256 checked before it is loaded; scipy without it)."""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from vtlab.runtime.native import Kernel, UntrustedDir, private_dir

__all__ = ["Hit", "UntrustedDir", "load", "private_dir", "taat_topk"]

# -ffp-contract=off: no FMA, so each product is rounded before the add, as in scipy's SpGEMM (bitwise-equal scores)
KERNEL = Kernel(
    Path(__file__).with_name("taat.c"),
    ("-O3", "-shared", "-fPIC", "-ffp-contract=off", "-fno-math-errno"),
    what="exact-search kernel",
    fallback="exact search uses scipy",
)


class Hit(ctypes.Structure):
    _fields_ = [("s", ctypes.c_float), ("d", ctypes.c_int64)]


def load() -> ctypes.CDLL | None:
    """The kernel library with its signature set, or None (vtlab.runtime.native.Kernel.load): the index then uses
    scipy."""
    lib = KERNEL.load()
    if lib is not None:
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
    return int(
        lib.vt_taat_topk(
            _ptr(p_indptr),
            _ptr(p_docs),
            _ptr(p_w),
            n_docs,
            _ptr(q_indptr),
            _ptr(q_terms),
            _ptr(q_w),
            q_begin,
            q_end,
            k,
            acc.size,
            _ptr(acc),
            _ptr(cursor),
            ctypes.cast(heap, ctypes.c_void_p),
            _ptr(scores[q_begin:]),
            _ptr(indices[q_begin:]),
        )
    )
