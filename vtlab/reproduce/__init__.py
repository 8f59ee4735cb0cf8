"""`make reproduce-table`: run the paper's main table and its ablations as Hydra sweeps, then build the tables with
`vtlab.report`.

    python -m vtlab.reproduce                          # the testbed (offline, 2 cores): real pretrained weights,
                                                       # the default tables at their seeds, with the gates
    python -m vtlab.reproduce --tables real-case       # an optional table (here with the references it needs)
    python -m vtlab.reproduce --scale paper            # the authors' recipe through hydra/launcher=slurm (GPUs, hub)

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
import functools
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from vtlab.core.errors import VtlabError
from vtlab.core.paths import CONF_DIR
from vtlab.report import selection
from vtlab.report.discovery import EXPLORATORY_FILE, State, collect_jobs, write_exploratory
from vtlab.reproduce import gates, paper_plan

CONF = CONF_DIR / "experiment"
TABLES = CONF_DIR / "tables"  # <scale>.yaml: that scale's tables, rows, default seeds (the one place they are defined)
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def scales() -> list[str]:
    return sorted(p.stem for p in TABLES.glob("*.yaml"))


@functools.cache  # read once per process: every table lookup of a run asks it again
def tables_of(scale: str) -> dict[str, dict[str, Any]]:
    """conf/tables/<scale>.yaml in run order: table → {rows: [...] (a table of row files), seeds, optional}."""
    return OmegaConf.to_container(OmegaConf.load(TABLES / f"{scale}.yaml"), resolve=True)


def main_rows(scale: str, table: str = "main") -> list[str]:
    """The `experiment=` names of a row table's rows, in its order (conf/tables/<scale>.yaml); [] for none."""
    return [f"{scale}/{table}/{r}" for r in tables_of(scale).get(table, {}).get("rows", [])]


def _is_row_table(scale: str, table: str) -> bool:
    return "rows" in tables_of(scale)[table]


def _exists(scale: str, table: str) -> bool:
    if table not in tables_of(scale):
        return False
    if _is_row_table(scale, table):
        return all((CONF / f"{row}.yaml").is_file() for row in main_rows(scale, table))
    return (CONF / scale / f"{table}.yaml").is_file()


def sweeps(scale: str, seeds: int | None, tables: list[str], out: Path | None = None) -> dict[str, list[str]]:
    """table → the `python -m vtlab -m` overrides that run it (`seeds`: None for each table's default). With `out`
    (where the sweeps go), the ablations may reuse the main table's finished jobs: an ablation's default value repeats
    a main row (vtlab/runs/reuse.py)."""
    sweeps_ = {}
    for table in tables:
        n = seeds if seeds is not None else tables_of(scale)[table]["seeds"]
        seed = "seed=" + ",".join(str(s) for s in range(n))
        rows = _is_row_table(scale, table)
        experiment = ",".join(main_rows(scale, table)) if rows else f"{scale}/{table}"
        sweeps_[table] = [f"experiment={experiment}", seed]
        if out is not None and not rows and "main" in tables:
            sweeps_[table].append(f"reuse_runs=['{(out / 'main').resolve()}']")
    return sweeps_


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
    p.add_argument("--dry-run", action="store_true", help="print the commands only")
    p.add_argument("extra", nargs="*", help="extra Hydra overrides for every job, e.g. trainer.max_steps=50")
    return p.parse_args(argv)


def _selection_spec(scale: str, table: str) -> dict[str, Any] | None:
    """A row table's `selection` node (grid, eval, dataset, measure, seed) from its first row, or None."""
    rows = main_rows(scale, table)
    if not rows:
        return None
    spec = _composed(rows[0]).get("selection")
    return None if spec is None else OmegaConf.to_container(spec, resolve=True)


def selection_dirs(out: Path, table: str) -> tuple[Path, Path, Path]:
    """(the selection sweep, the chosen configs' search path, the second stage's sweep) of a row table."""
    return out / f"select-{table}", out / f"selected-{table}", out / f"select-{table}-then"


