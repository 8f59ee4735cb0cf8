"""The selection stage of a row table (equal selection budget, vtlab/report/selection.py): every arm on the same grid
of settings at one seed, scored on dev; a shared setting chosen by the primary contrast's arms; a grid extended once
where a choice sits at its edge; an optional second stage; then one experiment config per arm with its choice."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import vtlab.report.selection as selection
from vtlab.core.overrides import quoted_list
from vtlab.reproduce.tables import grid_keys, main_rows, row_name, sweep_values


def selection_dirs(out: Path, table: str, stage: str = "select") -> tuple[Path, Path, Path]:
    """(the selection sweep, the chosen configs' search path, the second stage's sweep) of a row table; `stage`
    "pilot": the pilot's part of the selection (its gate arms)."""
    return out / f"{stage}-{table}", out / f"selected-{table}", out / f"{stage}-{table}-then"


def extend_dir(out: Path, table: str, stage: str = "select") -> Path:
    """The sweep that extends a grid whose choice sat at its edge."""
    return out / f"{stage}-{table}-extend"


def reuse_override(dirs: list[Path]) -> str:
    """`reuse_runs=[...]`: the finished jobs of these sweeps are copied, not retrained (vtlab/runs/reuse.py)."""
    return "reuse_runs=" + quoted_list([d.resolve() for d in dirs])


def extended(values: list[Any], edges: list[Any], factor: float) -> list[Any]:
    """The values one step beyond each chosen edge of a grid: the highest × `factor`, the lowest ÷ `factor`."""
    high = max(values)
    return [e * factor if e == high else e / factor for e in edges]


def _print_choices(spec: dict[str, Any], chosen: dict[str, selection.Choice]) -> None:
    for name, choice in chosen.items():
        print(
            f"selected on {selection.dev_name(spec['dataset'])} {spec['measure']}: {name} {choice.values} "
            f"({choice.score:.4f}; tried " + ", ".join(f"{v} {s:.4f}" for v, s in choice.tried) + ")",
            flush=True,
        )


def _first_choice(
    spec: dict[str, Any], sweeps: list[Path], grid: list[str], shared: list[str]
) -> tuple[dict[str, Any], dict[str, selection.Choice]]:
    """(the shared setting, every arm's best at it): without a shared grid, each arm's own best."""
    if not shared:
        return {}, selection.choose(sweeps, grid, spec["dataset"], spec["measure"])
    by = list(spec["shared"]["by"])
    pick = selection.choose_shared(sweeps, grid, shared, by, spec["dataset"], spec["measure"])
    means = ", ".join(f"{v} {m:.4f}" for v, m in pick.means)
    print(f"selected for every arm by the mean of {', '.join(by)}: {pick.values} (tried {means})", flush=True)
    return pick.values, pick.choices


def select_settings(
    spec: dict[str, Any],
    scale: str,
    table: str,
    out: Path,
    run: Callable[[list[str], Path], None],
    dry_run: bool = False,
    rows: list[str] | None = None,
    stage: str = "select",
    reuse: list[Path] | None = None,
    reuse_also: tuple[Path, ...] = (),
) -> tuple[list[str], dict[str, selection.Choice]]:
    """Run every arm of a row table on the selection grid (and the shared grid, `selection.shared`) at one seed,
    scored on dev (equal selection budget); choose the shared setting by the primary contrast's arms and each arm's
    own best at it; extend the grid once for every arm where a choice sits at its edge (`selection.extend`); run the
    second stage's settings (`selection.then`) at each arm's best; write each arm's config with its choice. Returns
    the table's `experiment=`/search-path/reuse overrides that run them, and the choices by arm name. `rows`: only
    these arms (the pilot's gate arms; default every row), into the sweeps named by `stage`; `reuse`: sweeps whose
    finished jobs with the same config are copied instead of retrained (the pilot's, for the table's selection);
    `reuse_also`: sweeps the table's own run reuses beside the selection's (the pilot's seeds)."""
    grid = dict(grid_keys(spec["grid"]))
    shared = dict(grid_keys((spec.get("shared") or {}).get("grid")))
    then = dict(grid_keys(spec.get("then")))
    rows = rows or main_rows(scale, table)
    sweep_dir, root, then_dir = selection_dirs(out, table, stage)
    common = [f"seed={spec['seed']}", f"eval={spec['eval']}"]
    earlier = [d for d in reuse or [] if d.is_dir()]
    common += [reuse_override(earlier)] if earlier else []
    # the grid first, so Hydra varies the arm fastest: jobs side by side are other arms, not waiting on one MLM cache
    run([*sweep_values(grid), *sweep_values(shared), f"experiment={','.join(rows)}", *common], sweep_dir)
    sweeps = [sweep_dir]
    root = root.resolve()
    search = "hydra.searchpath=" + quoted_list([f"file://{root}"])
    selected = f"{scale}/selected-{table}"
    names = {row_name(r): r for r in rows} if not dry_run else {}
    chosen: dict[str, selection.Choice] = {}
    if not dry_run:
        where, chosen = _first_choice(spec, sweeps, list(grid), list(shared))
        if (extend := spec.get("extend")) and (edges := selection.at_edges(chosen, extend["key"], grid[extend["key"]])):
            beyond = extended(grid[extend["key"]], edges, float(extend["factor"]))
            print(
                f"selection: a choice sits at the edge of {extend['key']}={grid[extend['key']]}; every arm tries "
                f"{beyond} on dev (once)",
                flush=True,
            )
            at = sweep_values({k: [v] for k, v in where.items()})
            run(
                [*sweep_values({extend["key"]: beyond}), *at, f"experiment={','.join(rows)}", *common],
                extend_dir(out, table, stage),
            )
            sweeps.append(extend_dir(out, table, stage))
            chosen = selection.choose(sweeps, list(grid), spec["dataset"], spec["measure"], where)
        selection.write_selected(chosen, names, root, selected)
    arms = f"experiment={','.join(selected + '/' + r.rsplit('/', 1)[1] for r in rows)}"
    if then:
        run([*sweep_values(then), arms, *common, search], then_dir)
        sweeps.append(then_dir)
        if not dry_run:
            chosen = selection.refine(chosen, selection.choose(then_dir, list(then), spec["dataset"], spec["measure"]))
            selection.write_selected(chosen, names, root, selected)
    _print_choices(spec, chosen)
    # seed 0 at the chosen setting was trained by the selection: evaluated on the test sets, not retrained
    return [arms, search, reuse_override([*sweeps, *reuse_also])], chosen
