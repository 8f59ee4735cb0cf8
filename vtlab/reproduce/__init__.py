"""`make reproduce-table`: run the paper's main table and its ablations as Hydra sweeps, then build the tables with
`vtlab.report`.

    python -m vtlab.reproduce                          # the testbed (offline, 2 cores): real pretrained weights,
                                                       # the default tables at their seeds, with the gates
    python -m vtlab.reproduce --tables real-case       # an optional table (here with the references it needs)
    python -m vtlab.reproduce --scale paper            # the authors' recipe through hydra/launcher=slurm (GPUs, hub)
    python -m vtlab.reproduce --tables real-case --preset gpu   # a table's recipe for one GPU, its time estimated

Each scale's tables, in run order, with their rows and default seeds, are defined in conf/tables/<scale>.yaml: a
table of rows runs those files of conf/experiment/<scale>/<table>/ in that order; each ablation is one experiment
config whose `hydra.sweeper.params` lists its values. Sweeps write to <out>/<table>/
— one directory per table — and a rerun into the same directory overwrites it, so pass another --out to keep an
earlier run. At the testbed scale the gates of vtlab/reproduce/gates.py run first (the case gate, before any row), per
table (a table's learning gate: below it, the table is reported as exploratory) and last (the control and quality
gates); a failed case, control or quality gate exits 3 with one line.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from vtlab.core.errors import VtlabError
from vtlab.core.overrides import override, quoted_list, shell_line
from vtlab.report import selection
from vtlab.report.discovery import EXPLORATORY_FILE, write_exploratory
from vtlab.reproduce import gates, mlm_rate, paper_plan, presets
from vtlab.reproduce.learning import learning_gate, pilot, pilot_dirs, row_metric
from vtlab.reproduce.selecting import select_settings, selection_dirs
from vtlab.reproduce.tables import (
    CONF,
    TABLES,
    composed,
    exists,
    is_row_table,
    main_rows,
    row_name,
    scales,
    selection_spec,
    table_seeds,
    tables_of,
)

__all__ = ["main", "main_rows", "row_metric", "select_settings", "selection_dirs", "sweeps", "tables_of"]
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def sweeps(scale: str, seeds: int | None, tables: list[str], out: Path | None = None) -> dict[str, list[str]]:
    """table → the `python -m vtlab -m` overrides that run it (`seeds`: None for each table's default). With `out`
    (where the sweeps go), the ablations may reuse the main table's finished jobs: an ablation's default value repeats
    a main row (vtlab/runs/reuse.py)."""
    sweeps_ = {}
    for table in tables:
        n = seeds if seeds is not None else table_seeds(scale, table)[0]
        seed = "seed=" + ",".join(str(s) for s in range(n))
        rows = is_row_table(scale, table)
        experiment = ",".join(main_rows(scale, table)) if rows else f"{scale}/{table}"
        sweeps_[table] = [f"experiment={experiment}", seed]
        reused = [
            t for t in ["main", *tables_of(scale)[table].get("needs", [])] if t in tables and is_row_table(scale, t)
        ]
        if out is not None and not rows and reused:
            sweeps_[table].append("reuse_runs=" + quoted_list([(out / t).resolve() for t in reused]))
    return sweeps_


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m vtlab.reproduce", description=__doc__.split("\n\n")[0])
    p.add_argument("--scale", choices=scales(), default="testbed")
    p.add_argument(
        "--seeds",
        type=int,
        default=None,
        help="seeds for every table (default: each table's own, `seeds` in conf/tables/<scale>.yaml)",
    )
    p.add_argument(
        "--tables", default=None, help="comma-separated, e.g. main,real-case (default: the tables not marked optional)"
    )
    p.add_argument("--no-gates", action="store_true", help="testbed: skip the sanity gates (smoke runs only)")
    p.add_argument("--out", type=Path, default=None, help="default: outputs/reproduce/<scale>")
    p.add_argument(
        "--launcher",
        default=None,
        help="hydra/launcher choice (default: slurm for paper; testbed: parallel with --jobs > 1, else basic)",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=2,
        help="jobs side by side at one thread each (hydra/launcher=parallel; 1: one job at a time, all threads)",
    )
    p.add_argument(
        "--pilot",
        action="store_true",
        help="the tables' learning-gate arms at seed 0 on dev only (no evaluation set scored): go / no-go",
    )
    p.add_argument(
        "--sensitivity",
        action="store_true",
        help="also run each table's teacher sensitivity (`sensitivity` in conf/tables/<scale>.yaml)",
    )
    p.add_argument(
        "--preset",
        choices=sorted(presets.PRESETS),
        default=None,
        help="a table's recipe for another machine (vtlab/reproduce/presets.py), its time estimated before it starts",
    )
    p.add_argument("--dry-run", action="store_true", help="print the commands only")
    p.add_argument("extra", nargs="*", help="extra Hydra overrides for every job, e.g. trainer.max_steps=50")
    return p.parse_args(argv)


def _chosen_for(table: str, scale: str, chosen: dict[str, selection.Choice]) -> list[str]:
    """An ablation runs on a main arm (`selection.arm` in its config) with that arm's settings chosen on dev, except
    those of what it varies itself (ablation-apc sweeps `apc`: the arm's choice of APC is not imposed on its rows)."""
    cfg = composed(f"{scale}/{table}", hydra=True)
    arm = OmegaConf.select(cfg, "selection.arm")
    if arm is None or not chosen:
        return []
    varied = {str(key).split(".")[0] for key in OmegaConf.select(cfg, "hydra.sweeper.params", default={}) or {}}
    return [f"{k}={selection.override_text(v)}" for k, v in chosen[arm].values.items() if k.split(".")[0] not in varied]


def with_mlm_rate(run: Any, scale: str, table: str, fixed: list[str]) -> Any:
    """`run` with the MLM rate the rule chose (mlm_rate.choose) added to every job of this table's rows."""
    if not fixed:
        return run

    def table_run(overrides: list[str], sweep_dir: Path) -> None:
        experiment = next((o.split("=", 1)[1] for o in overrides if o.startswith("experiment=")), "")
        mine = any(f"{scale}/{t}/" in experiment for t in (table, f"selected-{table}"))
        run([*overrides, *(fixed if mine else [])], sweep_dir)

    return table_run


def has_pilot(scale: str, table: str) -> bool:
    """A table whose pilot plans its seeds (`power.pilot_seeds` and a learning gate in conf/tables/<scale>.yaml)."""
    spec = tables_of(scale)[table]
    return bool((spec.get("learning_gate") or {}).get("rows")) and bool((spec.get("power") or {}).get("pilot_seeds"))


def _seed_overrides(
    args: argparse.Namespace, table: str, overrides: list[str], learning: dict[str, Any] | None, out: Path | None
) -> list[str]:
    """The table's `seed=` from its pilot's plan (out: where the pilot ran; None: the table's own seeds), unless
    --seeds says otherwise or the plan reached no seed count (then the table's `seeds`, said in a line)."""
    if out is None or args.seeds is not None or args.dry_run:
        return overrides
    plan = (learning or {}).get("plan") or {}
    n = plan.get("seeds")
    if n is None:
        n = int(tables_of(args.scale)[table]["seeds"])
        print(f"seeds: {table}: the pilot's plan reached no seed count; {n} seeds (conf/tables), underpowered")
    else:
        print(f"seeds: {table}: {n} seeds, planned by its pilot (upper bound of the per-seed SD)", flush=True)
    return [o for o in overrides if not o.startswith("seed=")] + ["seed=" + ",".join(str(s) for s in range(n))]


def _check_gates(out: Path, tables: list[str], scale: str = "testbed") -> dict[str, Any]:
    """The gates after the main table: the undamaged control (M_wp fine-tuned no worse than SPLADE-tiny as is, on the
    table's average over its collections and on each set no selection saw, `control.unselected` in
    conf/tables/<scale>.yaml) and quality (M_wp above BM25 on BoolQ-clean); a GateError names the failed one."""
    if not {"main", "references"} <= set(tables):
        return {}
    wp_avg = row_metric(out / "main", "testbed-wp-native", dataset=None)
    wp = row_metric(out / "main", "testbed-wp-native")
    result = {
        "control": gates.check_control(
            wp_avg, row_metric(out / "references", "testbed-splade-tiny", dataset=None), out / "main"
        )
    }
    for dataset in (tables_of(scale)["main"].get("control") or {}).get("unselected", []):
        result[f"control:{dataset}"] = gates.check_control(
            row_metric(out / "main", "testbed-wp-native", dataset=dataset),
            row_metric(out / "references", "testbed-splade-tiny", dataset=dataset),
            out / "main",
            on=dataset,
        )
    result["quality"] = gates.check_quality(wp, row_metric(out / "references", "testbed-bm25"), out / "main")
    return result


def sensitivity_dirs(scale: str, table: str, out: Path) -> dict[str, Path]:
    """teacher → the sweep of the table's sensitivity runs under that teacher (`sensitivity` in
    conf/tables/<scale>.yaml, run with --sensitivity), in its order; {} where the table has none."""
    spec = tables_of(scale)[table].get("sensitivity") or {}
    return {t: out / f"{table}-teacher-{t}" for t in spec.get("teacher", [])}


def _sensitivity_overrides(scale: str, table: str, teacher: str, table_overrides: list[str]) -> list[str]:
    """The arms of the sensitivity's contrasts at their chosen settings (the table's selected configs), fine-tuned
    from `teacher` at the sensitivity's seeds; their report holds those contrasts, the table's primary among them."""
    spec = tables_of(scale)[table]["sensitivity"]
    arms = table_overrides[0].split("=", 1)[1].split(",")  # experiment=<selected arm>,... in the table's row order
    rows = tables_of(scale)[table]["rows"]
    wanted = [r for r in rows if any(r in pair for pair in spec["contrasts"])]
    search = [o for o in table_overrides if o.startswith("hydra.searchpath=")]
    names = {r: row_name(f"{scale}/{table}/{r}") for r in wanted}
    pairs = ",".join(f"[{names[a]},{names[b]}]" for a, b in spec["contrasts"])
    primary = [list(p) for p in spec["contrasts"] if list(map(names.get, p)) == _primary(scale, table)]
    return [
        f"experiment={','.join(arms[rows.index(r)] for r in wanted)}",
        *search,
        f"teacher={teacher}",
        "seed=" + ",".join(str(i) for i in range(int(spec["seeds"]))),
        f"++report.contrasts=[{pairs}]",
        f"++report.primary=[{','.join(names[r] for r in primary[0])}]" if primary else "++report.primary=null",
    ]


def _primary(scale: str, table: str) -> list[str]:
    """The job names of a row table's declared primary contrast (report.primary of its first row)."""
    primary = composed(main_rows(scale, table)[0]).report.get("primary")
    return list(primary) if primary else []


def _tables_with_needs(scale: str, tables: list[str]) -> list[str]:
    """`tables` and the tables they need (`needs` in conf/tables/<scale>.yaml), in the file's order."""
    wanted = set(tables)
    for table in tables:
        wanted |= set(tables_of(scale).get(table, {}).get("needs", []))
    return [t for t in tables_of(scale) if t in wanted]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.seeds is not None and args.seeds < 1:
        print(f"vtlab: error: --seeds={args.seeds}: expected >= 1", file=sys.stderr)
        return 2
    default = [t for t, spec in tables_of(args.scale).items() if not spec.get("optional", False)]
    tables = [t for t in args.tables.split(",") if t] if args.tables else default
    unknown = [t for t in tables if not exists(args.scale, t)]
    if unknown:
        print(
            f"vtlab: error: --tables: {unknown}: expected tables of {TABLES / (args.scale + '.yaml')} with their "
            f"experiment configs under {CONF / args.scale}: {', '.join(tables_of(args.scale))}",
            file=sys.stderr,
        )
        return 2
    preset, extra = None, list(args.extra)
    if args.preset is not None:
        preset = presets.PRESETS[args.preset]
        if args.scale != "testbed" or not set(tables) <= set(preset.tables):
            print(
                f"vtlab: error: --preset {args.preset}: written for --tables {','.join(preset.tables)} at the "
                f"testbed scale ({preset.what}), not {args.scale} {','.join(tables)}",
                file=sys.stderr,
            )
            return 2
        extra = presets.with_extra(preset, extra)
        for table in tables:
            n = args.seeds if args.seeds is not None else table_seeds(args.scale, table)[0]
            spec = selection_spec(args.scale, table) or {}
            est = presets.estimate(preset, args.scale, table, spec, n, list(args.extra), args.pilot)
            print(presets.render(preset, args.preset, table, est, args.pilot), flush=True)
    tables = _tables_with_needs(args.scale, tables)
    out = args.out or Path("outputs") / "reproduce" / args.scale
    launcher = args.launcher or ("slurm" if args.scale == "paper" else "parallel" if args.jobs > 1 else None)
    dirs, planned, slurm = [], sweeps(args.scale, args.seeds, tables, out), []
    if args.scale == "paper":  # the plan (jobs, GPU-hours) before anything is submitted (vtlab/reproduce/paper_plan.py)
        try:
            jobs = paper_plan.plan(planned)
        except VtlabError as e:
            print(f"vtlab: error: {e}", file=sys.stderr)
            return 2
        print(paper_plan.render(jobs), flush=True)
        slurm = paper_plan.launcher_overrides(jobs) if launcher == "slurm" else []
    # small models use a second core better as a second job than as a second thread (hydra/launcher=parallel)
    env = {**os.environ, **(dict.fromkeys(THREAD_VARS, "1") if launcher == "parallel" else {})}
    if launcher == "parallel":
        slurm = [f"hydra.launcher.n_jobs={args.jobs}"]

    def run(overrides: list[str], sweep_dir: Path) -> None:
        mine = extra if preset is not None and presets.applies(preset, args.scale, overrides) else args.extra
        cmd = [sys.executable, "-m", "vtlab", "-m", *overrides, override("hydra.sweep.dir", sweep_dir), *mine]
        if launcher:
            cmd += [f"hydra/launcher={launcher}", *slurm]
        print("+ " + shell_line(cmd), flush=True)
        if not args.dry_run:
            # a failed job does not stop the sweep (vtlab/__main__.py records it); the report shows it
            subprocess.run(cmd, check=False, env=env)

    if args.seeds is None:
        for table in tables:
            print(f"seeds: {table_seeds(args.scale, table)[1]}", flush=True)
    if args.pilot:
        return _pilot(args, tables, out, run)
    gated = args.scale == "testbed" and not args.no_gates and not args.dry_run
    report: dict[str, Any] = {}
    try:
        if gated and "main" in tables:  # before any row: a testbed whose cased model is not cased cannot answer
            gates.build_all(jobs=args.jobs)
            report["case"] = gates.case_report()
            print("case handling (vtlab/diagnose/case.py): " + json.dumps(report["case"]), flush=True)
            gates.write(out / "gates.json", report)
            gates.check_case(report["case"])
        chosen: dict[str, dict[str, selection.Choice]] = {}
        rates: dict[str, list[str]] = {}  # table → its MLM rate rule's override (mlm_rate.choose)
        for table, overrides in planned.items():
            row_table = is_row_table(args.scale, table)
            spec = selection_spec(args.scale, table) if row_table else None
            exploratory, trun = None, run
            if spec is not None:
                rates[table] = mlm_rate.choose(args.scale, table, 0, out, run, args.dry_run)
                trun = with_mlm_rate(run, args.scale, table, rates[table])
                piloted = has_pilot(args.scale, table) and args.scale == "testbed" and not args.no_gates
                earlier = [pilot_dirs(out, table)[k] for k in ("select", "extend")] if piloted else []
                learning = pilot(args.scale, table, spec, out, trun, args.dry_run) if piloted else None
                seeds_dir = (pilot_dirs(out, table)["seeds"],) if piloted else ()
                rows, chosen[table] = select_settings(
                    spec, args.scale, table, out, trun, args.dry_run, reuse=earlier, reuse_also=seeds_dir
                )
                if gated and not piloted:
                    learning = learning_gate(args.scale, table, spec, chosen[table], out, trun)
                if learning:
                    report[f"learning:{table}"] = learning
                    gates.write(out / "gates.json", report)
                    exploratory = learning.get("exploratory")
                overrides = _seed_overrides(args, table, overrides, learning, out if piloted else None)
                reuse = [o for o in rows if o.startswith("reuse_runs=")]
                overrides = (
                    [o for o in rows if not o.startswith("reuse_runs=")]
                    + [o for o in overrides if not o.startswith("experiment=")]
                    + reuse
                )
            elif not row_table:  # an ablation on a row table's arm: its choices and its MLM rate
                overrides = overrides + _chosen_for(
                    table, args.scale, {a: c for t in chosen.values() for a, c in t.items()}
                )
                overrides += [o for t in tables_of(args.scale)[table].get("needs", []) for o in rates.get(t, [])]
            dirs.append(out / table)
            trun(overrides, out / table)
            if not args.dry_run:
                mark_exploratory(out / table, exploratory)
            for teacher, sweep_dir in (sensitivity_dirs(args.scale, table, out) if args.sensitivity else {}).items():
                dirs.append(sweep_dir)
                trun(_sensitivity_overrides(args.scale, table, teacher, overrides), sweep_dir)
                if not args.dry_run:
                    mark_exploratory(sweep_dir, exploratory)
    except VtlabError as e:
        print(f"vtlab: error: {e}", file=sys.stderr)
        return 3 if isinstance(e, gates.GateError) else 2
    if args.dry_run:
        return 0
    cmd = [sys.executable, "-m", "vtlab.report", *map(str, dirs)]
    print("+ " + shell_line(cmd), flush=True)
    code = subprocess.run(cmd, check=False).returncode
    if gated:
        try:
            after = _check_gates(out, tables, args.scale)
            report.update(after)
            gates.write(out / "gates.json", report)
            print(f"gates passed: {json.dumps(after)}", flush=True)
        except VtlabError as e:
            print(f"vtlab: error: {e}", file=sys.stderr)
            return 3
    return code


def _pilot(args: argparse.Namespace, tables: list[str], out: Path, run: Any) -> int:
    """`--pilot`: each asked table with a learning gate, its MLM rate rule and its gate arms on dev only; exit 0 when
    every one is a go, 3 when one is not (the line says which arm and by how much)."""
    asked = [t for t in tables if (tables_of(args.scale)[t].get("learning_gate") or {}).get("rows")]
    if not asked:
        print(
            f"vtlab: error: --pilot: none of {tables} has a learning gate (learning_gate.rows in {TABLES})",
            file=sys.stderr,
        )
        return 2
    verdicts = {}
    try:
        for table in asked:
            spec = selection_spec(args.scale, table)
            fixed = mlm_rate.choose(args.scale, table, 0, out, run, args.dry_run)
            verdicts[table] = pilot(
                args.scale, table, spec, out, with_mlm_rate(run, args.scale, table, fixed), args.dry_run
            )
    except VtlabError as e:
        print(f"vtlab: error: {e}", file=sys.stderr)
        return 3 if isinstance(e, gates.GateError) else 2
    if not args.dry_run:
        gates.write(out / "pilot.json", verdicts)
    return 0 if all(v.get("passed", True) for v in verdicts.values()) else 3


def mark_exploratory(sweep: Path, reason: str | None) -> None:
    """A table whose learning gate failed is reported without verdicts (vtlab.report reads the marker); a table that
    passed loses a marker an earlier run left."""
    marker = sweep / EXPLORATORY_FILE
    if reason is None:
        marker.unlink(missing_ok=True)
    else:
        write_exploratory(sweep, reason)