def select_settings(
    spec: dict[str, Any],
    scale: str,
    table: str,
    out: Path,
    run: Callable[[list[str], Path], None],
    dry_run: bool = False,
) -> tuple[list[str], dict[str, selection.Choice]]:
    """Run every arm of a row table on the selection grid at one seed, scored on dev (equal selection budget), then
    on the second stage's settings (`selection.then`) at its best, and write each arm's config with its choice;
    returns the table's `experiment=`/search-path/reuse overrides that run them, and the choices by arm name."""
    grid = dict(_grid_keys(spec["grid"]))
    then = dict(_grid_keys(spec.get("then") or {}))
    rows = main_rows(scale, table)
    sweep_dir, root, then_dir = selection_dirs(out, table)
    common = [f"seed={spec['seed']}", f"eval={spec['eval']}"]
    # the grid first, so Hydra varies the arm fastest: jobs side by side are other arms, not waiting on one MLM cache
    run([*_sweep_values(grid), f"experiment={','.join(rows)}", *common], sweep_dir)
    root = root.resolve()
    search = f"hydra.searchpath=[file://{root}]"
    selected = f"{scale}/selected-{table}"
    names = {_row_name(r): r for r in rows} if not dry_run else {}
    chosen: dict[str, selection.Choice] = {}
    if not dry_run:
        chosen = selection.choose(sweep_dir, list(grid), spec["dataset"], spec["measure"])
        selection.write_selected(chosen, names, root, selected)
    arms = f"experiment={','.join(selected + '/' + r.rsplit('/', 1)[1] for r in rows)}"
    if then:
        run([*_sweep_values(then), arms, *common, search], then_dir)
        if not dry_run:
            chosen = selection.refine(chosen, selection.choose(then_dir, list(then), spec["dataset"], spec["measure"]))
            selection.write_selected(chosen, names, root, selected)
    for name, choice in chosen.items():
        print(
            f"selected on {selection.dev_name(spec['dataset'])} {spec['measure']}: {name} {choice.values} "
            f"({choice.score:.4f}; tried " + ", ".join(f"{v} {s:.4f}" for v, s in choice.tried) + ")",
            flush=True,
        )
    # seed 0 at the chosen setting was trained by the selection: evaluated on the test sets, not retrained
    reuse = ",".join(f"'{d.resolve()}'" for d in ([sweep_dir, then_dir] if then else [sweep_dir]))
    return [arms, search, f"reuse_runs=[{reuse}]"], chosen


def _sweep_values(grid: dict[str, list[Any]]) -> list[str]:
    """Hydra sweep overrides for a grid: key=a,b (None as null)."""
    return [f"{k}={','.join(map(selection.override_text, v))}" for k, v in grid.items()]


def _grid_keys(node: dict[str, Any], prefix: str = "") -> list[tuple[str, list[Any]]]:
    """(dotted key, values) for each list in a nested `selection.grid` ({model: {optimizer: {lr: [a, b]}}})."""
    out = []
    for key, value in node.items():
        dotted = f"{prefix}.{key}" if prefix else key
        out += _grid_keys(value, dotted) if isinstance(value, dict) else [(dotted, list(value))]
    return out


