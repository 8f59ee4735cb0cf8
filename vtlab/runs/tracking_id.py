"""`<run_dir>/wandb_id`: the id of the run directory's wandb run, so that a run resumed after an interruption
(resume=auto from `checkpoints/last.ckpt`) stays one wandb run instead of one more per resume.

Rank 0 decides it at the run's admission (vtlab.stages.admission), under the directory's lock, and the wandb logger
reads it (vtlab.tracking.loggers.instantiate_logger, with `resume="allow"`); a later rank neither writes nor reads it
and starts no wandb run (vtlab.runs.ranks). A sweep's jobs each have their own directory, so their own id.

- a resume from the run's checkpoint keeps the id (a directory from before this file existed, or whose run logged
  to no wandb until now, gets one);
- a run that starts over gets a new one: a fresh directory, `overwrite=true` over an earlier run, a rerun of a run
  interrupted before its first checkpoint. Its training starts again at step 0, so it is a new wandb run; the
  earlier one stays whole, the record of that attempt.

Offline, each process writes its own `wandb/offline-run-<time>-<id>` folder; `wandb sync` of all of them uploads
the folders of one id into one run, in order of start time.
"""

from __future__ import annotations

import os
import secrets
import string
from pathlib import Path

from vtlab.core.atomic import atomic_write

ID_FILE = "wandb_id"
_ALPHABET = string.ascii_lowercase + string.digits  # what wandb's own run ids are made of
_LENGTH = 8


def _valid(text: str) -> bool:
    return 0 < len(text) <= 64 and all(c in _ALPHABET for c in text)


def recorded_id(run_dir: str | os.PathLike[str]) -> str | None:
    """The id recorded in `run_dir`; None when there is none (or it is not an id: the admission writes a new one)."""
    try:
        text = (Path(run_dir) / ID_FILE).read_text(encoding="utf-8").strip()
    except (FileNotFoundError, NotADirectoryError, UnicodeDecodeError):
        return None
    return text if _valid(text) else None


def run_id(run_dir: str | os.PathLike[str], resumes: bool) -> str:
    """The run's wandb id, recorded in `run_dir` (rank 0, at the admission): the recorded one when the run `resumes`
    from its checkpoint, else a new one written over any earlier one (the module docstring says why). DiskError when
    the run directory cannot take it."""
    if resumes and (known := recorded_id(run_dir)) is not None:
        return known
    new = "".join(secrets.choice(_ALPHABET) for _ in range(_LENGTH))
    atomic_write(Path(run_dir) / ID_FILE, lambda f: f.write(new + "\n"))
    return new
