"""Atomic file and directory writes: readers (and a crash) see the old version or the new one, never half of one.

A write that fails on a full, over-quota or read-only disk raises vtlab.errors.DiskError naming the file (one line
at the entry point, not a traceback); on every failure path the temp file or directory is removed.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any, BinaryIO, TextIO

import numpy as np

from vtlab.errors import disk_error


def stable_hash(blob: str | bytes, length: int = 16) -> str:
    """The cache-key digest: sha1 hex of `blob`, cut to `length` characters (not a security hash: a name)."""
    return hashlib.sha1(blob.encode() if isinstance(blob, str) else blob).hexdigest()[:length]


def json_hash(obj: Any, length: int = 16) -> str:
    """`stable_hash` of `obj` as sorted-key JSON (values JSON cannot encode are written with str())."""
    return stable_hash(json.dumps(obj, sort_keys=True, default=str), length)


def _atomic_file(path: str | os.PathLike[str], write: Callable[[IO[Any]], None], **open_kwargs: Any) -> Path:
    path = Path(path)
    tmp: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, **open_kwargs) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp creates 0600
        os.replace(tmp, path)
    except BaseException as e:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        err = disk_error(path, e)
        if err is not None:
            raise err from e
        raise
    return path


def atomic_write(path: str | os.PathLike[str], write: Callable[[TextIO], None]) -> Path:
    """Write text through a temp file in the same directory and os.replace it; a failure leaves no temp file behind."""
    return _atomic_file(path, write, mode="w", encoding="utf-8", newline="\n")


def atomic_write_bytes(path: str | os.PathLike[str], write: Callable[[BinaryIO], None]) -> Path:
    """`atomic_write` for binary writers (torch.save, numpy.savez)."""
    return _atomic_file(path, write, mode="wb")


def atomic_write_text(path: str | os.PathLike[str], lines: Iterable[str]) -> Path:
    """`atomic_write` of lines streamed from an iterable (which may be a generator)."""
    return atomic_write(path, lambda f: f.writelines(lines))


@contextlib.contextmanager
def atomic_dir(out: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temp directory next to `out`; when the block completes, it replaces `out` (a directory or a link) by
    renames: a crash leaves the old directory or the new one, never a half-written one. On error the temp is removed."""
    out = Path(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp"))
    except OSError as e:
        err = disk_error(out, e)
        if err is not None:
            raise err from e
        raise
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes it 0700; the result should look like a plain mkdir
    try:
        yield tmp
        if out.is_symlink() or out.is_file():
            out.unlink()
        elif out.exists():
            old = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".old"))
            os.replace(out, old / out.name)
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
            return
        os.replace(tmp, out)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        err = disk_error(out, e)
        if err is not None:
            raise err from e
        raise


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


def write_json(path: str | os.PathLike[str], obj: Any) -> Path:
    """Atomic JSON write (numpy scalars/arrays and Paths are converted)."""
    # json.dump streams into the temp file, so an unencodable value fails mid-write; atomic_write cleans up
    return atomic_write(path, lambda f: (json.dump(obj, f, indent=2, default=_json_default), f.write("\n")))


def atomic_symlink(target: str | os.PathLike[str], link: str | os.PathLike[str]) -> Path:
    """Point `link` at the directory `target`, replacing an older link in one rename (never a dangling or half-made
    link)."""
    link = Path(link)
    link.parent.mkdir(parents=True, exist_ok=True)
    tmp = link.with_name(f".{link.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    os.symlink(target, tmp, target_is_directory=True)
    try:
        os.replace(tmp, link)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
    return link


@contextlib.contextmanager
def file_lock(path: str | os.PathLike[str]) -> Iterator[None]:
    """An exclusive flock on `path` (created if absent) for the block; the kernel releases it if the process dies, so
    concurrent builders of one cache entry wait instead of building it twice."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
