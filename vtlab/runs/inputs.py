"""The files a training run reads, fingerprinted when it starts (`<run_dir>/.hydra/inputs.json`), so that a resume
continues the same experiment: the config check (vtlab.callbacks.resume_state) sees a changed setting, not a file that
was rewritten under the same path. A resume whose inputs changed is refused with one line naming the file.

The record sits beside Hydra's record of the invocation (`.hydra/config.yaml`): like it, it describes what the run was
given, not a result, so a run that fails before any result leaves no new result file (tests/runs/test_bad_inputs.py).

Inputs: the files the config names by path (vtlab.runs.plan.INPUT_KEYS, the plan's `inputs`): the training triplets
and their teacher scores, the dev set (data.dev_path) and the evaluation collection(s) (eval.path,
eval.evaluations.*.path); a BEIR directory stands for its corpus.jsonl, queries.jsonl and qrels/*.tsv. Built-in data
(BoolQ, the hub) is named by its settings, which the config check covers.

Fingerprint: size, mtime and sha256 of the whole file up to `WHOLE` bytes; above it, sha256 of the first and the last
MiB (a multi-GB triplet file is not read whole at every start). A file hashed whole counts as changed only when its
size or content differ (a `touch` or a copy is the same input); a larger one also when its mtime differs, since an
edit between its first and last MiB cannot be ruled out otherwise.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from vtlab.core.atomic import write_json
from vtlab.core.errors import DataError, RunDirError
from vtlab.core.json_files import JsonFileError, read_json

log = logging.getLogger("vtlab")

INPUTS_JSON = Path(".hydra") / "inputs.json"
WHOLE = 64 * 2**20  # hashed whole up to this size: ~0.1 s
EDGE = 2**20  # larger files: the first and the last MiB


def input_files(named: Iterable[tuple[str, Any]]) -> dict[str, str]:
    """{absolute file path: the config key naming it} for every input file `named` ((full key, value), the plan's
    `inputs`); DataError for a named path that does not exist (before any model loads)."""
    files: dict[str, str] = {}
    for full, value in named:
        if value is None:
            continue
        path = Path(str(value)).expanduser().resolve()
        if path.is_dir():
            inside = [path / "corpus.jsonl", path / "queries.jsonl", *sorted((path / "qrels").glob("*.tsv"))]
            files.update({str(p): full for p in inside if p.is_file()})
        elif path.is_file():
            files[str(path)] = full
        else:
            raise DataError(f"{full}={value}: no such file or directory")
    return files


def _sha256(f: Any, size: int | None) -> str:
    h = hashlib.sha256()
    if size is None:
        for chunk in iter(lambda: f.read(2**20), b""):
            h.update(chunk)
    else:
        h.update(f.read(size))
    return h.hexdigest()


def fingerprint(path: str | Path) -> dict[str, Any]:
    """{"size", "mtime_ns"} and "sha256" (whole file) or "sha256_first_mib" + "sha256_last_mib" (larger files)."""
    st = Path(path).stat()
    fp: dict[str, Any] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns}
    with open(path, "rb") as f:
        if st.st_size <= WHOLE:
            fp["sha256"] = _sha256(f, None)
        else:
            fp["sha256_first_mib"] = _sha256(f, EDGE)
            f.seek(-EDGE, 2)
            fp["sha256_last_mib"] = _sha256(f, EDGE)
    return fp


def difference(old: dict[str, Any], new: dict[str, Any]) -> str | None:
    """What changed between two fingerprints of one file, in words; None if nothing did."""
    if old.get("size") != new.get("size"):
        return f"size {old.get('size')} -> {new.get('size')} bytes"
    if "sha256" in old or "sha256" in new:
        return None if old.get("sha256") == new.get("sha256") else "same size, other content (sha256 differs)"
    if (old.get("sha256_first_mib"), old.get("sha256_last_mib")) != (new["sha256_first_mib"], new["sha256_last_mib"]):
        return "same size, other content (sha256 of its first or last MiB differs)"
    if old.get("mtime_ns") != new.get("mtime_ns"):
        return (
            "modified since (mtime differs; only its first and last MiB are hashed, so an edit in between cannot "
            "be ruled out)"
        )
    return None


def fingerprints(named: Iterable[tuple[str, Any]]) -> dict[str, dict[str, Any]]:
    """{absolute file path: its config key and fingerprint} of every input file `named` (input_files)."""
    return {path: {"key": key, **fingerprint(path)} for path, key in input_files(named).items()}


def record(run_dir: Path, files: dict[str, dict[str, Any]]) -> None:
    write_json(run_dir / INPUTS_JSON, {"files": files})


def _recorded(path: Path) -> dict[str, dict[str, Any]] | None:
    """The fingerprints an interrupted run recorded; None when it recorded none (a run from before inputs.json)."""
    if not path.is_file():
        return None
    why = "the resumed run's inputs cannot be compared with the interrupted run's: pass overwrite=true to start over"
    try:
        files = read_json(path)["files"]
        if not isinstance(files, dict):
            raise TypeError(f"'files' is a {type(files).__name__}")
    except JsonFileError as e:  # names the file
        raise RunDirError(f"{e}; {why}") from None
    except (KeyError, TypeError) as e:
        raise RunDirError(f"{path}: unreadable ({type(e).__name__}: {e}); {why}") from None
    return files


def check_resume(
    run_dir: Path, resume_from: str | Path, current: dict[str, dict[str, Any]], with_changes: bool = False
) -> None:
    """Refuse (RunDirError, one line naming the file) resuming `resume_from` when a file the interrupted run read
    changed or is gone (`current`: this run's `fingerprints`); `with_changes` (resume_with_changes=true) continues
    with a warning and records the new fingerprints. A file the config names differently than the interrupted run's
    is a config change, which vtlab.callbacks.resume_state refuses by key."""
    recorded = _recorded(run_dir / INPUTS_JSON)
    if recorded is None:
        log.warning(
            "%s records no input fingerprints (a run from before %s): the resumed inputs are not checked; recorded now",
            run_dir,
            INPUTS_JSON,
        )
        record(run_dir, current)
        return
    changed: list[tuple[str, str]] = []  # (file and key, what happened)
    for path, old in recorded.items():
        new = current.get(path)
        if new is None and Path(path).exists():
            continue  # no longer named by the config: a config change, refused (or accepted) by key
        what = "is gone" if new is None else difference(old, new)
        if what is not None:
            changed.append((f"{path} ({old.get('key', 'input')})", what))
    if not changed:
        return
    (name, what), more = changed[0], f"; and {len(changed) - 1} more file(s)" if len(changed) > 1 else ""
    shown = f"{name} is gone" if what == "is gone" else f"{name} changed ({what})"
    if not with_changes:
        raise RunDirError(
            f"{shown} since the interrupted run in {run_dir} started{more}; a resume must read the "
            "inputs it started with: restore the file, pass resume_with_changes=true to continue on the "
            "new inputs, or overwrite=true to start over"
        )
    log.warning("resume_with_changes=true: continuing %s on changed inputs: %s%s", resume_from, shown, more)
    record(run_dir, {**recorded, **current})
