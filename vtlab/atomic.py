"""Atomic file and directory writes: readers (and a crash) see the old version or the new one, never half of one.

A write that fails on a full, over-quota or read-only disk raises vtlab.errors.DiskError naming the file (one line
at the entry point, not a traceback); on every failure path the temp file or directory is removed.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any, BinaryIO, TextIO

from vtlab.errors import disk_error


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