def _composed(experiment: str, hydra: bool = False) -> Any:
    """The composed config of `experiment` (with the `hydra` node, e.g. a sweep's params, when asked)."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return compose("config", overrides=[f"experiment={experiment}"], return_hydra_config=hydra)


def _row_name(row: str) -> str:
    return str(_composed(row).name)


def _chosen_for(table: str, scale: str, chosen: dict[str, selection.Choice]) -> list[str]:
    """An ablation runs on a main arm (`selection.arm` in its config) with that arm's settings chosen on dev, except
    those of what it varies itself (ablation-apc sweeps `apc`: the arm's choice of APC is not imposed on its rows)."""
    cfg = _composed(f"{scale}/{table}", hydra=True)
    arm = OmegaConf.select(cfg, "selection.arm")
    if arm is None or not chosen:
        return []
    varied = {str(key).split(".")[0] for key in OmegaConf.select(cfg, "hydra.sweeper.params", default={}) or {}}
    return [f"{k}={selection.override_text(v)}" for k, v in chosen[arm].values.items() if k.split(".")[0] not in varied]


def _check_gates(out: Path, tables: list[str]) -> dict[str, Any]:
    """The gates after the main table: the undamaged control (M_wp fine-tuned no worse than SPLADE-tiny as is, on the
    table's average over its collections) and quality (M_wp above BM25 on BoolQ-clean); a GateError names the failed
    one."""
    if not {"main", "references"} <= set(tables):
        return {}
    wp_avg = row_metric(out / "main", "testbed-wp-native", dataset=None)
    wp = row_metric(out / "main", "testbed-wp-native")
    return {
        "control": gates.check_control(
            wp_avg, row_metric(out / "references", "testbed-splade-tiny", dataset=None), out / "main"
        ),
        "quality": gates.check_quality(wp, row_metric(out / "references", "testbed-bm25"), out / "main"),
    }


def _learning_gate(
    scale: str,
    table: str,
    spec: dict[str, Any],
    chosen: dict[str, selection.Choice],
    out: Path,
    run: Callable[[list[str], Path], None],
) -> dict[str, Any] | None:
    """A table's learning gate (`learning_gate` in conf/tables/<scale>.yaml): its row's best dev score (the
    selection's) against the reference row's on the same dev split, which this runs; None where the table has none."""
    gate = tables_of(scale)[table].get("learning_gate")
    if gate is None:
        return None
    reference = gate.get("reference", "references/bm25")
    ref_dir = out / f"select-{table}-{reference.rsplit('/', 1)[-1]}"
    run([f"experiment={scale}/{reference}", f"eval={spec['eval']}", f"seed={spec['seed']}"], ref_dir)
    arm = _row_name(f"{scale}/{table}/{gate['row']}")
    if arm not in chosen:
        raise gates.GateError(f"learning gate: {arm} has no dev score in {selection_dirs(out, table)[0]}")
    ref = row_metric(ref_dir, _row_name(f"{scale}/{reference}"), spec["dataset"], spec["measure"])
    return gates.check_learning(arm, chosen[arm].score, _row_name(f"{scale}/{reference}"), ref, spec)


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
    unknown = [t for t in tables if not _exists(args.scale, t)]
    if unknown:
        print(
            f"vtlab: error: --tables: {unknown}: expected tables of {TABLES / (args.scale + '.yaml')} with their "
            f"experiment configs under {CONF / args.scale}: {', '.join(tables_of(args.scale))}",
            file=sys.stderr,
        )
        return 2
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
        cmd = [sys.executable, "-m", "vtlab", "-m", *overrides, f"hydra.sweep.dir={sweep_dir}", *args.extra]
        if launcher:
            cmd += [f"hydra/launcher={launcher}", *slurm]
        print("+ " + " ".join(cmd), flush=True)
        if not args.dry_run:
            # a failed job does not stop the sweep (vtlab/__main__.py records it); the report shows it
            subprocess.run(cmd, check=False, env=env)

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
        for table, overrides in planned.items():
            row_table = _is_row_table(args.scale, table)
            spec = _selection_spec(args.scale, table) if row_table else None
            exploratory = None
            if spec is not None:
                rows, chosen[table] = select_settings(spec, args.scale, table, out, run, args.dry_run)
                if gated and (learning := _learning_gate(args.scale, table, spec, chosen[table], out, run)):
                    report[f"learning:{table}"] = learning
                    gates.write(out / "gates.json", report)
                    exploratory = learning.get("exploratory")
                reuse = [o for o in rows if o.startswith("reuse_runs=")]
                overrides = (
                    [o for o in rows if not o.startswith("reuse_runs=")]
                    + [o for o in overrides if not o.startswith("experiment=")]
                    + reuse
                )
            elif not row_table:
                overrides = overrides + _chosen_for(table, args.scale, chosen.get("main", {}))
            dirs.append(out / table)
            run(overrides, out / table)
            if not args.dry_run:
                mark_exploratory(out / table, exploratory)
    except VtlabError as e:
        print(f"vtlab: error: {e}", file=sys.stderr)
        return 3 if isinstance(e, gates.GateError) else 2
    if args.dry_run:
        return 0
    cmd = [sys.executable, "-m", "vtlab.report", *map(str, dirs)]
    print("+ " + " ".join(cmd), flush=True)
    code = subprocess.run(cmd, check=False).returncode
    if gated:
        try:
            after = _check_gates(out, tables)
            report.update(after)
            gates.write(out / "gates.json", report)
            print(f"gates passed: {json.dumps(after)}", flush=True)
        except VtlabError as e:
            print(f"vtlab: error: {e}", file=sys.stderr)
            return 3
    return code


def mark_exploratory(sweep: Path, reason: str | None) -> None:
    """A table whose learning gate failed is reported without verdicts (vtlab.report reads the marker); a table that
    passed loses a marker an earlier run left."""
    marker = sweep / EXPLORATORY_FILE
    if reason is None:
        marker.unlink(missing_ok=True)
    else:
        write_exploratory(sweep, reason)
