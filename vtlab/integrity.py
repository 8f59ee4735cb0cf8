"""Completion markers for cache entries (vocabulary transfers, MLM-adapted models, trained vocabularies).

An entry is a directory built in a temp dir next to its final place and renamed into place. `seal` writes its marker
last: the sha256 of every file in it. `problem` re-hashes them before use, so an entry that a kill, a full disk, a copy
or a person cut short or changed (a truncated model.safetensors, a missing tokenizer.json) is rebuilt (one warning
naming the path) instead of crashing a run or being used silently. `publish` renames a sealed temp dir into place,
moving a damaged entry aside first.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

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
