"""The compiled exact top-k kernel (taat.c): built once with the system C compiler, loaded through ctypes.

A shared library runs code as soon as it is loaded, so only one this user built is ever loaded: the library lives in
$VTLAB_CACHE/native/uid<UID>/ (mode 0700, owned by the user; a shared cache does not let others plant one), under a
hash of the source, flags and compiler, with the sha256 of its bytes recorded at build time next to it and checked
before ctypes opens it. A missing or wrong hash (a planted, replaced or truncated file — a truncated library would
kill the process with SIGBUS) means rebuild, with one warning naming the file. Writes are atomic, so concurrent first
uses do not race. Without a compiler or a trustworthy directory `load()` returns None and the index falls back to
scipy (same results, slower): nothing in vtlab requires the kernel.
"""

from __future__ import annotations

import ctypes
import logging
import os
import shutil
import stat
import subprocess
from functools import lru_cache
from pathlib import Path

import numpy as np

from vtlab.assets import cache_dir
from vtlab.atomic import atomic_path, stable_hash
from vtlab.integrity import sha256_file

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("taat.c")
# -ffp-contract=off: no FMA, so each product is rounded before the add, as in scipy's SpGEMM (bitwise-equal scores)
CFLAGS = ("-O3", "-shared", "-fPIC", "-ffp-contract=off", "-fno-math-errno")


class Hit(ctypes.Structure):
    _fields_ = [("s", ctypes.c_float), ("d", ctypes.c_int64)]


class UntrustedDir(OSError):
    """The kernel directory is not one only this user can write: nothing in it is loaded."""


def _compiler() -> str | None:
    for cc in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if cc and shutil.which(cc):
            return cc
    return None


def private_dir() -> Path:
    """$VTLAB_CACHE/native/uid<UID>: created 0700; UntrustedDir unless it is a real directory owned by this user that
    no one else can write. A directory that others could write is emptied and closed again (what they could have
    put there is never loaded)."""
    uid = os.getuid()
    path = cache_dir("native") / f"uid{uid}"
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid:
        raise UntrustedDir(f"{path} is not a directory owned by uid {uid} (owner uid {st.st_uid})")
    if stat.S_IMODE(st.st_mode) & 0o077:
        log.warning(
            "%s was open to other users (mode %o): its contents are discarded and it is made 0700",
            path,
            stat.S_IMODE(st.st_mode),
        )
        for child in path.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
        os.chmod(path, 0o700)
    return path


def _verified(lib_path: Path) -> str | None:
    """None when lib_path is this user's regular file whose bytes match the sha256 recorded at build time; else why
    not (for the warning)."""
    digest_path = lib_path.with_name(lib_path.name + ".sha256")
    try:
        st = os.lstat(lib_path)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
            return "not a regular file owned by this user"
        recorded = digest_path.read_text().strip()
    except FileNotFoundError as e:
        return f"{Path(e.filename).name} is missing"
    if sha256_file(lib_path) != recorded:
        return f"its sha256 differs from the one recorded at build time in {digest_path.name}"
    return None


def _build(cc: str, lib_path: Path) -> None:
    """Compile into a temp file in the private dir, record its sha256, rename both into place (the hash first: a
    library without a matching hash is never loaded). Errors stay OSError / SubprocessError (never DiskError): load()
    falls back to scipy on them."""
    # mode=None: the library keeps the mode the compiler gave it
    with atomic_path(lib_path, suffix=".so", mode=None, disk_errors=False) as tmp:
        subprocess.run(
            [cc, *CFLAGS, "-o", str(tmp), str(SOURCE)], check=True, capture_output=True, text=True, timeout=120
        )
        with atomic_path(lib_path.with_name(lib_path.name + ".sha256"), disk_errors=False) as digest_tmp:
            digest_tmp.write_text(sha256_file(tmp) + "\n")


@lru_cache(maxsize=1)
def load() -> ctypes.CDLL | None:
    """The kernel library, or None (no compiler, compile error, untrusted directory, or VTLAB_NATIVE=0)."""
    if os.environ.get("VTLAB_NATIVE", "1") == "0" or not SOURCE.is_file():
        return None
    cc = _compiler()
    if cc is None:
        log.info("no C compiler found: exact search uses scipy")
        return None
    try:
        version = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout
        key = stable_hash(SOURCE.read_bytes() + " ".join(CFLAGS).encode() + version.encode(), length=16)
        lib_path = private_dir() / f"taat-{key}.so"
        problem = _verified(lib_path) if lib_path.exists() or lib_path.is_symlink() else "absent"
        if problem is not None:
            if problem != "absent":
                log.warning("exact-search kernel %s is not loaded (%s): rebuilding it", lib_path, problem)
            _build(cc, lib_path)
            if (problem := _verified(lib_path)) is not None:
                raise UntrustedDir(f"{lib_path}: {problem} right after building it")
        lib = ctypes.CDLL(str(lib_path))
    except (OSError, subprocess.SubprocessError) as e:
        detail = " ".join(str(getattr(e, "stderr", "") or e).split())[:300]
        log.warning("could not build or load the exact-search kernel (%s): exact search uses scipy", detail)
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
