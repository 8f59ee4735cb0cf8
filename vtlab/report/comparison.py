"""Single runs side by side (`python -m vtlab.report RUN_DIR RUN_DIR ...`, see vtlab.report): each run directory's
measure and active dims per collection (eval/<collection>/metrics.json), and per collection the per-query differences
of every later run against the FIRST one (eval/<collection>/per_query.json; both paired tests of
vtlab.evaluation.stats). Rendered by vtlab.report.render (compare.md, compare.csv, per_query.csv) and
vtlab.report.plot (compare.png)."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from vtlab.core.atomic import real_path, within
from vtlab.evaluation import stats
from vtlab.report.discovery import Job, ReportError, State, _number, read_job
from vtlab.runs.paths import is_run_dir

COMPARE_ROOT = Path("outputs") / "compare"  # the default --out: outputs/compare/<date>/<time>, beside outputs/runs/
DIMS = (("q dims", "query_active_dims"), ("d dims", "doc_active_dims"))  # the sparsity shown, metrics.json's keys
RUN_DIR_WORDS = "a run directory (.hydra/ or status.json, as `python -m vtlab` writes)"


@dataclass
class QueryDiff:
    """One later run against the first on one collection, paired by query: `pairs` {query id: (first, run)}."""

    label: str
    dataset: str
    pairs: dict[str, tuple[float, float]] = field(default_factory=dict)
    result: stats.PairedComparison | None = None  # run − first; None with a note where the queries cannot be paired
    note: str = ""

    @property
    def deltas(self) -> list[float]:
        return [b - a for a, b in self.pairs.values()]

    def counts(self) -> tuple[int, int, int]:
        """(queries where the run is better, equal, worse than the first)."""
        d = self.deltas
        return sum(x > 0 for x in d), sum(x == 0 for x in d), sum(x < 0 for x in d)


@dataclass
class Comparison:
    measure: str
    labels: list[str]  # one per run, in the order given: the first is the baseline of the differences
    jobs: list[Job]
    datasets: list[str]
    diffs: list[QueryDiff]
    footer: list[str]

    def value(self, run: int, dataset: str, key: str) -> float | None:
        return _number(self.jobs[run].metrics.get(dataset, {}).get(key))

    def average(self, run: int, key: str) -> float | None:
        """The mean over every collection of the comparison; None where the run lacks one (not comparable)."""
        xs = [self.value(run, d, key) for d in self.datasets]
        return sum(xs) / len(xs) if xs and all(x is not None for x in xs) else None  # type: ignore[arg-type]


def are_run_dirs(paths: Sequence[Path]) -> bool:
    """True when every path is a run directory, False when none is (sweeps); a mix is refused, naming its first path
    that is not a run directory."""
    for path in paths:
        if not path.is_dir():
            raise ReportError(f"{path}: no such directory")
    kinds = [is_run_dir(p) for p in paths]
    if all(kinds) or not any(kinds):
        return all(kinds)
    odd = paths[kinds.index(False)]
    raise ReportError(
        f"{odd}: not {RUN_DIR_WORDS}, given with run directories: compare run directories together, and give Hydra "
        f"sweep directories (multirun.yaml) on their own"
    )


def default_out(now: datetime.datetime | None = None) -> Path:
    """outputs/compare/<date>/<time> under the current directory, as Hydra names a run's directory."""
    now = now or datetime.datetime.now()
    return COMPARE_ROOT / now.strftime("%Y-%m-%d") / now.strftime("%H-%M-%S")


def check_out(out: Path, runs: Sequence[Path]) -> None:
    """The comparison is never written into a run directory: not one of the compared runs (or inside one), nor another
    run's directory."""
    for run in runs:
        if within(real_path(out), real_path(run)):
            raise ReportError(f"--out {out}: inside the compared run {run}; expected a directory outside every run")
    if is_run_dir(out):
        raise ReportError(f"--out {out}: a run directory; expected a directory outside every run")


def _labels(jobs: Sequence[Job]) -> list[str]:
    """Each run's `name` (its recorded config, else status.json), else its directory's name; a name two runs share
    gets the directory's name, and a label still shared its position."""
    names = [j.name or (j.path or Path()).name for j in jobs]
    labels = [n if names.count(n) == 1 else f"{n} ({(j.path or Path()).name})" for n, j in zip(names, jobs)]
    return [x if labels.count(x) == 1 else f"{x} #{i + 1}" for i, x in enumerate(labels)]


def _read_run(path: Path, num: int) -> Job:
    if not path.is_dir():
        raise ReportError(f"{path}: no such directory")
    job = read_job(path, num)
    if not job.metrics:
        error = f": {job.error}" if job.error else ""
        raise ReportError(
            f"{path}: no eval/<collection>/metrics.json (expected a run that evaluated a collection; its status: "
            f"{job.state.value}{error})"
        )
    return job


def _diff(labels: tuple[str, str], dataset: str, first: Job, run: Job, measure: str, permutations: int) -> QueryDiff:
    """labels: (the first run's, this run's)."""
    diff = QueryDiff(labels[1], dataset)
    per_query = [first.per_query(dataset), run.per_query(dataset)]
    missing = [j.path for j, pq in zip((first, run), per_query) if pq is None or measure not in pq]
    if missing:
        diff.note = f"no per-query {measure} (eval/{dataset}/per_query.json) in {', '.join(map(str, missing))}"
        return diff
    a, b = (pq[measure] for pq in per_query)  # type: ignore[index]
    try:
        diff.result = stats.compare(b, a, permutations, what=f"{labels[1]} − {labels[0]} on {dataset}")
    except stats.StatsError as exc:
        diff.note = str(exc)
        return diff
    diff.pairs = {q: (float(a[q]), float(b[q])) for q in sorted(a)}
    return diff


def build_comparison(paths: Sequence[Path], measure: str, permutations: int = stats.N_PERMUTATIONS) -> Comparison:
    """Read every run (all before anything is written); ReportError for one run, a run given twice, a run that
    evaluated nothing, or a measure no run recorded."""
    if len(paths) < 2:
        raise ReportError(
            f"{paths[0]}: one run directory; a comparison needs two or more (a Hydra sweep directory gives a table)"
        )
    seen: dict[Path, Path] = {}
    for path in paths:
        if real_path(path) in seen:
            raise ReportError(f"{path}: given twice (as {seen[real_path(path)]}); expected distinct run directories")
        seen[real_path(path)] = path
    jobs = [_read_run(Path(p), i) for i, p in enumerate(paths)]
    datasets = list(dict.fromkeys(d for j in jobs for d in j.metrics))
    if not any(measure in m for j in jobs for m in j.metrics.values()):
        available = sorted({k for j in jobs for m in j.metrics.values() for k in m})
        raise ReportError(
            f"--measure {measure!r}: no metrics.json of the runs has it (available: {', '.join(available)})"
        )
    labels = _labels(jobs)
    diffs = [
        _diff((labels[0], label), d, jobs[0], job, measure, permutations)
        for label, job in zip(labels[1:], jobs[1:])
        for d in datasets
        if d in jobs[0].metrics and d in job.metrics
    ]
    footer = [f"- {label}: {job.path}" for label, job in zip(labels, jobs)]
    footer += [
        f"- {label}: status {job.state.value}" + (f" ({job.error})" if job.error else "")
        for label, job in zip(labels, jobs)
        if job.state is not State.DONE
    ]
    return Comparison(measure, labels, jobs, datasets, diffs, footer)
