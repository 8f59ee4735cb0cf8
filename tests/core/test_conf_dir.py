"""The conf/ directory is computed once, in vtlab/core/paths.py: it is the repository's conf/, the Hydra entry point
reads it, and no other module computes it again."""

from __future__ import annotations

import re
from pathlib import Path

from helpers import CONF, ROOT

from vtlab.core.paths import CONF_DIR


def test_conf_dir_is_the_repositorys_conf() -> None:
    assert CONF_DIR == CONF.resolve() and (CONF_DIR / "config.yaml").is_file()


def test_the_entry_point_composes_conf_dir() -> None:
    from hydra._internal.utils import compute_search_path_dir

    import vtlab.__main__ as entry

    # @hydra.main keeps its config_path in the wrapped function's closure; Hydra turns it into the search path
    config_path = next(
        c.cell_contents
        for c in entry.main.__closure__ or ()
        if isinstance(c.cell_contents, str) and c.cell_contents.endswith("conf")
    )
    assert Path(compute_search_path_dir(entry.__file__, "vtlab.__main__", config_path)) == CONF_DIR


def test_no_other_module_computes_the_conf_dir() -> None:
    computes = re.compile(r"""[^\n]*(?:parents\[\d\]|\.parent)\s*/\s*["']conf["'][^\n]*|[^\n]*["'](?:\.\./)+conf["']""")
    found = {}
    for path in sorted(Path(ROOT, "vtlab").rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        if rel != "vtlab/core/paths.py":
            for m in computes.finditer(path.read_text(encoding="utf-8")):
                found.setdefault(rel, []).append(m.group(0).strip())
    assert found == {}
