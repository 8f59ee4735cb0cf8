"""vtlab's C kernels (exact top-k: vtlab/index/taat.c; SPLADE max-pooling: vtlab/runtime/maxpool.c): each built once
with the system C compiler and loaded through ctypes, which releases the GIL during a call.

A shared library runs code as soon as it is loaded, so only one this user built is ever loaded: the library lives in
$VTLAB_CACHE/native/uid<UID>/ (mode 0700, owned by the user; a shared cache does not let others plant one), under a
hash of the source, flags and compiler, with the sha256 of its bytes recorded at build time next to it and checked
before ctypes opens it. A missing or wrong hash (a planted, replaced or truncated file — a truncated library would
kill the process with SIGBUS) means rebuild, with one warning naming the file. Writes are atomic, so concurrent first
uses do not race. Without a compiler, a trustworthy directory, or with VTLAB_NATIVE=0, `load()` returns None and the
caller falls back to its numpy/torch path (same results, slower): nothing in vtlab requires a kernel.
"""

from __future__ import annotations

import ctypes
import logging
import os
import shutil
import stat
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from vtlab.core.assets import cache_dir
from vtlab.core.atomic import atomic_path, stable_hash
from vtlab.core.integrity import sha256_file

log = logging.getLogger(__name__)


class UntrustedDir(OSError):
    """The kernel directory is not one only this user can write: nothing in it is loaded."""


def compiler() -> str | None:
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


@dataclass(frozen=True)
class Kernel:
    """One C source built into `<stem>-<hash>.so`. `what` names it in warnings ("exact-search kernel"), `fallback`
    says what runs without it ("exact search uses scipy")."""

    source: Path
    cflags: tuple[str, ...]
    what: str
    fallback: str

    def _build(self, cc: str, lib_path: Path) -> None:
        """Compile into a temp file in the private dir, record its sha256, rename both into place (the hash first: a
        library without a matching hash is never loaded). Errors stay OSError / SubprocessError (never DiskError):
        load() falls back on them."""
        # mode=None: the library keeps the mode the compiler gave it
        with atomic_path(lib_path, suffix=".so", mode=None, disk_errors=False) as tmp:
            subprocess.run(
                [cc, *self.cflags, "-o", str(tmp), str(self.source)],
                check=True,
                capture_output=True,
                text=True,
                timeout=120,
            )
            with atomic_path(lib_path.with_name(lib_path.name + ".sha256"), disk_errors=False) as digest_tmp:
                digest_tmp.write_text(sha256_file(tmp) + "\n")

    def load(self) -> ctypes.CDLL | None:
        """The library, or None (no compiler, compile error, untrusted directory, or VTLAB_NATIVE=0); built and
        verified once per process."""
        return _load(self)


@cache
def _load(kernel: Kernel) -> ctypes.CDLL | None:
    if os.environ.get("VTLAB_NATIVE", "1") == "0" or not kernel.source.is_file():
        return None
    cc = compiler()
    if cc is None:
        log.info("no C compiler found: %s", kernel.fallback)
        return None
    try:
        version = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout
        key = stable_hash(kernel.source.read_bytes() + " ".join(kernel.cflags).encode() + version.encode(), length=16)
        lib_path = private_dir() / f"{kernel.source.stem}-{key}.so"
        problem = _verified(lib_path) if lib_path.exists() or lib_path.is_symlink() else "absent"
        if problem is not None:
            if problem != "absent":
                log.warning("%s %s is not loaded (%s): rebuilding it", kernel.what, lib_path, problem)
            kernel._build(cc, lib_path)
            if (problem := _verified(lib_path)) is not None:
                raise UntrustedDir(f"{lib_path}: {problem} right after building it")
        return ctypes.CDLL(str(lib_path))
    except (OSError, subprocess.SubprocessError) as e:
        detail = " ".join(str(getattr(e, "stderr", "") or e).split())[:300]
        log.warning("could not build or load the %s (%s): %s", kernel.what, detail, kernel.fallback)
        return None
