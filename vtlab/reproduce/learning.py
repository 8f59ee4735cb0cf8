"""A table's learning gate and its dev-only pilot: do the arms a table compares learn SPLADE to BM25's level on dev
within the recipe's budget? The gate runs after the table's selection and before its seeds (a failed gate makes the
table exploratory); the pilot (`python -m vtlab.reproduce --tables <t> --pilot`) asks the same of the gate arms at
seed 0 at their configured setting, on dev only (no evaluation set is scored), and prints go / no-go before the table
spends its budget."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import vtlab.report.selection as selection
from vtlab.report.discovery import State, collect_jobs
from vtlab.reproduce import gates
from vtlab.reproduce.selecting import selection_dirs
from vtlab.reproduce.tables import grid_keys, row_name, sweep_values, tables_of

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


def _reference(scale: str, table: str, spec: dict[str, Any], sweep: Path, run: Run) -> tuple[str, float]:
    """(name, dev score) of the gate's reference row (BM25), run on the same dev split at the selection's seed."""
    reference = f"{scale}/{tables_of(scale)[table]['learning_gate'].get('reference', 'references/bm25')}"
    run([f"experiment={reference}", f"eval={spec['eval']}", f"seed={spec['seed']}"], sweep)
    name = row_name(reference)
    return name, row_metric(sweep, name, spec["dataset"], spec["measure"])


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


def pilot(scale: str, table: str, spec: dict[str, Any], out: Path, run: Run, dry_run: bool = False) -> dict[str, Any]:
    """The dev-only pilot of a table: its gate rows at the selection's seed, each at its configured rate and at every
    value of the shared grid (`selection.shared`, e.g. the MLM length), scored on the dev suite alone, and the reference
    on the same split. The shared value is chosen by the table's own rule (the primary's arms' mean); the learning
    gate's verdict there is the go / no-go."""
    rows = gate_rows(scale, table)
    if not rows:
        raise gates.GateError(f"--pilot: table {table!r} has no learning gate (learning_gate.rows in conf/tables)")
    shared = dict(grid_keys((spec.get("shared") or {}).get("grid")))
    sweep = out / f"pilot-{table}"
    run([*sweep_values(shared), f"experiment={','.join(rows)}", f"seed={spec['seed']}", f"eval={spec['eval']}"], sweep)
    if dry_run:
        return {}
    if shared:
        pick = selection.choose_shared(
            sweep, [], list(shared), list(spec["shared"]["by"]), spec["dataset"], spec["measure"]
        )
        arms = {row_name(r): pick.choices[row_name(r)].score for r in rows}
        at = f" at {pick.values} (tried " + ", ".join(f"{v} {m:.4f}" for v, m in pick.means) + ")"
    else:
        arms = {row_name(r): row_metric(sweep, row_name(r), spec["dataset"], spec["measure"]) for r in rows}
        at = ""
    name, ref = _reference(scale, table, spec, out / f"pilot-{table}-bm25", run)
    result = gates.check_learning(arms, name, ref, spec, what=f"the {table} table would have")
    verdict = "go" if result["passed"] else "no-go"
    margins = ", ".join(f"{a} {s:.4f} ({s - ref:+.4f})" for a, s in arms.items())
    print(
        f"pilot {table}: {verdict} — {margins} against {name} {ref:.4f} on {spec['dataset']} {spec['measure']}{at} "
        f"(seed {spec['seed']}, dev only, no evaluation set scored)",
        flush=True,
    )
    return {**result, "verdict": verdict}
