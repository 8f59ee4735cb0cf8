"""A table's learning gate and its dev-only pilot: do the arms a table compares learn SPLADE to BM25's level on dev
within the recipe's budget, and how many seeds does its primary need? Where a table declares `power.pilot_seeds`
(conf/tables/<scale>.yaml) the pilot is the first part of its selection: the gate arms on the selection's grid at seed
0, the primary's two arms at their chosen setting at the other pilot seeds, BM25 on the same split; it reads the gate
as the table does (each arm at its best rate) and plans the table's seeds from the upper bound of the primary's
measured per-seed SD. `python -m vtlab.reproduce --tables <t> --pilot` runs it alone and prints go / no-go (no
evaluation set is scored); the table runs it first and reuses its jobs. Elsewhere the gate runs after the table's
selection and before its seeds (a failed gate makes the table exploratory)."""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import vtlab.report.selection as selection
from vtlab.core.overrides import quoted_list
from vtlab.evaluation import stats
from vtlab.report.discovery import State, collect_jobs
from vtlab.reproduce import gates
from vtlab.reproduce.selecting import extend_dir, select_settings, selection_dirs
from vtlab.reproduce.tables import composed, grid_keys, row_name, tables_of

Run = Callable[[list[str], Path], None]


def row_metric(
    sweep: Path, name: str, dataset: str | None = gates.GATE_DATASET, measure: str = gates.GATE_MEASURE
) -> float:
    """Mean over seeds of `measure` on `dataset` for the finished jobs named `name` in a sweep directory; `dataset`
    None: of each job's average over its collections (the tables' avg column)."""
    jobs, _ = collect_jobs(sweep)
    values = []
    for j in jobs:
        if j.name != name or j.state is not State.DONE:
            continue
        value = selection.dev_score(j.metrics, list(j.metrics) if dataset is None else [dataset], measure)
        if value is not None:
            values.append(value)
    if not values:
        where = "its collections" if dataset is None else dataset
        raise gates.GateError(f"gate: no finished job named {name!r} with {where} {measure} under {sweep}")
    return statistics.fmean(values)


def gate_rows(scale: str, table: str) -> list[str]:
    """The `experiment=` rows a table's learning gate reads (`learning_gate.rows` in conf/tables/<scale>.yaml)."""
    gate = tables_of(scale)[table].get("learning_gate") or {}
    return [f"{scale}/{table}/{r}" for r in gate.get("rows", [])]


def _reference(
    scale: str, table: str, spec: dict[str, Any], sweep: Path, run: Run, dry_run: bool = False
) -> tuple[str, float]:
    """(name, dev score) of the gate's reference row (BM25), run on the same dev split at the selection's seed."""
    reference = f"{scale}/{tables_of(scale)[table]['learning_gate'].get('reference', 'references/bm25')}"
    run([f"experiment={reference}", f"eval={spec['eval']}", f"seed={spec['seed']}"], sweep)
    name = row_name(reference)
    return name, (float("nan") if dry_run else row_metric(sweep, name, spec["dataset"], spec["measure"]))


def learning_gate(
    scale: str, table: str, spec: dict[str, Any], chosen: dict[str, selection.Choice], out: Path, run: Run
) -> dict[str, Any] | None:
    """A table's learning gate: each gate row's best dev score (the selection's) against the reference row's on the
    same dev split, which this runs; None where the table has none."""
    rows = gate_rows(scale, table)
    if not rows:
        return None
    arms = [row_name(r) for r in rows]
    if missing := [a for a in arms if a not in chosen]:
        raise gates.GateError(
            f"learning gate: {', '.join(missing)} have no dev score in {selection_dirs(out, table)[0]}"
        )
    name, ref = _reference(scale, table, spec, out / f"select-{table}-bm25", run)
    return gates.check_learning({a: chosen[a].score for a in arms}, name, ref, spec)


def pilot_dirs(out: Path, table: str) -> dict[str, Path]:
    """The pilot's sweeps: its part of the selection (`select`, with `extend`), the primary's extra seeds and the
    reference."""
    select = selection_dirs(out, table, "pilot")[0]
    return {
        "select": select,
        "extend": extend_dir(out, table, "pilot"),
        "seeds": out / f"pilot-{table}-seeds",
        "reference": out / f"pilot-{table}-bm25",
    }


def _primary_rows(scale: str, table: str, rows: list[str]) -> list[str]:
    """The gate rows of the table's declared primary contrast, in its order (A, B)."""
    names = {row_name(r): r for r in rows}
    primary = list(composed(rows[0]).report.get("primary") or [])
    if len(primary) != 2 or any(a not in names for a in primary):
        raise gates.GateError(f"--pilot: the primary {primary} of {table} is not two of its gate rows {list(names)}")
    return [names[a] for a in primary]


def _seed_scores(
    sweeps: list[Path], name: str, spec: dict[str, Any], values: dict[str, Any] | None = None
) -> dict[int, float]:
    """seed → the dev-suite average of `measure` (the mean over the job's dev collections: the dev side of the table's
    avg column) of the finished jobs named `name` in the sweeps, those at the setting `values` where given."""
    out = {}
    for sweep in sweeps:
        if not sweep.is_dir():
            continue
        for j in collect_jobs(sweep)[0]:
            if j.name != name or j.state is not State.DONE or j.seed is None:
                continue
            if values and selection.setting_of(j.overrides, list(values)) != values:
                continue
            value = selection.dev_score(j.metrics, list(j.metrics), spec["measure"])
            if value is not None:
                out[int(j.seed)] = value
    return out


