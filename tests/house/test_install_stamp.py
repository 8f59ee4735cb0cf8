"""`make install` (which `make demo` and `make test` run first) follows what the install is made from, not file times:
the stamp holds the sha256 of pyproject.toml, vtlab/core/assets.py and the torch pin, and pip runs only when that
content differs. `make -n` prints what would run without running it, against a fake venv in a temporary copy."""

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT

pytestmark = [pytest.mark.cli, pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")]
INPUTS = ("pyproject.toml", "vtlab/core/assets.py")


def torch_pin() -> str:
    pins = set(re.findall(r"torch==[0-9][0-9.]*", (ROOT / "Makefile").read_text()))
    assert len(pins) == 1, pins
    return pins.pop()


def content_hash(root: Path) -> str:
    """The stamp's expected content, computed here from the files themselves."""
    data = b"".join((root / name).read_bytes() for name in INPUTS) + f"{torch_pin()}\n".encode()
    return hashlib.sha256(data).hexdigest()


def dry_install(root: Path, venv: Path) -> str:
    res = subprocess.run(
        ["make", "-n", "install", f"VENV={venv}"], cwd=root, capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stderr
    return res.stdout


@pytest.fixture
def copy(tmp_path: Path) -> tuple[Path, Path]:
    """A temporary copy of the Makefile and the install's inputs, and a fake venv whose python is a stub."""
    root = tmp_path / "repo"
    for name in ("Makefile", *INPUTS):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, root / name)
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\nexit 0\n")
    python.chmod(0o755)
    return root, tmp_path / "venv"


def test_a_stamp_with_the_content_hash_installs_nothing_even_when_the_inputs_are_newer(copy):
    root, venv = copy
    stamp = venv / ".installed"
    stamp.write_text(content_hash(root) + "\n")
    os.utime(stamp, (1_000_000, 1_000_000))  # the stamp far older than the files it was made from
    for name in INPUTS:
        (root / name).touch()
    out = dry_install(root, venv)
    assert "pip" not in out, out


@pytest.mark.parametrize("changed", INPUTS)
def test_a_changed_input_installs_again_and_writes_the_new_hash(copy, changed):
    root, venv = copy
    (venv / ".installed").write_text(content_hash(root) + "\n")
    with (root / changed).open("a") as f:
        f.write("\n# a change\n")
    out = dry_install(root, venv)
    assert f"pip --disable-pip-version-check install -q {torch_pin()}" in out, out
    assert "install -q -e '.[dev]'" in out and "vtlab.core.assets install" in out, out
    assert f"echo {content_hash(root)} > {venv}/.installed" in out, out


def test_no_stamp_or_an_old_empty_one_installs(copy):
    root, venv = copy
    assert "pip" in dry_install(root, venv)
    (venv / ".installed").write_text("")  # what a stamp made by `touch` holds
    assert "pip" in dry_install(root, venv)


def test_the_venv_running_these_tests_is_current():
    """The venv this suite runs in, installed by `make install`: a dry run right now installs nothing."""
    venv = Path(sys.prefix)
    if not (venv / ".installed").is_file():
        pytest.skip(f"{venv} was not installed by `make install` (no stamp)")
    assert (venv / ".installed").read_text().strip() == content_hash(ROOT), "the venv is stale: run `make install`"
    out = dry_install(ROOT, venv)
    assert "pip" not in out, out
