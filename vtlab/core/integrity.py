"""Completion markers for cache entries (vocabulary transfers, MLM-adapted models, trained vocabularies).

An entry is a directory built in a temp dir next to its final place and renamed into place
(vtlab.core.atomic.build_dir). `seal` writes its marker last: the sha256 of every file in it. `problem` re-hashes them
before use, so an entry that a kill, a full disk, a copy or a person cut short or changed (a truncated
model.safetensors, a missing tokenizer.json) is rebuilt (one warning naming the path) instead of crashing a run or being
used silently; `build` publishes a sealed entry, moving a damaged one aside first.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

from vtlab.core.atomic import build_dir, json_hash
from vtlab.core.json_files import JsonFileError, read_json, what_is_wrong

MARKER = "vtlab_complete.json"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _files(directory: Path) -> list[str]:
    return sorted(
        str(p.relative_to(directory))
        for p in directory.rglob("*")
        if p.is_file() and not p.is_symlink() and p.name != MARKER
    )


def seal(directory: Path) -> None:
    """Write the completion marker (last): the sha256 of every file under `directory`."""
    record = {"files": {rel: sha256_file(directory / rel) for rel in _files(directory)}}
    (directory / MARKER).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")


def content_key(path: Path) -> str:
    """What a local model or tokenizer source holds, independent of where it is, for the keys of caches derived from
    it: a sealed entry (vtlab's own caches) by the sha256 its marker records for each file, so a moved or copied
    cache keeps its keys; any other directory or file (a user's model) by each file's path inside it, size and
    modification time — stat only, so weights are not re-read on every run, and a model rewritten in place (retrained
    into the same directory) gets a new key instead of what was derived from the old one. Dot-named files and folders
    (.git, download metadata) are left out."""
    marker = path / MARKER
    if marker.is_file():
        try:
            files = read_json(marker)["files"]
            if isinstance(files, dict) and files:
                return f"sealed:{json_hash(files)}"
        except (JsonFileError, KeyError):
            pass  # an unreadable marker: keyed like any directory (and rebuilt where vtlab checks it)
    if path.is_file():
        st = path.stat()
        return f"stat:{json_hash([path.name, st.st_size, st.st_mtime_ns])}"
    stats = []
    for rel in _files(path):
        if not any(part.startswith(".") for part in Path(rel).parts):
            st = (path / rel).stat()
            stats.append([rel, st.st_size, st.st_mtime_ns])
    return f"stat:{json_hash(stats)}"


def problem(directory: Path) -> str | None:
    """None when `directory` holds its completion marker and exactly the files the marker lists, each with its
    recorded sha256 (no file added, none missing, no link); otherwise what is wrong (for the warning)."""
    marker = directory / MARKER
    if not marker.is_file():
        return f"no completion marker {MARKER} (an interrupted build, or one from before vtlab wrote markers)"
    try:
        files = read_json(marker)["files"]
        if not isinstance(files, dict) or not files:
            raise ValueError("no files listed")
    except JsonFileError as e:
        return f"unreadable completion marker {MARKER} ({what_is_wrong(e, marker)})"
    except (ValueError, KeyError) as e:
        return f"unreadable completion marker {MARKER} ({type(e).__name__})"
    held, links = _held(directory)
    if links:
        return f"{links[0]} is a link ({len(links)} in all): a sealed entry holds only the files it recorded"
    if extra := sorted(held - set(files)):
        return f"{extra[0]} was not there when it was built ({len(extra)} file(s) added)"
    for rel, digest in sorted(files.items()):
        path = directory / rel
        if rel not in held:
            return f"{rel} is missing"
        if sha256_file(path) != digest:
            return f"{rel} differs from the sha256 recorded when it was built (truncated or changed)"
    return None


def _held(directory: Path) -> tuple[set[str], list[str]]:
    """(the regular files under `directory` but its marker, the links under it), no link followed: a sealed entry
    holds exactly the files its marker records, so an added file (an added_tokens.json a loader would read) or a link
    to elsewhere means it is not the entry that was built."""
    files, links = set(), []
    for root, dirs, names in os.walk(directory, followlinks=False):
        for name in dirs + names:
            path = Path(root, name)
            rel = str(path.relative_to(directory))
            if path.is_symlink():
                links.append(rel)
            elif name in names and rel != MARKER:
                files.add(rel)
    return files, sorted(links)


def build(out: Path, write: Callable[[Path], None]) -> Path:
    """Build the cache entry `out`: `write(tmp)` into a temp dir next to it, `seal`, publish
    (vtlab.core.atomic.build_dir). Temp dirs that a killed builder left are removed first; on every failure path this
    build's temp dir is removed too; a full, over-quota or read-only disk is one DiskError line naming `out`."""

    def write_sealed(tmp: Path) -> None:
        write(tmp)
        seal(tmp)

    # a racing builder that finished first wins: its entry is as good
    return build_dir(out, write_sealed, complete=lambda entry: problem(entry) is None)
