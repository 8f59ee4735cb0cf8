"""Backbones vtlab builds once into $VTLAB_CACHE/backbones/<dirname> and then loads from there like any model
directory: the generated test backbones (vtlab/backbones/tiny.py) and models converted from another format
(vtlab/backbones/e5.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vtlab.backbones.pretrained import Backbone
from vtlab.core.assets import cache_dir
from vtlab.core.atomic import build_dir

MARKER = "vtlab_backbone.json"  # written last: its presence says the directory is complete


class CachedBackbone(Backbone):
    """A backbone whose directory `_write(tmp)` builds; `dirname` names it in the cache (and is its cache key)."""

    dirname: str
    disk_errors = True  # a full disk → one DiskError line (vtlab.core.atomic.build_dir); False: the OSError as it is

    def cache_key(self) -> str:
        return self.dirname

    def _source(self, tokenizer: bool) -> tuple[str, str]:
        return str(self.materialize()), "backbone.name_or_path"

    def _write(self, tmp: Path) -> None:
        raise NotImplementedError

    def _record(self) -> dict[str, Any]:
        """What the marker file records about the build."""
        return {"class": type(self).__name__}

    def materialize(self) -> Path:
        """Build into the cache if absent (atomically: concurrent builders may race, the first complete directory
        wins; an incomplete earlier build is replaced); return the directory."""
        final = cache_dir("backbones") / self.dirname

        def complete(d: Path) -> bool:
            return (d / MARKER).is_file()

        if not complete(final):

            def write(tmp: Path) -> None:
                self._write(tmp)
                (tmp / MARKER).write_text(json.dumps(self._record(), indent=1))

            try:
                build_dir(final, write, complete, disk_errors=self.disk_errors)
            except OSError:
                if not complete(final):
                    raise
        self.name_or_path = str(final)
        return final
