"""Where the project's own files are: `CONF_DIR`, the conf/ directory Hydra composes (beside the vtlab package), and
`INDEXES_FILE`, the eval.index choices; and where the user's cache is (`cache_root`). Every module that needs one
imports it from here."""

from __future__ import annotations

import os
from pathlib import Path

from vtlab.core.errors import ConfigError

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
# eval.index's choices: one node per index, each a `_target_` partial (vtlab.index instantiates them; vtlab.runs.checks
# reads their names)
INDEXES_FILE = Path(__file__).resolve().parents[1] / "index" / "indexes.yaml"


def cache_root() -> Path:
    """The cache's root, `$VTLAB_CACHE` or ~/.cache/vtlab, as this process sees it now (nothing is created)."""
    return Path(os.environ.get("VTLAB_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "vtlab"))


def is_component(text: str) -> bool:
    """`text` names one entry of a directory: not empty, `.` or `..`, no `/` and no NUL."""
    return text not in ("", ".", "..") and "/" not in text and "\0" not in text


def child(parent: Path, part: str, key: str) -> Path:
    """`parent / part` where `part`, built from the value of config key `key`, is one directory entry: a value that
    becomes part of a path never climbs out of (or replaces) the directory it is written in. ConfigError naming
    `key` otherwise."""
    if not is_component(part):
        raise ConfigError(
            f"{key}: {part!r} would become a path under {parent}; expected a plain name (no '/', not empty, '.' or "
            "'..')",
            key=key,
        )
    return parent / part
