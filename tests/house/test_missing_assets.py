"""A missing offline asset or declared dependency fails the suite (a broken install is never green) unless the run opts
in with --allow-missing-assets; either way the suite ends with one line of its skip reasons."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.cli

TESTS = Path(__file__).resolve().parents[1]
PROBE = """
import pytest
from helpers import need_module


def test_needs_a_module_nobody_installed():
    need_module("vtlab_no_such_module")


def test_a_cpu_skip():
    pytest.skip("this CPU lacks a thing")
"""


def _pytest(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_probe.py").write_text(PROBE)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-p", "no:cacheprovider", *flags, "test_probe.py"],
        cwd=tmp_path,
        env={"PYTHONPATH": str(TESTS), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_a_missing_dependency_fails_naming_it(tmp_path: Path) -> None:
    proc = _pytest(tmp_path)
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert "1 failed, 1 skipped" in proc.stdout
    assert "vtlab_no_such_module does not import" in proc.stdout and "--allow-missing-assets" in proc.stdout
    assert "skips: 1 — this CPU lacks a thing ×1" in proc.stdout


def test_the_opt_in_skips_it_and_counts_both_reasons(tmp_path: Path) -> None:
    proc = _pytest(tmp_path, "--allow-missing-assets")
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert "2 skipped" in proc.stdout
    line = next(x for x in proc.stdout.splitlines() if x.startswith("skips: 2 — "))
    assert "missing: vtlab_no_such_module does not import" in line and "this CPU lacks a thing ×1" in line
