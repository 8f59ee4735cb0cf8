"""Atomic file and directory writes: readers (and a crash) see the old version or the new one, never half of one.

The one place that writes through a temp file or directory and renames it into place: files (`atomic_write`,
`atomic_write_bytes`, `atomic_write_text`, `atomic_path` for writers that take a file name), directories replaced
whole (`atomic_dir`, `replace_dir`) and cache entries that racing builders may build at once (`build_dir`: the first
complete one wins). A write that fails on a full, over-quota or read-only disk raises vtlab.core.errors.DiskError naming
the file (one line at the entry point, not a traceback); on every failure path the temp file or directory is removed.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import glob
import hashlib
import json
import os
import shutil
import socket
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any, BinaryIO, TextIO

import numpy as np

from vtlab.core.errors import LinkError, disk_error, write_roots


def stable_hash(blob: str | bytes | Iterable[bytes], length: int = 16) -> str:
    """The cache-key digest: sha1 hex of `blob`, cut to `length` characters (not a security hash: a name).

    An iterable of byte chunks is hashed as their concatenation, one chunk at a time, so a corpus-sized key never
    needs the whole corpus in one buffer (the digest equals that of the joined bytes)."""
    if isinstance(blob, str):
        blob = blob.encode()
    if isinstance(blob, (bytes, bytearray, memoryview)):
        return hashlib.sha1(blob).hexdigest()[:length]
    digest = hashlib.sha1()
    for chunk in blob:
        digest.update(chunk)
    return digest.hexdigest()[:length]


def json_hash(obj: Any, length: int = 16) -> str:
    """`stable_hash` of `obj` as sorted-key JSON (values JSON cannot encode are written with str())."""
    return stable_hash(json.dumps(obj, sort_keys=True, default=str), length)


def real_path(path: str | os.PathLike[str]) -> Path:
    """`path` with every link followed (where a write would really land)."""
    return Path(os.path.realpath(path))


def within(inner: Path, outer: Path) -> bool:
    """`inner` is `outer` or below it (both real paths)."""
    return inner == outer or outer in inner.parents


def escapes(link: str | os.PathLike[str], roots: Iterable[str | os.PathLike[str]]) -> bool:
    """The one rule for links where vtlab writes: `link` leads into none of `roots` (real paths compared: a chain of
    links, or a link to nothing yet, is judged by where a write through it would land)."""
    target = real_path(link)
    return not any(within(target, real_path(r)) for r in roots)


def link_out_of(path: str | os.PathLike[str], root: str | os.PathLike[str]) -> Path | None:
    """The first link on the way from `root` (itself not counted: the user may keep runs on another disk) down to
    `path` that leads outside `root`, or None. Paths are compared as written, so a link is seen, not followed."""
    path, root = Path(os.path.abspath(path)), Path(os.path.abspath(root))
    try:
        parts = path.relative_to(root).parts
    except ValueError:
        return None
    at = root
    for part in parts:
        at = at / part
        if at.is_symlink() and escapes(at, [root]):
            return at
    return None


def link_leaving(path: str | os.PathLike[str], roots: Iterable[str | os.PathLike[str]]) -> tuple[Path, Path] | None:
    """(the link, its root) when `path` lies under one of `roots` but a link on the way down to it leads out of that
    root and `escapes` them all (into no other root); else None. The rule for every path written in a run or cache
    directory: vtlab's writers (`guard_write`) and Hydra's (vtlab.runs.writable)."""
    roots = list(roots)
    for root in roots:
        link = link_out_of(path, root)
        if link is not None and escapes(link, roots):
            return link, Path(root)
    return None


def other_names(path: str | os.PathLike[str]) -> int:
    """How many other directory entries name the same file as `path`: a hard link's count less one (0 for a file that
    does not exist, a directory or a symbolic link, which `link_leaving` judges)."""
    try:
        st = os.lstat(path)
    except OSError:
        return 0
    return st.st_nlink - 1 if stat.S_ISREG(st.st_mode) else 0


def hard_link_error(path: str | os.PathLike[str], names: int) -> LinkError:
    return LinkError(
        f"{path}: a hard link (the same file has {names} other name{'s' * (names > 1)}): a write there would change it "
        "under every name, so nothing is written into a hard-linked file in a run or cache directory; remove it, or "
        "replace it by a copy (cp --remove-destination)"
    )


def hard_link_in(directory: str | os.PathLike[str]) -> tuple[Path, int] | None:
    """(the first hard-linked regular file under `directory`, its other names), links not followed; else None."""
    for top, _, files in os.walk(directory):
        for name in files:
            if names := other_names(Path(top) / name):
                return Path(top) / name, names
    return None


def guard_write(path: str | os.PathLike[str]) -> None:
    """LinkError when `path` lies under a root this process writes in (the run directory, the cache:
    vtlab.core.errors.note_write_roots) but a link on the way leads out of it (and into no other root): a link planted
    in a run or cache directory must not carry a write elsewhere (`link_leaving`); nor may a hard link there (the same
    file under another name, anywhere on the disk). Every writer here calls it."""
    roots = write_roots()
    found = link_leaving(path, roots)
    if found is not None:
        link, root = found
        raise LinkError(
            f"{path}: goes through the link {link} (to {real_path(link)}), out of {root}: nothing is written "
            "out of a run or cache directory through a link; remove the link"
        )
    if (names := other_names(path)) and any(within(real_path(path), real_path(r)) for r in roots):
        raise hard_link_error(path, names)


@contextlib.contextmanager
def _on_failure(path: Path, cleanup: Callable[[], object] | None = None, disk_errors: bool = True) -> Iterator[None]:
    """The one failure path of the writes here: `cleanup()` (remove the temp file or directory), then re-raise, as a
    DiskError naming `path` when the error is a full, over-quota or read-only disk (unless `disk_errors` is False)."""
    try:
        yield
    except BaseException as e:
        if cleanup is not None:
            cleanup()
        err = disk_error(path, e) if disk_errors else None
        if err is not None:
            raise err from e
        raise


@contextlib.contextmanager
def _temp_file(path: Path, suffix: str, mode: int | None, disk_errors: bool) -> Iterator[tuple[int, Path]]:
    """A fresh temp file `.NAME.XXXX<suffix>` next to `path` (open fd, name); renamed onto `path` when the block
    completes, after a chmod to `mode` (None: as the writer left it)."""
    tmp: Path | None = None
    guard_write(path)
    with _on_failure(path, lambda: tmp is not None and tmp.unlink(missing_ok=True), disk_errors):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix)
        tmp = Path(name)
        yield fd, tmp
        if mode is not None:
            os.chmod(tmp, mode)  # mkstemp creates 0600
        os.replace(tmp, path)


def _atomic_file(path: str | os.PathLike[str], write: Callable[[IO[Any]], None], **open_kwargs: Any) -> Path:
    path = Path(path)
    with _temp_file(path, ".tmp", 0o644, disk_errors=True) as (fd, _):
        with os.fdopen(fd, **open_kwargs) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
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
def atomic_path(
    path: str | os.PathLike[str], suffix: str = ".tmp", *, mode: int | None = 0o644, disk_errors: bool = True
) -> Iterator[Path]:
    """For writers that take a file name, not a file object (savefig, a compiler's -o): yield the name of a fresh,
    empty temp file next to `path`, ending in `suffix` (for writers that go by the extension); when the block
    completes it gets `mode` (None: as the writer left it) and is renamed onto `path`. On failure it is removed;
    `disk_errors=False` re-raises a full disk's OSError as it is instead of a DiskError. No fsync."""
    with _temp_file(Path(path), suffix, mode, disk_errors) as (fd, tmp):
        os.close(fd)
        yield tmp


def replace_dir(tmp: str | os.PathLike[str], out: str | os.PathLike[str]) -> Path:
    """Move the finished directory `tmp` to `out` by renames only, replacing what `out` is (a directory is moved
    aside, then deleted; a link or a file is removed): readers see the old directory or the new one, whole."""
    tmp, out = Path(tmp), Path(out)
    guard_write(out)
    if out.is_symlink() or out.is_file():
        out.unlink()
    elif out.exists():
        old = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".old"))
        os.replace(out, old / out.name)
        os.replace(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
        return out
    os.replace(tmp, out)
    return out


@contextlib.contextmanager
def atomic_dir(out: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temp directory next to `out`; when the block completes, it replaces `out` (a directory or a link) by
    renames: a crash leaves the old directory or the new one, never a half-written one. On error the temp is removed."""
    out = Path(out)
    guard_write(out)
    with _on_failure(out):
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp"))
    with _on_failure(out, lambda: shutil.rmtree(tmp, ignore_errors=True)):
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes it 0700; the result should look like a plain mkdir
        yield tmp
        replace_dir(tmp, out)


@contextlib.contextmanager
def scratch_dir(out: str | os.PathLike[str]) -> Iterator[Path]:
    """A fresh temp directory next to `out` (mode 0700; on its file system, so what is built in it can be renamed into
    place with `replace_dir`), removed with whatever is still in it when the block ends."""
    out = Path(out)
    guard_write(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp"))
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---- cache entries: built in a temp dir next to their place, the first complete one wins ----------------------------
def _owner() -> str:
    """This process, as it is written into its temp dirs' names: host and pid (a shared cache may span hosts)."""
    return f"{socket.gethostname()}-{os.getpid()}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def remove_orphans(out: str | os.PathLike[str]) -> list[Path]:
    """Remove the temp dirs of `out` that a builder on this host left when it was killed (its pid is gone); a live
    builder's, or another host's, are left alone. Returns what was removed."""
    out = Path(out)
    removed = []
    prefix, host = f".{out.name}.", socket.gethostname()
    for p in out.parent.glob(f"{glob.escape(prefix)}*"):
        owner = p.name[len(prefix) :].rsplit(".", 1)[0]
        owner_host, _, pid = owner.rpartition("-")
        if p.is_dir() and owner_host == host and pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p)
    return removed


def publish_dir(tmp: str | os.PathLike[str], out: str | os.PathLike[str], complete: Callable[[Path], bool]) -> bool:
    """Rename the finished temp dir `tmp` to `out`, unless `out` is already `complete` (a racing builder finished
    first: its entry is as good, and wins); an incomplete `out` is moved aside and deleted first. `tmp` is gone
    afterwards either way. Whether `tmp` became `out`."""
    tmp, out = Path(tmp), Path(out)
    guard_write(out)
    try:
        if complete(out):
            return False
        if out.exists() or out.is_symlink():
            aside = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".damaged", dir=out.parent))
            os.replace(out, aside / out.name)
            shutil.rmtree(aside, ignore_errors=True)
        try:
            os.replace(tmp, out)
        except OSError:
            if not complete(out):  # else a racing builder renamed its entry into place since the check above
                raise
            return False
        return True
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def build_dir(
    out: str | os.PathLike[str],
    write: Callable[[Path], object],
    complete: Callable[[Path], bool],
    *,
    disk_errors: bool = True,
) -> Path:
    """Build the cache entry `out`: `write(tmp)` into a temp dir next to it (mode 0700, named after this host and
    process), then `publish_dir` it (a racing builder's complete entry wins). Temp dirs that a killed builder left are
    removed first; on every failure path this build's temp dir is removed too; a full, over-quota or read-only disk
    is one DiskError line naming `out` (`disk_errors=False`: the OSError as it is)."""
    out = Path(out)
    guard_write(out)
    with _on_failure(out, disk_errors=disk_errors):
        out.parent.mkdir(parents=True, exist_ok=True)
        remove_orphans(out)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.{_owner()}.", dir=out.parent))
    with _on_failure(out, lambda: shutil.rmtree(tmp, ignore_errors=True), disk_errors):
        write(tmp)
    publish_dir(tmp, out, complete)
    return out


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
    guard_write(link)
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
    # never through a link (a link planted at a lock path of a shared cache would lead the open elsewhere), and never
    # truncating: a lock file's bytes are not its point
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise LinkError(f"{path}: is a link, and a lock file is never opened through one: remove it") from None
        raise
    with os.fdopen(fd, "r+b") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
