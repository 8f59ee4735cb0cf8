"""The table of a sweep: rows (jobs that differ only in seed or collection), columns (a measure per collection, its
average, FLOPS and active dims), cells (mean ± sample std over seeds), the seeds that collapsed (the collapse
detector's record, or the declared floor: the rule is vtlab.report.collapse's) and the contrasts asked of it
(see vtlab.report)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig, ListConfig, OmegaConf

from vtlab.report.discovery import (
    COLLAPSE_FLOOR_KEY,
    CONTRAST_KEY,
    EXPLORATORY_FILE,
    PRIMARY_KEY,
    SEED_KEY,
    CollapseFloor,
    Job,
    ReportError,
    State,
    _load_config,
    _number,
    _override_value,
    _plain,
    collect_jobs,
    floor_collapse,
    override_key,
    read_exploratory,
)

DEFAULT_MEASURE = "nDCG@10"
# overrides that choose the collection: jobs differing only in these fill different columns of the same row
COLLECTION_KEYS = frozenset({"eval", "eval.path", "eval.name"})
CHECKS_KEY = "report.checks"  # the experiment config's [row A, row B] pairs reported outside the family, no verdict
MIN_EFFECT_KEY = "report.min_effect"  # the experiment config's minimum effect of interest, in the table's measure
DEFAULT_MIN_EFFECT = 0.01  # nDCG@10: the smallest difference the tables are meant to be able to detect
STD_NOTE = "mean ± sample std (ddof=1) over seeds; n = seeds with results, (n=k) where a cell has fewer"


@dataclass
class Cell:
    values: list[float]

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float | None:
        return float(np.mean(self.values)) if self.values else None

    @property
    def std(self) -> float | None:
        return float(np.std(self.values, ddof=1)) if self.n > 1 else None


@dataclass
class Column:
    header: str
    decimals: int
    value: Callable[[dict[str, dict[str, Any]]], float | None]  # one seed's {collection: metrics} -> value


@dataclass
class Row:
    label: str
    n: int
    cells: list[Cell]
    notes: list[str]  # per job that did not finish or collapsed: "failed (seed=1): <error>", "missing (seed=2)", ...
    jobs: list[Job] = field(default_factory=list)

    @property
    def status(self) -> str:
        return "; ".join(self.notes) or "ok"


@dataclass
class Table:
    title: str
    sweep: Path
    columns: list[Column]
    rows: list[Row]
    footer: list[str]
    measure: str = DEFAULT_MEASURE
    datasets: list[str] = field(default_factory=list)
    contrasts: list[tuple[str, str, str]] = field(default_factory=list)  # (row A, row B, where it was asked for)
    problems: list[str] = field(default_factory=list)  # recorded report.contrasts that cannot be computed
    primary: tuple[str, str] | None = None  # report.primary: the contrast declared primary before the runs
    # report.checks: (row A, row B, where it was declared), reported outside the family, never a verdict
    checks: list[tuple[str, str, str]] = field(default_factory=list)
    min_effect: float = DEFAULT_MIN_EFFECT  # report.min_effect: the effect the seed plan is powered for
    exploratory: str | None = None  # why its contrasts carry no verdict (EXPLORATORY_FILE in the sweep), or None
    collapse_floor: CollapseFloor | None = None  # report.collapse_floor: a finished seed under it counts as collapsed

    def row(self, label: str) -> Row:
        return next(r for r in self.rows if r.label == label)


def _is_row_key(override: str) -> bool:
    key = override_key(override)
    return key != SEED_KEY and key not in COLLECTION_KEYS


def _row_key(job: Job) -> tuple[str, ...]:
    return tuple(o for o in job.overrides if _is_row_key(o))


def _dataset_value(dataset: str, key: str) -> Callable[[dict[str, dict[str, Any]]], float | None]:
    return lambda seed: _number(seed.get(dataset, {}).get(key))


def _average_value(datasets: Sequence[str], key: str) -> Callable[[dict[str, dict[str, Any]]], float | None]:
    # only seeds evaluated on every collection: an average over different collections is not comparable
    def value(seed: dict[str, dict[str, Any]]) -> float | None:
        xs = [_number(seed.get(d, {}).get(key)) for d in datasets]
        return float(np.mean(xs)) if xs and all(x is not None for x in xs) else None

    return value


def make_columns(datasets: Sequence[str], measure: str) -> list[Column]:
    cols = [Column(f"{d} {measure}", 4, _dataset_value(d, measure)) for d in datasets]
    return cols + [
        Column(f"avg {measure}", 4, _average_value(datasets, measure)),
        Column("avg FLOPS", 3, _average_value(datasets, "flops")),
        Column("avg q dims", 1, _average_value(datasets, "query_active_dims")),
        Column("avg d dims", 1, _average_value(datasets, "doc_active_dims")),
    ]


def _seeds(jobs: Sequence[Job]) -> list[list[Job]]:
    """The row's finished jobs, grouped by seed (jobs of one seed on different collections are one seed)."""
    per_seed: dict[str, list[Job]] = {}
    for job in jobs:
        if job.state is State.DONE:
            per_seed.setdefault(job.seed if job.seed is not None else f"job{job.num}", []).append(job)
    return list(per_seed.values())


