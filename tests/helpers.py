"""Plain helpers shared by the test modules (importable at collection time, unlike fixtures)."""

from collections.abc import Iterable
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"


def compose_cfg(
    overrides: Iterable[str] = (), *, config_name: str = "config", config_dir: Path = CONF, hydra: bool = False
) -> DictConfig:
    """Hydra's compose of conf/ (as `python -m vtlab` would) with `overrides`; `hydra=True` keeps the `hydra` node
    (launcher, sweeper, run dir)."""
    with initialize_config_dir(str(config_dir), version_base="1.3"):
        return compose(config_name, overrides=list(overrides), return_hydra_config=hydra)


def one_error_line(stderr: str, expected: Iterable[str] = ()) -> str:
    """The single `vtlab: error:` line a refused command prints last, with no traceback and each of `expected` in it."""
    assert "Traceback" not in stderr, stderr[-3000:]
    errors = [line for line in stderr.splitlines() if line.startswith("vtlab: error: ")]
    assert len(errors) == 1 and stderr.strip().splitlines()[-1] == errors[0], stderr[-3000:]
    for needle in expected:
        assert needle in errors[0], errors[0]
    return errors[0]
