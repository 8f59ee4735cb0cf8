"""A non-editable install carries every file vtlab reads from its own package at run time: the C kernels (compiled on
first use; without their sources the pooling and the exact top-k would fall back to their slow paths silently) and
the YAML files next to the code."""

from __future__ import annotations

from pathlib import Path

import tomllib
from helpers import ROOT


def test_every_c_source_and_yaml_in_the_package_is_package_data():
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["vtlab"]
    package = ROOT / "vtlab"
    files = sorted(p.relative_to(package) for ext in ("*.c", "*.yaml") for p in package.rglob(ext))
    assert files, "no C or YAML files found under vtlab/"
    missing = [str(f) for f in files if not any(Path(f).match(pattern) for pattern in patterns)]
    assert not missing, f"not in [tool.setuptools.package-data] vtlab: {missing}"