def _seed_metrics(jobs: Sequence[Job]) -> list[dict[str, dict[str, Any]]]:
    """One {collection: metrics} per seed of the row's finished jobs (a collection evaluated twice for one seed is
    averaged)."""
    out = []
    for seed_jobs in _seeds(jobs):
        by_dataset: dict[str, list[dict[str, Any]]] = {}
        for job in seed_jobs:
            for dataset, metrics in job.metrics.items():
                by_dataset.setdefault(dataset, []).append(metrics)
        out.append({d: _mean_metrics(ms) for d, ms in by_dataset.items()})
    return out


def _mean_metrics(ms: list[dict[str, Any]]) -> dict[str, float]:
    keys = {k for m in ms for k, v in m.items() if _number(v) is not None}
    return {k: float(np.mean([_number(m[k]) for m in ms if _number(m.get(k)) is not None])) for k in keys}


def _declared_floor(jobs: Sequence[Job], sweep: Path) -> tuple[CollapseFloor | None, str | None]:
    """The table's collapse floor: the one its jobs' configs declare (report.collapse_floor; None where none does), and
    where they declare different ones, none (the collapse detector's rule alone) and the problem in words."""
    declared = list(dict.fromkeys(j.collapse_floor for j in jobs if j.collapse_floor is not None))
    if len(declared) > 1:
        floors = ", ".join(str(f) for f in declared)
        return None, (
            f"{COLLAPSE_FLOOR_KEY} of the jobs of {sweep}: the jobs declare different floors {floors}; only the "
            f"collapse detector's rule applies"
        )
    return (declared[0] if declared else None), None


def _mean_over_collections(seed: dict[str, dict[str, Any]], datasets: Sequence[str], key: str) -> float | None:
    """A seed's mean of `key` over the collections it was evaluated on, in the table's order (the avg columns' value
    wherever the seed has every collection)."""
    xs = [x for d in datasets if (x := _number(seed.get(d, {}).get(key))) is not None]
    return float(np.mean(xs)) if xs else None


def _apply_floor(group: Sequence[Job], floor: CollapseFloor, datasets: Sequence[str], measure: str) -> None:
    """Mark collapsed the finished jobs of each seed of a row whose final mean doc active dims or average measure is
    under the floor (vtlab.report.collapse states the rule); a seed the collapse detector flagged keeps its record."""
    for seed_jobs, seed in zip(_seeds(group), _seed_metrics(group)):
        if any(j.collapse for j in seed_jobs):
            continue
        doc_dims = _mean_over_collections(seed, datasets, "doc_active_dims")
        reason = floor_collapse(floor, doc_dims, _mean_over_collections(seed, datasets, measure), measure)
        for job in seed_jobs if reason else ():
            job.collapse = reason


def _job_note(job: Job) -> str:
    which = " ".join(o for o in job.overrides if not _is_row_key(o)) or f"job {job.num}"
    if job.state is State.DONE:  # finished, its metrics counted, but collapsed (detector's record or declared floor)
        return f"collapsed ({which}): {job.collapse}"
    note = f"{job.state.value} ({which})"
    return f"{note}: {job.error}" if job.error else note


def _varying(groups: Sequence[list[Job]]) -> list[str]:
    """Per row, its overrides (seed and collection excluded) whose key takes more than one value across `groups`."""
    keys = {override_key(o) for g in groups for j in g for o in _row_key(j)}
    varying = {k for k in keys if len({_override_value(_row_key(g[0]), k) for g in groups}) > 1}
    return [" ".join(o for o in _row_key(g[0]) if override_key(o) in varying) for g in groups]


