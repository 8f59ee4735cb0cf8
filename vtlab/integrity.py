"""Completion markers for cache entries (vocabulary transfers, MLM-adapted models, trained vocabularies).

An entry is a directory built in a temp dir next to its final place and renamed into place. `seal` writes its marker
last: the sha256 of every file in it. `problem` re-hashes them before use, so an entry that a kill, a full disk, a copy
or a person cut short or changed (a truncated model.safetensors, a missing tokenizer.json) is rebuilt (one warning
naming the path) instead of crashing a run or being used silently. `publish` renames a sealed temp dir into place,
moving a damaged entry aside first.
"""
from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path

from vtlab.errors import disk_error

MARKER = "vtlab_complete.json"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _files(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*")
                  if p.is_file() and not p.is_symlink() and p.name != MARKER)


def seal(directory: Path) -> None:
    """Write the completion marker (last): the sha256 of every file under `directory`."""
    record = {"files": {rel: sha256_file(directory / rel) for rel in _files(directory)}}
    (directory / MARKER).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")


def problem(directory: Path) -> str | None:
    """None when `directory` holds its completion marker and every file the marker lists has its recorded sha256;
    otherwise what is wrong (for the warning)."""
    marker = directory / MARKER
    if not marker.is_file():
        return f"no completion marker {MARKER} (an interrupted build, or one from before vtlab wrote markers)"
    try:
        files = json.loads(marker.read_text())["files"]
        if not isinstance(files, dict) or not files:
            raise ValueError("no files listed")
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f"unreadable completion marker {MARKER} ({type(e).__name__})"
    for rel, digest in sorted(files.items()):
        path = directory / rel
        if not path.is_file():
            return f"{rel} is missing"
        if sha256_file(path) != digest:
            return f"{rel} differs from the sha256 recorded when it was built (truncated or changed)"
    return None


def publish(tmp: Path, out: Path) -> None:
    """Rename the sealed `tmp` to `out`. A valid `out` (a racing builder finished first) wins and `tmp` is removed; a
    damaged one is moved aside and deleted."""
    try:
        if out.exists() and problem(out) is None:
            return
        if out.exists() or out.is_symlink():
            aside = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".damaged", dir=out.parent))
            os.replace(out, aside / out.name)
            shutil.rmtree(aside, ignore_errors=True)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


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


def remove_orphans(out: Path) -> list[Path]:
    """Remove the temp dirs of `out` that a builder on this host left when it was killed (its pid is gone); a live
    builder's, or another host's, are left alone. Returns what was removed."""
    removed = []
    prefix, host = f".{out.name}.", socket.gethostname()
    for p in out.parent.glob(f"{glob.escape(prefix)}*"):
        owner = p.name[len(prefix):].rsplit(".", 1)[0]
        owner_host, _, pid = owner.rpartition("-")
        if p.is_dir() and owner_host == host and pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p)
    return removed


def build(out: Path, write: Callable[[Path], None]) -> Path:
    """Build the cache entry `out`: `write(tmp)` into a temp dir next to it, `seal`, `publish`. Temp dirs that a killed
    builder left are removed first; on every failure path this build's temp dir is removed too; a full, over-quota
    or read-only disk is one DiskError line naming `out`."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        remove_orphans(out)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.{_owner()}.", dir=out.parent))
    except OSError as e:
        raise disk_error(out, e) or e
    try:
        write(tmp)
        seal(tmp)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        err = disk_error(out, e)
        if err is not None:
            raise err from e
        raise
    publish(tmp, out)  # a racing builder that finished first wins: its entry is as good
    return out
