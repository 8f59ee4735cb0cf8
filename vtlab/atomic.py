"""Atomic file and directory writes: readers (and a crash) see the old version or the new one, never half of one."""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TextIO


def atomic_write(path: str | os.PathLike[str], write: Callable[[TextIO], None]) -> Path:
    """Write through a temp file in the same directory and os.replace it; a failure leaves no temp file behind."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp creates 0600
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | os.PathLike[str], lines: Iterable[str]) -> Path:
    """`atomic_write` of lines streamed from an iterable (which may be a generator)."""
    return atomic_write(path, lambda f: f.writelines(lines))


@contextlib.contextmanager
def atomic_dir(out: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temp directory next to `out`; when the block completes, it replaces `out` (a directory or a link) by
    renames: a crash leaves the old directory or the new one, never a half-written one. On error the temp is removed."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp"))
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
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