def _labels(groups: list[list[Job]]) -> list[str]:
    """The jobs' `name` when names differ across the sweep, else the overrides that vary (seed excluded); rows that
    share a name also get the overrides that vary among them, rows that never ran (no name) their overrides."""
    names = [next((j.name for j in g if j.name is not None), None) for g in groups]
    by_overrides = _varying(groups)
    if len({n for n in names if n is not None}) <= 1:
        return [o or n or "(no overrides)" for o, n in zip(by_overrides, names)]
    labels = [n or o for n, o in zip(names, by_overrides)]
    for name in {n for n in names if n is not None and names.count(n) > 1}:
        rows = [i for i, n in enumerate(names) if n == name]
        for i, o in zip(rows, _varying([groups[i] for i in rows])):
            labels[i] = f"{name} ({o})"
    return labels


def build_table(sweep: str | Path, measure: str = DEFAULT_MEASURE) -> Table:
    sweep = Path(sweep)
    jobs, jobs_note = collect_jobs(sweep)
    groups: dict[tuple[str, ...], list[Job]] = {}
    for job in jobs:  # jobs are in job-number order, so rows come in sweep order
        groups.setdefault(_row_key(job), []).append(job)
    datasets = list(dict.fromkeys(d for j in jobs if j.state is State.DONE for d in j.metrics))
    done_metrics = [m for j in jobs if j.state is State.DONE for m in j.metrics.values()]
    if done_metrics and not any(measure in m for m in done_metrics):
        available = sorted({k for m in done_metrics for k in m})
        raise ReportError(f"{sweep}: no metrics.json has the measure {measure!r} (available: {', '.join(available)})")
    columns = make_columns(datasets, measure)
    floor, floor_problem = _declared_floor(jobs, sweep)
    rows = []
    for label, group in zip(_labels(list(groups.values())), groups.values()):
        if floor is not None:  # before the notes: a seed under the floor is named like a detector's collapse
            _apply_floor(group, floor, datasets, measure)
        seeds = _seed_metrics(group)
        cells = [Cell([v for s in seeds if (v := c.value(s)) is not None]) for c in columns]
        notes = [_job_note(j) for j in group if j.state is not State.DONE or j.collapse]
        rows.append(Row(label, len(seeds), cells, notes, jobs=group))
    names = {j.name for j in jobs if j.name is not None}
    title = names.pop() if len(names) == 1 else f"{sweep.parent.name}/{sweep.name}"
    footer = [
        STD_NOTE + f"; avg: mean over {', '.join(datasets) or 'the collections'} per seed",
        f"sweep: {sweep}; {jobs_note}",
    ]
    exploratory = read_exploratory(sweep)
    if exploratory is not None:
        footer.insert(0, f"EXPLORATORY TABLE ({EXPLORATORY_FILE}): {exploratory}; its contrasts carry no verdict")
    if floor is not None:
        footer.append(
            f"collapse floor ({COLLAPSE_FLOOR_KEY}): {_floor_words(floor, measure)} (strictly under) counts as "
            f"collapsed, like a seed the collapse detector flagged"
        )
    table = Table(
        title,
        sweep,
        columns,
        rows,
        footer,
        measure=measure,
        datasets=datasets,
        exploratory=exploratory,
        collapse_floor=floor,
    )
    for job in jobs:  # the experiment configs' contrasts, in sweep order, each once
        table.problems += [p for p in job.problems if p not in table.problems]
        for a, b in job.contrasts:
            try:
                add_contrast(table, a, b, f"{job.path / '.hydra' / 'config.yaml'}: {CONTRAST_KEY}")
            except ReportError as exc:  # e.g. a label for another table's rows: say so, but write this table
                table.problems += [str(exc)] if str(exc) not in table.problems else []
    if floor_problem is not None:
        _problem(table, floor_problem)
    _set_primary(table, jobs)
    _set_checks_and_min_effect(table, jobs)
    return table


def _floor_words(floor: CollapseFloor, measure: str) -> str:
    sides = [f"final mean doc active dims under {floor.doc_dims:g}"] if floor.doc_dims is not None else []
    sides += [f"final avg {measure} under {floor.score:g}"] if floor.score is not None else []
    return "a finished seed with " + " or ".join(sides)


def _set_primary(table: Table, jobs: Sequence[Job]) -> None:
    """The table's primary contrast: the one its jobs' configs declare, which must be one of its contrasts."""
    declared = list(dict.fromkeys(j.primary for j in jobs if j.primary is not None))
    if not declared:
        return
    where = f"{PRIMARY_KEY} of the jobs of {table.sweep}"
    if len(declared) > 1:
        table.problems.append(f"{where}: the jobs declare different primary contrasts {declared}; none is marked")
    elif declared[0] not in [(a, b) for a, b, _ in table.contrasts]:
        table.problems.append(
            f"{where}: {list(declared[0])} is not one of the table's contrasts "
            f"({', '.join(f'{a} − {b}' for a, b, _ in table.contrasts) or 'none'})"
        )
    else:
        table.primary = declared[0]


