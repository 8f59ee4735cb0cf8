"""Every `python -m vtlab` a test starts goes through tests/helpers.py (`run_vtlab`, `start_vtlab`,
`run_vtlab_together`): one place builds the command and its environment (offline, this checkout's vtlab)."""

from __future__ import annotations

import ast

from helpers import TESTS


def own_vtlab_commands(source: str) -> list[int]:
    """The lines of `source` that spell `[sys.executable, "-m", "vtlab", ...]` (a list or a tuple) themselves."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.List, ast.Tuple)):
            continue
        elts = node.elts
        for i in range(len(elts) - 2):
            first, flag, module = elts[i : i + 3]
            if (
                isinstance(first, ast.Attribute)
                and first.attr == "executable"
                and isinstance(flag, ast.Constant)
                and flag.value == "-m"
                and isinstance(module, ast.Constant)
                and module.value == "vtlab"
            ):
                lines.append(node.lineno)
    return lines


def test_the_detector_finds_a_command_spelt_out() -> None:
    spelt = 'import subprocess, sys\nsubprocess.run(\n    [\n        sys.executable,\n        "-m",\n"vtlab"]\n)\n'
    assert own_vtlab_commands(spelt) == [3]
    assert own_vtlab_commands('run_vtlab("x=1")\n[sys.executable, "-m", "vtlab.report"]\n') == []


def test_no_test_spells_out_python_m_vtlab() -> None:
    found = {
        str(path.relative_to(TESTS)): lines
        for path in sorted(TESTS.rglob("*.py"))
        if path != TESTS / "helpers.py" and (lines := own_vtlab_commands(path.read_text()))
    }
    assert found == {}, f"use helpers.run_vtlab / start_vtlab / run_vtlab_together: {found}"
