"""The command line of `python -m vtlab.report SWEEP_DIR [SWEEP_DIR ...]` (see vtlab.report): every table read before
anything is written, then per sweep table.md/.csv/.tex, contrasts.md/.csv and tradeoff.png; exit 2 on any problem.
Given run directories instead (`python -m vtlab.report RUN_DIR RUN_DIR ...`, vtlab.report.comparison): every run read,
then compare.md/.csv, per_query.csv and compare.png in --out (default outputs/compare/<date>/<time>)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from vtlab.core.errors import VtlabError
from vtlab.evaluation import stats
from vtlab.report.comparison import are_run_dirs, build_comparison, check_out, default_out
from vtlab.report.contrasts import add_cli_contrast, build_contrasts
from vtlab.report.discovery import CONTRAST_KEY, ReportError
from vtlab.report.plot import write_comparison_plot, write_tradeoff
from vtlab.report.render import (
    comparison_markdown,
    contrasts_markdown,
    to_markdown,
    write_comparison,
    write_contrasts,
    write_table,
)
from vtlab.report.tables import DEFAULT_MEASURE, build_table


def _out_dirs(sweeps: Sequence[Path], out: Path | None) -> list[Path]:
    """Each sweep's own directory; with --out, DIR itself for one sweep, DIR/<date>_<time> for several."""
    if out is None:
        return list(sweeps)
    if len(sweeps) == 1:
        return [out]
    names = [f"{s.resolve().parent.name}_{s.resolve().name}" for s in sweeps]
    return [out / (n if names.count(n) == 1 else f"{n}_{i}") for i, n in enumerate(names)]


def _compare(args: argparse.Namespace) -> int:
    """Run directories side by side: read them all, then write into --out (never into a run)."""
    if args.contrast:
        raise ReportError("--contrast: a sweep table's option; run directories are each compared with the first")
    comparison = build_comparison(args.dirs, args.measure, args.permutations)
    out = args.out if args.out is not None else default_out()
    check_out(out, args.dirs)
    for label, job in zip(comparison.labels, comparison.jobs):
        print(f"read {label}: {job.path} ({job.state.value}; {', '.join(job.metrics)})", file=sys.stderr)
    written = write_comparison(comparison, out)
    written.append(write_comparison_plot(comparison, out / "compare.png"))
    print(comparison_markdown(comparison), file=sys.stdout)
    print(f"wrote {', '.join(map(str, written))}", file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m vtlab.report",
        description="Tables (markdown, CSV, LaTeX) from finished vtlab Hydra sweeps: mean ± sample std over seeds; "
        "or two or more run directories side by side (markdown, CSV, PNG; per-query differences against the first).",
    )
    parser.add_argument(
        "dirs",
        nargs="+",
        type=Path,
        metavar="DIR",
        help="Hydra sweep directories (outputs/multirun/<date>/<time>), one table each; or run directories "
        "(outputs/runs/<date>/<time>-<name>, holding .hydra/ or status.json and eval/<collection>/metrics.json), "
        "compared in one table and one picture",
    )
    parser.add_argument(
        "--measure",
        default=DEFAULT_MEASURE,
        help=f"measure shown per collection and averaged (default {DEFAULT_MEASURE})",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="where table.md/.csv/.tex go (default: the sweep dir; one sub-directory per sweep when several are "
        "given); for run directories, where compare.md/.csv/.png and per_query.csv go (default: "
        "outputs/compare/<date>/<time>)",
    )
    parser.add_argument(
        "--contrast",
        action="append",
        default=[],
        metavar="A,B",
        help=f"a contrast of two row labels, besides the sweeps' {CONTRAST_KEY} (repeatable)",
    )
    parser.add_argument(
        "--permutations",
        type=int,
        default=stats.N_PERMUTATIONS,
        help=f"sign flips of the randomization test (default {stats.N_PERMUTATIONS:,})",
    )
    args = parser.parse_args(argv)
    try:
        if args.permutations < 1:
            raise ReportError(f"--permutations={args.permutations}: expected >= 1")
        if are_run_dirs(args.dirs):
            return _compare(args)
        tables = [build_table(s, args.measure) for s in args.dirs]  # all read before anything is written
        for text in args.contrast:
            add_cli_contrast(tables, text)
        contrasts = [build_contrasts(t, args.permutations) for t in tables]
        for table, contrast, out_dir in zip(tables, contrasts, _out_dirs(args.dirs, args.out)):
            written = write_table(table, out_dir)
            print(to_markdown(table), file=sys.stdout)
            if contrast is not None:
                written += write_contrasts(contrast, out_dir)
                print(contrasts_markdown(contrast), file=sys.stdout)
            plot = write_tradeoff(table, Path(out_dir) / "tradeoff.png")
            written += [plot] if plot is not None else []
            print(f"wrote {', '.join(map(str, written))}", file=sys.stderr)
        problems = [p for t in tables for p in t.problems]
        for problem in problems:  # after writing: the tables are still worth having
            print(f"vtlab: error: {' '.join(problem.split())}", file=sys.stderr)
        if problems:
            return 2
    except (VtlabError, OSError) as exc:
        print(f"vtlab: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    return 0