def _config_checks(cfg: DictConfig, path: Path) -> tuple[tuple[str, str], ...]:
    """A job config's report.checks: [[A, B], ...] pairs of row labels (none where the key is absent or null)."""
    raw = _plain(cfg, CHECKS_KEY)
    pairs = OmegaConf.to_container(raw) if isinstance(raw, (DictConfig, ListConfig)) else raw
    if pairs is None:
        return ()
    if not isinstance(pairs, list) or not all(
        isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p) for p in pairs
    ):
        raise ReportError(f"{path}: {CHECKS_KEY} must be a list of [row A, row B] pairs of row labels, got {pairs!r}")
    return tuple((a, b) for a, b in pairs)


def _config_min_effect(cfg: DictConfig, path: Path) -> float | None:
    """A job config's report.min_effect: a positive number in the table's measure (None where not declared)."""
    raw = _plain(cfg, MIN_EFFECT_KEY)
    if raw is None:
        return None
    value = _number(raw)
    if value is None or not math.isfinite(value) or value <= 0:
        raise ReportError(f"{path}: {MIN_EFFECT_KEY} must be a positive number, got {raw!r}")
    return value


def _set_checks_and_min_effect(table: Table, jobs: Sequence[Job]) -> None:
    """The table's checks (report.checks of its jobs' configs, in sweep order, each once; a pair that is also one of
    its contrasts stays in the family and is named as a problem) and the minimum effect of interest its jobs declare
    (report.min_effect; DEFAULT_MIN_EFFECT where none does, and where they disagree, named as a problem). A recorded
    config cannot be fixed after the run: its mistakes are the table's problems, the table is still written."""
    declared: list[float] = []
    for job in jobs:
        config_yaml = (job.path or Path()) / ".hydra" / "config.yaml"
        cfg = _load_config(config_yaml) if job.path is not None and config_yaml.is_file() else None
        if not isinstance(cfg, DictConfig):
            continue
        pairs, effect = (), None
        try:
            pairs = _config_checks(cfg, config_yaml)
        except ReportError as exc:
            _problem(table, str(exc))
        for a, b in pairs:
            try:
                add_check(table, a, b, f"{config_yaml}: {CHECKS_KEY}")
            except ReportError as exc:
                _problem(table, str(exc))
        try:
            effect = _config_min_effect(cfg, config_yaml)
        except ReportError as exc:
            _problem(table, str(exc))
        declared += [effect] if effect is not None and effect not in declared else []
    if len(declared) > 1:
        _problem(
            table,
            f"{MIN_EFFECT_KEY} of the jobs of {table.sweep}: the jobs declare different minimum effects {declared}; "
            f"the seed plan uses {DEFAULT_MIN_EFFECT}",
        )
    elif declared:
        table.min_effect = declared[0]


def _problem(table: Table, text: str) -> None:
    if text not in table.problems:
        table.problems.append(text)


def _check_labels(table: Table, a: str, b: str, source: str) -> None:
    labels = [r.label for r in table.rows]
    for label in (a, b):
        if labels.count(label) != 1:
            what = "is not a row label" if label not in labels else "labels several rows"
            raise ReportError(f"{source}: {label!r} {what} of the table of {table.sweep} (rows: {', '.join(labels)})")


def add_contrast(table: Table, a: str, b: str, source: str) -> None:
    """Ask for the contrast A − B (row labels) once; `source` names where it was asked for, for error messages. A
    pair the configs declare a check (outside the family) cannot also be a contrast."""
    _check_labels(table, a, b, source)
    if (a, b) in [(x, y) for x, y, _ in table.checks]:
        raise ReportError(f"{source}: {a} − {b} is declared a check ({CHECKS_KEY}), outside the family of contrasts")
    if (a, b) not in [(x, y) for x, y, _ in table.contrasts]:
        table.contrasts.append((a, b, source))


def add_check(table: Table, a: str, b: str, source: str) -> None:
    """Report A − B (row labels) once as a check: its numbers shown, outside the family, never a verdict. Refused for
    a pair that is already one of the table's contrasts (it stays in the family, which was declared with it)."""
    _check_labels(table, a, b, source)
    if (a, b) in [(x, y) for x, y, _ in table.contrasts]:
        raise ReportError(f"{source}: {a} − {b} is also one of the table's contrasts; it stays in the family")
    if (a, b) not in [(x, y) for x, y, _ in table.checks]:
        table.checks.append((a, b, source))
