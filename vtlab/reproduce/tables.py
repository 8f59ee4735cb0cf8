"""The testbed's and the paper's tables as configs say them: conf/tables/<scale>.yaml (each table's rows, seeds, gates)
and the experiment configs of its rows (conf/experiment/<scale>/<table>/), composed with Hydra."""

from __future__ import annotations

import functools
from typing import Any

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import vtlab.report.selection as selection
from vtlab.core.errors import ConfigError
from vtlab.core.paths import CONF_DIR
from vtlab.evaluation import stats

CONF = CONF_DIR / "experiment"
TABLES = CONF_DIR / "tables"  # <scale>.yaml: that scale's tables, rows, default seeds (the one place they are defined)


def scales() -> list[str]:
    return sorted(p.stem for p in TABLES.glob("*.yaml"))


@functools.cache  # read once per process: every table lookup of a run asks it again
def tables_of(scale: str) -> dict[str, dict[str, Any]]:
    """conf/tables/<scale>.yaml in run order: table → {rows: [...] (a table of row files), seeds, optional}."""
    return OmegaConf.to_container(OmegaConf.load(TABLES / f"{scale}.yaml"), resolve=True)


def main_rows(scale: str, table: str = "main") -> list[str]:
    """The `experiment=` names of a row table's rows, in its order (conf/tables/<scale>.yaml); [] for none."""
    return [f"{scale}/{table}/{r}" for r in tables_of(scale).get(table, {}).get("rows", [])]


def is_row_table(scale: str, table: str) -> bool:
    return "rows" in tables_of(scale)[table]


def exists(scale: str, table: str) -> bool:
    if table not in tables_of(scale):
        return False
    if is_row_table(scale, table):
        return all((CONF / f"{row}.yaml").is_file() for row in main_rows(scale, table))
    return (CONF / scale / f"{table}.yaml").is_file()


def composed(experiment: str, hydra: bool = False) -> Any:
    """The composed config of `experiment` (with the `hydra` node, e.g. a sweep's params, when asked)."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return compose("config", overrides=[f"experiment={experiment}"], return_hydra_config=hydra)


def row_name(row: str) -> str:
    """The job name (the experiment config's `name`) of a row file, e.g. testbed/real-case/e5-vt → testbed-e5-vt."""
    return str(composed(row).name)


def selection_spec(scale: str, table: str) -> dict[str, Any] | None:
    """A row table's `selection` node (grid, eval, dataset, measure, seed, shared, extend) from its first row, or
    None."""
    rows = main_rows(scale, table)
    if not rows:
        return None
    spec = composed(rows[0]).get("selection")
    return None if spec is None else OmegaConf.to_container(spec, resolve=True)


def sweep_values(grid: dict[str, list[Any]]) -> list[str]:
    """Hydra sweep overrides for a grid: key=a,b (None as null)."""
    return [f"{k}={','.join(map(selection.override_text, v))}" for k, v in grid.items()]


def grid_keys(node: dict[str, Any] | None, prefix: str = "") -> list[tuple[str, list[Any]]]:
    """(dotted key, values) for each list in a nested `selection.grid` ({model: {optimizer: {lr: [a, b]}}})."""
    out = []
    for key, value in (node or {}).items():
        dotted = f"{prefix}.{key}" if prefix else key
        out += grid_keys(value, dotted) if isinstance(value, dict) else [(dotted, list(value))]
    return out


def table_seeds(scale: str, table: str) -> tuple[int, str]:
    """(the seeds a table runs, why): `power` in conf/tables/<scale>.yaml with an `sd` gives the seeds for that power
    of the primary's seed-level t against its `effect` at that per-seed SD (non-central t, stats.seeds_for_power);
    without one its pilot plans them (vtlab.reproduce.learning.pilot) and this is the fallback; otherwise the table's
    `seeds`."""
    spec = tables_of(scale)[table]
    power = spec.get("power")
    if power and "sd" not in power:
        return int(spec["seeds"]), (
            f"{table}: seeds planned by its pilot from the primary's measured spread ({spec['seeds']} where no plan "
            f"exists, conf/tables/{scale}.yaml)"
        )
    if not power:
        return int(spec["seeds"]), f"{table}: {spec['seeds']} seeds (conf/tables/{scale}.yaml)"
    n = stats.seeds_for_power(
        float(power["sd"]), float(power["effect"]), float(power.get("alpha", stats.ALPHA)), float(power["power"])
    )
    if n is None:
        raise ConfigError(f"conf/tables/{scale}.yaml: {table}.power: no number of seeds reaches it ({power})")
    why = (
        f"{table}: {n} seeds for {power['power']:.0%} power of the primary's seed-level t (alpha "
        f"{power.get('alpha', stats.ALPHA)}) against a difference of {power['effect']} at a per-seed SD of "
        f"{power['sd']}, measured on {power.get('sd_from', 'an earlier run')}"
    )
    return n, why
