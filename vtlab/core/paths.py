"""Where the project's own files are: `CONF_DIR`, the conf/ directory Hydra composes (beside the vtlab package). Every
module that needs it imports it from here."""

from __future__ import annotations

from pathlib import Path

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
