"""Module sizes (docs/architecture.md): a stage is a short recipe (stages/*.py: at most 120 lines), and no module
of vtlab/ grows past 450 lines; a longer one is split by job within its concept's folder. Lines as `ruff format` leaves
them (make test checks the formatting), counted as `wc -l` counts them."""

from __future__ import annotations

from pathlib import Path

from helpers import ROOT

STAGE_MAX_LINES = 120
MODULE_MAX_LINES = 450


def lines(path: Path) -> int:
    """Newlines in the file, as `wc -l` counts lines."""
    return path.read_bytes().count(b"\n")


def too_long(paths: list[Path], limit: int, root: Path = ROOT) -> list[str]:
    """`<path>: <n> lines > <limit>` for each file of `paths` over `limit`, by path."""
    return [f"{p.relative_to(root)}: {lines(p)} lines > {limit}" for p in sorted(paths) if lines(p) > limit]


def test_stages_are_short_recipes():
    stages = list((ROOT / "vtlab" / "stages").glob("*.py"))
    assert stages
    assert too_long(stages, STAGE_MAX_LINES) == [], "move library code out of the stage, into its concept's folder"


def test_no_module_is_over_the_limit():
    modules = list((ROOT / "vtlab").rglob("*.py"))
    assert len(modules) > 100
    assert too_long(modules, MODULE_MAX_LINES) == [], "split the module by job within its package"


def test_the_check_counts_lines_as_wc_does(tmp_path):
    short, long = tmp_path / "short.py", tmp_path / "long.py"
    short.write_text("x = 1\n" * 3)
    long.write_text("x = 1\n" * 4 + "y = 2")  # no newline at the end: 4 lines for wc -l
    assert [lines(short), lines(long)] == [3, 4]
    assert too_long([long, short], 3, root=tmp_path) == ["long.py: 4 lines > 3"]
