"""Tests never touch the network: hub and wandb stay offline. The VTLAB_CACHE fixtures keep tests out of the user's
cache; pick by what the test needs: `shared_cache` (fast, built once), `fresh_cache` / `empty_cache` (builds from
nothing)."""

import contextlib
import os
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import helpers
import pytest
from helpers import compose_config
from omegaconf import DictConfig

import vtlab  # noqa: F401 - registers the resolvers conf/config.yaml uses (the run's name)

for _name, _value in helpers.OFFLINE.items():
    os.environ.setdefault(_name, _value)

# The tiers (Makefile): `make test-fast` runs the unit tier, `-m "not slow and not cli and not train"`; `make test` runs
# every tier. A test file marks its tests with `pytestmark = pytest.mark.<tier>` (or per test where a file mixes).
MARKERS = {
    "cli": "starts `python -m vtlab` or another subprocess",
    "train": "trains a model in process (Lightning fit, the pipeline with a fine-tune stage, MLM)",
    "slow": "heavy: builds real models, collections or tokenizers, or composes every shipped config (seconds each)",
}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        helpers.ALLOW_MISSING_FLAG,
        action="store_true",
        help="skip, not fail, a test whose offline asset or declared dependency is not installed",
    )


def pytest_configure(config: pytest.Config) -> None:
    for name, what in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {what}")
    helpers.ALLOW_MISSING["on"] = bool(config.getoption(helpers.ALLOW_MISSING_FLAG))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Every skip's reason, counted, in one line: what this CPU, build or install did not run."""
    reasons = Counter(
        str(rep.longrepr[2]).removeprefix("Skipped: ")
        for rep in terminalreporter.stats.get("skipped", [])
        if isinstance(rep.longrepr, tuple)
    )
    if reasons:
        terminalreporter.write_line(
            f"skips: {sum(reasons.values())} — " + "; ".join(f"{r} ×{n}" for r, n in reasons.most_common())
        )


@contextlib.contextmanager
def _vtlab_cache(path: Path) -> Iterator[Path]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VTLAB_CACHE", str(path))
        yield path


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """VTLAB_CACHE for this module = $VTLAB_TEST_CACHE, else one directory for the whole session: BoolQ collections
    and tiny backbones are built once for every module that uses it, never read from the user's cache."""
    with _vtlab_cache(Path(os.environ.get("VTLAB_TEST_CACHE", str(tmp_path_factory.getbasetemp() / "cache")))) as p:
        yield p


@pytest.fixture(scope="module")
def fresh_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """VTLAB_CACHE for this module = a new empty directory: the module exercises the build path itself, so nothing
    may come pre-built from another module (or $VTLAB_TEST_CACHE)."""
    with _vtlab_cache(tmp_path_factory.mktemp("vtlab-cache")) as p:
        yield p


@pytest.fixture
def empty_cache(tmp_path: Path) -> Iterator[Path]:
    """VTLAB_CACHE for this test = tmp_path/cache, empty: for tests that check what gets cached (or corrupt it)."""
    with _vtlab_cache(tmp_path / "cache") as p:
        yield p


@pytest.fixture
def compose() -> Callable[..., DictConfig]:
    """helpers.compose_config: Hydra's compose of conf/ with a test's overrides (`return_hydra_config=True` keeps the
    `hydra` node)."""
    return compose_config