def seed_differences(
    chosen: dict[str, selection.Choice], dirs: dict[str, Path], primary: tuple[str, str], spec: dict[str, Any], n: int
) -> list[float]:
    """The primary's per-seed difference A − B of the dev-suite average at seeds 0 .. n − 1: seed 0 the selection's
    chosen jobs, the others the pilot's seed sweep. A seed missing on either side is an error naming it."""
    a, b = primary
    scores = {
        arm: {
            **_seed_scores([dirs["select"], dirs["extend"]], arm, spec, chosen[arm].values),
            **_seed_scores([dirs["seeds"]], arm, spec),
        }
        for arm in primary
    }
    wanted = [spec["seed"], *[s for s in range(n) if s != spec["seed"]]][:n]
    if missing := [s for s in wanted if s not in scores[a] or s not in scores[b]]:
        raise gates.GateError(f"--pilot: no dev score of {a} or {b} at seed {missing} in {dirs['seeds'].parent}")
    return [scores[a][s] - scores[b][s] for s in wanted]


def pilot(scale: str, table: str, spec: dict[str, Any], out: Path, run: Run, dry_run: bool = False) -> dict[str, Any]:
    """The dev-only pilot of a table, which is its selection's first part: the gate rows on the selection's grid at its
    seed (select_settings: the same grid, extension and choice as the table), the primary's two arms at their chosen
    setting at the pilot's other seeds (`power.pilot_seeds` in conf/tables/<scale>.yaml: those jobs become the table's
    seeds), and the reference on the same split. Go: every gate arm reaches the reference and a seed count reaches the
    table's power at the upper bound of the primary's per-seed SD (stats.seed_plan). No evaluation set is scored."""
    rows = gate_rows(scale, table)
    if not rows:
        raise gates.GateError(f"--pilot: table {table!r} has no learning gate (learning_gate.rows in conf/tables)")
    power = tables_of(scale)[table].get("power") or {}
    n = int(power.get("pilot_seeds", 1))
    dirs = pilot_dirs(out, table)
    _, chosen = select_settings(spec, scale, table, out, run, dry_run, rows=rows, stage="pilot")
    primary = _primary_rows(scale, table, rows)
    root = selection_dirs(out, table)[1].resolve()
    if n > 1:
        arms = ",".join(f"{scale}/selected-{table}/{r.rsplit('/', 1)[1]}" for r in primary)
        others = ",".join(str(s) for s in range(n) if s != spec["seed"])
        search = "hydra.searchpath=" + quoted_list([f"file://{root}"])
        run([f"experiment={arms}", search, f"seed={others}", f"eval={spec['eval']}"], dirs["seeds"])
    name, ref = _reference(scale, table, spec, dirs["reference"], run, dry_run)
    if dry_run:
        return {}
    for key, values in grid_keys(spec["grid"]):
        if len(values) > 1 and (
            edge := [a for a, c in chosen.items() if c.values.get(key) in (min(values), max(values))]
        ):
            print(f"pilot {table}: {', '.join(edge)} chose an edge of {key}={values} (the grid is not extended)")
    arms_scores = {row_name(r): chosen[row_name(r)].score for r in rows}
    result = gates.check_learning(arms_scores, name, ref, spec, what=f"the {table} table at this budget")
    plan = None
    if n > 1:
        pair = (row_name(primary[0]), row_name(primary[1]))
        diffs = seed_differences(chosen, dirs, pair, spec, n)
        plan = stats.seed_plan(
            diffs,
            float(power["effect"]),
            float(power.get("alpha", stats.ALPHA)),
            float(power.get("power", 0.8)),
            float(power.get("confidence", 0.8)),
        )
    go = result["passed"] and (plan is None or plan.seeds is not None)
    margins = ", ".join(f"{a} {s:.4f} ({s - ref:+.4f})" for a, s in arms_scores.items())
    print(
        f"pilot {table}: {'go' if go else 'no-go'} — {margins} against {name} {ref:.4f} on {spec['dataset']} "
        f"{spec['measure']} (seed {spec['seed']}, each at its chosen setting, dev only, no evaluation set scored)",
        flush=True,
    )
    if plan is not None:
        print(render_plan(table, plan), flush=True)
    return {
        **result,
        "passed": go,
        "verdict": "go" if go else "no-go",
        "chosen": {a: c.values for a, c in chosen.items()},
        "plan": None if plan is None else dataclasses.asdict(plan),
    }


def render_plan(table: str, plan: stats.SeedPlan) -> str:
    """One line: the measured spread and the seeds it asks for."""
    seeds = f"{plan.seeds} seeds" if plan.seeds is not None else f"no seed count up to {stats.MAX_SEEDS}"
    diffs = ", ".join(f"{d:+.4f}" for d in plan.per_seed)
    return (
        f"pilot {table} seed plan: the primary's per-seed difference of the dev-suite average {diffs} "
        f"(SD {plan.sd:.4f}, upper {plan.confidence:.0%} bound {plan.sd_bound:.4f}); {seeds} for {plan.power:.0%} "
        f"power of its seed-level t (alpha {plan.alpha}) against {plan.effect} at that bound"
    )
