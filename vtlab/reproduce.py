"""`make reproduce-table`: run the paper's main table and its init / APC ablations as Hydra sweeps, then build the
tables with `vtlab.report`.

    python -m vtlab.reproduce --scale cpu              # offline, 2 cores (one seed; --seeds 3 for three)
    python -m vtlab.reproduce --scale paper            # the authors' recipe through hydra/launcher=slurm (GPUs, hub)

Main-table rows are the files of conf/experiment/<scale>/main/ (in the paper's row order); each ablation is one
experiment config whose `hydra.sweeper.params` lists its values. Sweeps write to <out>/<table>/ — one directory per
table — and a rerun into the same directory overwrites it, so pass another --out to keep an earlier run.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from vtlab import paper_plan
from vtlab.errors import VtlabError

CONF = Path(__file__).resolve().parents[1] / "conf" / "experiment"
ROW_ORDER = ["bert-native", "modernbert-native", "modernbert-lowercase", "modernbert-vt", "roberta-large-native",
             "roberta-large-vt", "bert-inference-free", "modernbert-inference-free", "modernbert-vt-inference-free"]
ABLATIONS = ["ablation-init", "ablation-apc"]


def main_rows(scale: str) -> list[str]:
    present = {p.stem for p in (CONF / scale / "main").glob("*.yaml")}
    ordered = [r for r in ROW_ORDER if r in present] + sorted(present - set(ROW_ORDER))
    return [f"{scale}/main/{r}" for r in ordered]


def sweeps(scale: str, seeds: int, tables: list[str], out: Path | None = None) -> dict[str, list[str]]:
    """table → the `python -m vtlab -m` overrides that run it. With `out` (where the sweeps go), the ablations may
    reuse the main table's finished jobs: an ablation's default value repeats a main row (vtlab/reuse.py)."""
    seed = "seed=" + ",".join(str(s) for s in range(seeds))
    sweeps_ = {}
    for table in tables:
        experiment = ",".join(main_rows(scale)) if table == "main" else f"{scale}/{table}"
        sweeps_[table] = [f"experiment={experiment}", seed]
        if out is not None and table != "main" and "main" in tables:
            sweeps_[table].append(f"reuse_runs=['{(out / 'main').resolve()}']")
    return sweeps_


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m vtlab.reproduce", description=__doc__.split("\n\n")[0])
    p.add_argument("--scale", choices=["cpu", "paper"], default="cpu")
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument("--tables", default=",".join(["main", *ABLATIONS]), help="comma-separated: main,ablation-init,…")
    p.add_argument("--out", type=Path, default=None, help="default: outputs/reproduce/<scale>")
    p.add_argument("--launcher", default=None, help="hydra/launcher choice (default: basic for cpu, slurm for paper)")
    p.add_argument("--dry-run", action="store_true", help="print the commands only")
    p.add_argument("extra", nargs="*", help="extra Hydra overrides for every job, e.g. trainer.max_steps=50")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.seeds < 1:
        print(f"vtlab: error: --seeds={args.seeds}: expected >= 1", file=sys.stderr)
        return 2
    tables = [t for t in args.tables.split(",") if t]
    unknown = [t for t in tables if t != "main" and not (CONF / args.scale / f"{t}.yaml").is_file()]
    if unknown:
        print(f"vtlab: error: --tables: no experiment config for {unknown} under {CONF / args.scale}", file=sys.stderr)
        return 2
    out = args.out or Path("outputs") / "reproduce" / args.scale
    launcher = args.launcher or ("slurm" if args.scale == "paper" else None)
    dirs, planned, slurm = [], sweeps(args.scale, args.seeds, tables, out), []
    if args.scale == "paper":  # the plan (jobs, GPU-hours) before anything is submitted (vtlab/paper_plan.py)
        try:
            jobs = paper_plan.plan(planned)
        except VtlabError as e:
            print(f"vtlab: error: {e}", file=sys.stderr)
            return 2
        print(paper_plan.render(jobs), flush=True)
        slurm = paper_plan.launcher_overrides(jobs) if launcher == "slurm" else []
    for table, overrides in planned.items():
        sweep_dir = out / table
        cmd = [sys.executable, "-m", "vtlab", "-m", *overrides, f"hydra.sweep.dir={sweep_dir}", *args.extra]
        if launcher:
            cmd += [f"hydra/launcher={launcher}", *slurm]
        print("+ " + " ".join(cmd), flush=True)
        dirs.append(sweep_dir)
        if not args.dry_run:
            # a failed job does not stop the sweep (vtlab/__main__.py records it); the report shows it
            subprocess.run(cmd, check=False)
    if args.dry_run:
        return 0
    report = [sys.executable, "-m", "vtlab.report", *map(str, dirs)]
    print("+ " + " ".join(report), flush=True)
    return subprocess.run(report, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
