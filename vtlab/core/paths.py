"""Where the project's own files are: `CONF_DIR`, the conf/ directory Hydra composes (beside the vtlab package), and
`INDEXES_FILE`, the eval.index choices; and where the user's cache is (`cache_root`). Every module that needs one
imports it from here."""

from __future__ import annotations

import os
from pathlib import Path

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
# eval.index's choices: one node per index, each a `_target_` partial (vtlab.index instantiates them; vtlab.runs.checks
# reads their names)
INDEXES_FILE = Path(__file__).resolve().parents[1] / "index" / "indexes.yaml"


def cache_root() -> Path:
    """The cache's root, `$VTLAB_CACHE` or ~/.cache/vtlab, as this process sees it now (nothing is created)."""
    return Path(os.environ.get("VTLAB_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "vtlab"))
