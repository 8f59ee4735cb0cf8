"""`python -m vtlab.report SWEEP_DIR [SWEEP_DIR ...]`: the paper's tables from finished Hydra sweeps.

Per sweep: rows = table rows (jobs whose overrides differ only in `seed=` — or in the collection, `eval=`,
`eval.path=`, `eval.name=` — are one row), columns = one measure per evaluated collection (nDCG@10 by default,
`--measure`), its average over the collections, and the average FLOPS and query/doc active dims; each cell is the mean
± sample std (ddof=1) over seeds, with the number of seeds. Written as markdown, CSV and LaTeX
(`table.md`, `table.csv`, `table.tex` in the sweep directory or `--out DIR`); the markdown also goes to stdout.

Contrasts (`report.contrasts: [[A, B], ...]` in the sweep's experiment config, read from the jobs' recorded
.hydra/config.yaml, and `--contrast A,B`): for each pair of row labels and each collection, the pooled collections and
each matched term budget the runs evaluated (`eval.budgets`, keys `<measure>@q<K>-d<K>`), the difference of the
measure's mean with the 95% CI of the paired difference, the paired randomization p-value and the paired t-test
p-value over queries (query level: per-query values from each run's per_query.json, averaged over a row's seeds),
and beside them the seed-level randomization p-value (seed i of A matched with seed i of B, whole seeds' signs
flipped; pooled: the avg column's difference), see vtlab.stats. Each contrast's headline line (pooled, full sparsity)
also gets its seed-level p adjusted by Holm over the table's contrasts, and a reading that says "confirmed" only where
that adjusted p is below 0.05; the contrast named by `report.primary` (declared before the runs) is marked.
Written to `contrasts.md` and `contrasts.csv` beside the table, and to stdout; `tradeoff.png` plots each row's
average measure against its FLOPS, one point per seed. A recorded contrast that cannot be computed (a label that is
not a row of the table) is named in contrasts.md and on stderr after everything is written, and the exit status is 2.

Nothing is dropped: a failed job shows "failed" with its error, a job the sweep expected but that has no directory
shows "missing", a job still running (or killed: status "running" or no status.json and no metrics) "incomplete".

Expected jobs come from `multirun.yaml` expanded the way Hydra's BasicSweeper does it (`hydra.sweeper.params`, then
`hydra.overrides.task`, through Hydra's own override parser: `a,b,c`, `range()`, `choice()`; `glob()` over a config
group is listed from the sweep's own `hydra.runtime.config_sources`). When that is not possible — no multirun.yaml,
another sweeper (optuna…), a config dir that no longer exists, or an expansion that disagrees with the job directories
— the table is built from the job directories present, and its footer says so.
"""
from __future__ import annotations

import argparse
import csv
import enum
import io
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import yaml
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from omegaconf import DictConfig, ListConfig, OmegaConf

from vtlab import stats
from vtlab.atomic import atomic_path, atomic_write
from vtlab.errors import VtlabError
from vtlab.evaluation import split_budget_key
from vtlab.runs.status import job_dirs

DEFAULT_MEASURE = "nDCG@10"
SEED_KEY = "seed"
# overrides that choose the collection: jobs differing only in these fill different columns of the same row
COLLECTION_KEYS = frozenset({"eval", "eval.path", "eval.name"})
OUTPUT_NAMES = ("table.md", "table.csv", "table.tex")
CONTRAST_NAMES = ("contrasts.md", "contrasts.csv")
CONTRAST_KEY = "report.contrasts"  # the experiment config's list of [row A, row B] pairs
PRIMARY_KEY = "report.primary"  # the experiment config's one [row A, row B] pair declared primary before the runs
FULL = "full"  # the budget column of a contrast at each run's own sparsity (no pruning)
MAX_NOTE_CHARS = 200  # errors are cut in markdown/LaTeX cells (the CSV keeps them whole)
STD_NOTE = "mean ± sample std (ddof=1) over seeds; n = seeds with results, (n=k) where a cell has fewer"


class ReportError(VtlabError):
    """Bad input to the report: the message names the path and what is wrong with it."""


class State(enum.Enum):
    DONE = "done"
    FAILED = "failed"
    MISSING = "missing"
    INCOMPLETE = "incomplete"
    NO_METRICS = "no metrics"  # finished, but evaluated nothing (stage=transfer, eval=none)


_STATUS_STATES = {"done": State.DONE, "failed": State.FAILED, "running": State.INCOMPLETE}


# ---------------------------------------------------------------------------------------------------- reading jobs


@dataclass
class Job:
    num: int
    overrides: tuple[str, ...]
    state: State
    name: str | None = None
    seed: str | None = None
    error: str | None = None
    metrics: dict[str, dict[str, Any]] = field(default_factory=dict)  # collection -> metrics.json "metrics"
    path: Path | None = None  # the job directory (None: missing)
    contrasts: tuple[tuple[str, str], ...] = ()  # its config's report.contrasts
    primary: tuple[str, str] | None = None  # its config's report.primary
    problems: tuple[str, ...] = ()  # what is wrong with them (the table is still written; the report exits 2)
    _per_query: dict[str, dict[str, dict[str, float]] | None] = field(default_factory=dict, repr=False)

    def per_query(self, dataset: str) -> dict[str, dict[str, float]] | None:
        """eval/<dataset>/per_query.json ({measure key: {query id: value}}), None for runs from before it; read once."""
        if dataset not in self._per_query:
            path = (self.path or Path()) / "eval" / dataset / "per_query.json"
            self._per_query[dataset] = _read_per_query(path) if self.path is not None and path.is_file() else None
        return self._per_query[dataset]


def override_key(override: str) -> str:
    """`+experiment=x` -> `experiment`, `~a.b` -> `a.b` (a Hydra key never contains `=`)."""
    return override.split("=", 1)[0].lstrip("+~")


def _override_value(overrides: Iterable[str], key: str) -> str | None:
    for o in overrides:
        if "=" in o and override_key(o) == key:
            return o.split("=", 1)[1]
    return None


def _load_yaml(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ReportError(f"{path}: cannot read ({' '.join(str(exc).split())})") from exc


def _load_json(path: Path, what: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ReportError(f"{path}: malformed {what} ({' '.join(str(exc).split())})") from exc
    if not isinstance(data, dict):
        raise ReportError(f"{path}: malformed {what} (expected a JSON object, got {type(data).__name__})")
    return data


def read_metrics(path: Path) -> dict[str, Any]:
    """The "metrics" object of an `eval/<collection>/metrics.json` (see vtlab.evaluation.evaluate)."""
    metrics = _load_json(path, "metrics.json").get("metrics")
    if not isinstance(metrics, dict):
        raise ReportError(f"{path}: malformed metrics.json (no \"metrics\" object)")
    return metrics


def _read_per_query(path: Path) -> dict[str, dict[str, float]]:
    data = _load_json(path, "per_query.json")
    for key, values in data.items():
        if not isinstance(values, dict) or not all(_number(v) is not None for v in values.values()):
            raise ReportError(f"{path}: malformed per_query.json (\"{key}\" is not an object of query id -> number)")
    return data


def _config_contrasts(cfg: Any, path: Path) -> tuple[tuple[str, str], ...]:
    raw = _plain(cfg, CONTRAST_KEY) if isinstance(cfg, DictConfig) else None
    if raw is None:
        return ()
    pairs = OmegaConf.to_container(raw) if isinstance(raw, (DictConfig, ListConfig)) else raw
    if not isinstance(pairs, list) or not all(
            isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p) for p in pairs):
        raise ReportError(f"{path}: {CONTRAST_KEY} must be a list of [row A, row B] pairs of row labels, got {pairs!r}")
    return tuple((a, b) for a, b in pairs)


def _config_primary(cfg: Any, path: Path) -> tuple[str, str] | None:
    raw = _plain(cfg, PRIMARY_KEY) if isinstance(cfg, DictConfig) else None
    if raw is None:
        return None
    pair = OmegaConf.to_container(raw) if isinstance(raw, (DictConfig, ListConfig)) else raw
    if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
        raise ReportError(f"{path}: {PRIMARY_KEY} must be one [row A, row B] pair of row labels, got {pair!r}")
    return pair[0], pair[1]


def _load_config(path: Path) -> Any:
    try:
        return OmegaConf.load(path)
    except Exception as exc:  # noqa: BLE001 - yaml and omegaconf errors alike: name the file
        raise ReportError(f"{path}: cannot read ({' '.join(str(exc).split())})") from exc


def _suite_order(eval_dir: Path, datasets: Iterable[str]) -> list[str]:
    """The configured order of an evaluation suite (eval/summary.json, e.g. BEIR in the paper's order), else by name."""
    summary = eval_dir / "summary.json"
    order = list((_load_json(summary, "summary.json").get("datasets") or {}) if summary.is_file() else ())
    names = sorted(datasets)
    return [d for d in order if d in names] + [d for d in names if d not in order]


def _plain(cfg: DictConfig, key: str) -> Any:
    # job configs hold ${hydra:...} interpolations that only resolve inside Hydra: read single keys, never resolve all
    return OmegaConf.select(cfg, key, default=None, throw_on_resolution_failure=False)


def _dig(data: Any, *keys: str) -> Any:
    for key in keys:
        data = data.get(key) if isinstance(data, dict) else None
    return data


def _job_num(job_dir: Path) -> int | None:
    hydra_yaml = job_dir / ".hydra" / "hydra.yaml"
    num = _dig(_load_yaml(hydra_yaml), "hydra", "job", "num") if hydra_yaml.is_file() else None
    if isinstance(num, int):
        return num
    return int(job_dir.name) if job_dir.name.isdigit() else None


def _job_state(status: dict[str, Any] | None, has_metrics: bool) -> State:
    if status is None:  # runs from before status.json: metrics.json is written last, so it means finished
        return State.DONE if has_metrics else State.INCOMPLETE
    state = _STATUS_STATES.get(str(status.get("status")), State.INCOMPLETE)
    return State.NO_METRICS if state is State.DONE and not has_metrics else state


def read_job(job_dir: Path, num: int) -> Job:
    overrides_yaml = job_dir / ".hydra" / "overrides.yaml"
    overrides = tuple(str(o) for o in (_load_yaml(overrides_yaml) or [])) if overrides_yaml.is_file() else ()
    config_yaml = job_dir / ".hydra" / "config.yaml"
    cfg = _load_config(config_yaml) if config_yaml.is_file() else OmegaConf.create()
    status_path = job_dir / "status.json"
    status = _load_json(status_path, "status.json") if status_path.is_file() else None
    metrics = {p.parent.name: read_metrics(p) for p in sorted((job_dir / "eval").glob("*/metrics.json"))}
    metrics = {d: metrics[d] for d in _suite_order(job_dir / "eval", metrics)}
    name = _plain(cfg, "name") if isinstance(cfg, DictConfig) else None
    seed = _override_value(overrides, SEED_KEY)
    if seed is None and isinstance(cfg, DictConfig) and _plain(cfg, SEED_KEY) is not None:
        seed = str(_plain(cfg, SEED_KEY))
    contrasts, primary, problems = (), None, []
    try:  # a recorded config cannot be fixed after the run: report its mistakes, keep the table
        contrasts = _config_contrasts(cfg, config_yaml)
    except ReportError as exc:
        problems.append(str(exc))
    try:
        primary = _config_primary(cfg, config_yaml)
    except ReportError as exc:
        problems.append(str(exc))
    return Job(num=num, overrides=overrides, state=_job_state(status, bool(metrics)),
               name=str(name) if name is not None else (status or {}).get("name"),
               seed=seed, error=(status or {}).get("error"), metrics=metrics, path=job_dir,
               contrasts=contrasts, primary=primary, problems=tuple(problems))


# ---------------------------------------------------------------------------------------------------- expected jobs


class _GroupOptions:
    """Just enough of a Hydra ConfigLoader for `glob()`: a config group's options from the sweep's config sources."""

    def __init__(self, config_sources: Sequence[dict[str, Any]]) -> None:
        from hydra._internal.config_repository import ConfigRepository
        from hydra._internal.config_search_path_impl import ConfigSearchPathImpl
        from hydra.core.plugins import Plugins

        Plugins.instance()  # registers the file/pkg/structured config source types
        search_path = ConfigSearchPathImpl()
        for source in config_sources:
            search_path.append(provider=str(source["provider"]), path=f"{source['schema']}://{source['path']}")
        self._repo = ConfigRepository(config_search_path=search_path)

    def get_group_options(self, group_name: str, results_filter: Any = None, **_: Any) -> list[str]:
        from hydra.core.object_type import ObjectType

        return self._repo.get_group_options(group_name, results_filter or ObjectType.CONFIG)


def expand_sweep(multirun: dict[str, Any]) -> list[tuple[str, ...]]:
    """The jobs of a BasicSweeper sweep, in job-number order, as Hydra builds them from multirun.yaml."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    target = str(_dig(multirun, "hydra", "sweeper", "_target_") or BasicSweeper.__name__)
    if not target.endswith(BasicSweeper.__name__):
        raise ReportError(f"sweeper {target} is not Hydra's basic sweeper")
    # BasicSweeper.sweep: sweeper params first, then the command line's task overrides
    arguments = [f"{k}={v}" for k, v in (_dig(multirun, "hydra", "sweeper", "params") or {}).items()]
    arguments += [str(o) for o in _dig(multirun, "hydra", "overrides", "task") or []]
    sources = _dig(multirun, "hydra", "runtime", "config_sources") or []
    loader = _GroupOptions(sources) if any("glob(" in a for a in arguments) else None
    parsed = OverridesParser.create(config_loader=loader).parse_overrides(arguments)
    batches = BasicSweeper.split_arguments(parsed, max_batch_size=None)
    return [tuple(job) for job in batches[0]]


def _expected_jobs(sweep: Path, present: list[Job]) -> tuple[list[tuple[str, ...]] | None, str]:
    """(expected overrides by job number, or None to use the present jobs; a footer line saying which)."""
    multirun_yaml = sweep / "multirun.yaml"
    fallback = f"jobs: the {len(present)} job directories present"
    if not multirun_yaml.is_file():
        return None, f"{fallback} (no multirun.yaml)"
    multirun = _load_yaml(multirun_yaml) or {}
    try:
        expected = expand_sweep(multirun)
    except Exception as exc:  # noqa: BLE001 - any failure to re-expand means: trust the directories
        return None, f"{fallback} (could not expand the sweep in multirun.yaml: {' '.join(str(exc).split())})"
    if not expected and present:
        return None, f"{fallback} (multirun.yaml expands to no job)"
    # the expansion must agree with what ran (a config dir edited since would list other glob options)
    disagree = [j.num for j in present if j.num >= len(expected) or expected[j.num] != j.overrides]
    if disagree:
        return None, f"{fallback} (multirun.yaml's sweep does not match job {disagree[0]}'s overrides)"
    return expected, f"jobs: {len(expected)} expected from multirun.yaml, {len(present)} present"


def collect_jobs(sweep: Path) -> tuple[list[Job], str]:
    """Every job of the sweep in job-number order: the present ones read from disk, the expected absent ones MISSING."""
    if not sweep.is_dir():
        raise ReportError(f"{sweep}: no such directory")
    dirs = job_dirs(sweep)
    if not dirs and not (sweep / "multirun.yaml").is_file():
        raise ReportError(f"{sweep}: not a Hydra sweep directory (expected multirun.yaml or <n>/.hydra/)")
    nums = [_job_num(d) for d in dirs]
    next_free = max((n for n in nums if n is not None), default=-1) + 1
    present = []
    for d, num in zip(dirs, nums):
        if num is None:  # a custom subdir without a job number: keep it, after the numbered ones
            num, next_free = next_free, next_free + 1
        present.append(read_job(d, num))
    expected, note = _expected_jobs(sweep, present)
    by_num = {j.num: j for j in present}
    missing = [Job(num=i, overrides=o, state=State.MISSING, seed=_override_value(o, SEED_KEY))
               for i, o in enumerate(expected or []) if i not in by_num]
    return sorted(present + missing, key=lambda j: j.num), note


# ---------------------------------------------------------------------------------------------------- the table


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
    notes: list[str]  # one per job that did not finish: "failed (seed=1): <error>", "missing (seed=2)", ...
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

    def row(self, label: str) -> Row:
        return next(r for r in self.rows if r.label == label)


def _is_row_key(override: str) -> bool:
    key = override_key(override)
    return key != SEED_KEY and key not in COLLECTION_KEYS


def _row_key(job: Job) -> tuple[str, ...]:
    return tuple(o for o in job.overrides if _is_row_key(o))


def _number(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


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
    return cols + [Column(f"avg {measure}", 4, _average_value(datasets, measure)),
                   Column("avg FLOPS", 3, _average_value(datasets, "flops")),
                   Column("avg q dims", 1, _average_value(datasets, "query_active_dims")),
                   Column("avg d dims", 1, _average_value(datasets, "doc_active_dims"))]


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


def _job_note(job: Job) -> str:
    which = " ".join(o for o in job.overrides if not _is_row_key(o)) or f"job {job.num}"
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
    rows = []
    for label, group in zip(_labels(list(groups.values())), groups.values()):
        seeds = _seed_metrics(group)
        cells = [Cell([v for s in seeds if (v := c.value(s)) is not None]) for c in columns]
        notes = [_job_note(j) for j in group if j.state is not State.DONE]
        rows.append(Row(label, len(seeds), cells, notes, jobs=group))
    names = {j.name for j in jobs if j.name is not None}
    title = names.pop() if len(names) == 1 else f"{sweep.parent.name}/{sweep.name}"
    footer = [STD_NOTE + f"; avg: mean over {', '.join(datasets) or 'the collections'} per seed",
              f"sweep: {sweep}; {jobs_note}"]
    table = Table(title, sweep, columns, rows, footer, measure=measure, datasets=datasets)
    for job in jobs:  # the experiment configs' contrasts, in sweep order, each once
        table.problems += [p for p in job.problems if p not in table.problems]
        for a, b in job.contrasts:
            try:
                add_contrast(table, a, b, f"{job.path / '.hydra' / 'config.yaml'}: {CONTRAST_KEY}")
            except ReportError as exc:  # e.g. a label for another table's rows: say so, but write this table
                table.problems += [str(exc)] if str(exc) not in table.problems else []
    _set_primary(table, jobs)
    return table


def _set_primary(table: Table, jobs: Sequence[Job]) -> None:
    """The table's primary contrast: the one its jobs' configs declare, which must be one of its contrasts."""
    declared = list(dict.fromkeys(j.primary for j in jobs if j.primary is not None))
    if not declared:
        return
    where = f"{PRIMARY_KEY} of the jobs of {table.sweep}"
    if len(declared) > 1:
        table.problems.append(f"{where}: the jobs declare different primary contrasts {declared}; none is marked")
    elif declared[0] not in [(a, b) for a, b, _ in table.contrasts]:
        table.problems.append(f"{where}: {list(declared[0])} is not one of the table's contrasts "
                              f"({', '.join(f'{a} − {b}' for a, b, _ in table.contrasts) or 'none'})")
    else:
        table.primary = declared[0]


def add_contrast(table: Table, a: str, b: str, source: str) -> None:
    """Ask for the contrast A − B (row labels) once; `source` names where it was asked for, for error messages."""
    labels = [r.label for r in table.rows]
    for label in (a, b):
        if labels.count(label) != 1:
            what = "is not a row label" if label not in labels else "labels several rows"
            raise ReportError(f"{source}: {label!r} {what} of the table of {table.sweep} (rows: {', '.join(labels)})")
    if (a, b) not in [(x, y) for x, y, _ in table.contrasts]:
        table.contrasts.append((a, b, source))


# ---------------------------------------------------------------------------------------------------- contrasts

# The average over collections, for a contrast. Query level: the queries of every collection pooled into one paired
# sample (ids prefixed by the collection), each query weighing the same, so its Δ is a query-weighted mean and differs
# from the table's avg column (a mean of per-collection means) when the collections differ in size; pooling keeps both
# query-level tests on plain per-query differences. Seed level: stratified by collection, so its Δ is the avg
# column's.
POOLED = "all (pooled)"


@dataclass
class ContrastLine:
    a: str
    b: str
    dataset: str  # a collection or POOLED
    budget: str  # FULL or a budget label (q16-d64)
    seeds_a: int
    seeds_b: int
    result: stats.PairedComparison | None  # query level: the seeds' mean per query, paired by query
    note: str = ""
    seed: stats.SeedComparison | None = None  # seed level: matched seeds, avg-column difference
    primary: bool = False  # the table's declared primary contrast (report.primary)
    p_seed_holm: float | None = None  # on the contrast's headline line only (see _headline)
    reading: str = ""  # likewise


@dataclass
class Contrasts:
    title: str
    measure: str
    lines: list[ContrastLine]
    footer: list[str]


def _key(measure: str, budget: str) -> str:
    return measure if budget == FULL else f"{measure}@{budget}"


def _budgets(rows: Sequence[Row], measure: str) -> list[str]:
    """Budget labels of `measure` that any finished job of the rows evaluated, in the order the runs list them."""
    labels = [split_budget_key(k)[1] for r in rows for j in r.jobs if j.state is State.DONE
              for m in j.metrics.values() for k in m if split_budget_key(k)[0] == measure]
    return list(dict.fromkeys(b for b in labels if b is not None))


def _row_per_seed(row: Row, dataset: str, key: str) -> tuple[dict[str, dict[str, float]] | None, str]:
    """({seed: per-query values of `key` on `dataset`}, why not when None)."""
    per_seed = {}
    for seed_jobs in _seeds(row.jobs):
        jobs = [j for j in seed_jobs if dataset in j.metrics]
        found = [pq[key] for j in jobs if (pq := j.per_query(dataset)) is not None and key in pq]
        if len(found) != len(jobs):  # a subset of the seeds would be another system than the table's cell
            return None, f"{row.label}: no per-query {key} on {dataset} for seed {jobs[0].seed} (per_query.json " \
                         f"missing or without this key: a run from before per-query metrics, or another budget)"
        if found:  # the same collection evaluated twice for one seed is averaged, as in the table
            label = seed_jobs[0].seed if seed_jobs[0].seed is not None else f"job{seed_jobs[0].num}"
            per_seed[label] = stats.mean_over_seeds(found, what=f"{row.label} seed {jobs[0].seed} on {dataset}")
    if not per_seed:
        return None, f"{row.label}: no finished run on {dataset}"
    return per_seed, ""


def _by_seed(per_set: dict[str, dict[str, dict[str, float]]]) -> dict[str, dict[str, dict[str, float]]]:
    """{set: {seed: values}} -> {seed: {set: values}} for the seeds present on every set."""
    seeds = set.intersection(*(set(v) for v in per_set.values())) if per_set else set()
    return {s: {d: per_set[d][s] for d in per_set} for s in seeds}


def _seed_level(table: Table, a: str, b: str, per_set_a: dict[str, dict[str, dict[str, float]]],
                per_set_b: dict[str, dict[str, dict[str, float]]], n_permutations: int
                ) -> tuple[stats.SeedComparison | None, str]:
    """The seed-level comparison over the given sets (None and why when the rows share no seed)."""
    by_a, by_b = _by_seed(per_set_a), _by_seed(per_set_b)
    if not set(by_a) & set(by_b):
        return None, f"seed level: no seed in common ({', '.join(sorted(by_a))} vs {', '.join(sorted(by_b))})"
    try:
        return stats.compare_seeds(by_a, by_b, n_permutations, what=f"{a} vs {b}"), ""
    except stats.StatsError as exc:
        raise ReportError(f"{table.sweep}: contrast {exc}") from exc


def _contrast_lines(table: Table, a: str, b: str, budget: str, n_permutations: int) -> list[ContrastLine]:
    """One contrast at one budget: a line per collection, and the pooled line when there are several."""
    pair = (table.row(a), table.row(b))
    key = _key(table.measure, budget)
    per_set: dict[str, tuple[dict, dict]] = {}  # collection -> ({seed: values} of A, of B)
    lines, missing = [], []
    for dataset in table.datasets:
        try:
            (sa, why_a), (sb, why_b) = (_row_per_seed(r, dataset, key) for r in pair)
            va, vb = (stats.mean_over_seeds(list(x.values()), what=f"{r.label} on {dataset}") if x else None
                      for x, r in ((sa, pair[0]), (sb, pair[1])))
        except stats.StatsError as exc:  # a row's seeds evaluated different queries
            raise ReportError(f"{table.sweep}: contrast {a} vs {b}: {exc}") from exc
        line = ContrastLine(a, b, dataset, budget, len(sa or ()), len(sb or ()), None,
                            "; ".join(w for w in (why_a, why_b) if w))
        if va is not None and vb is not None:
            per_set[dataset] = (sa, sb)
            line.result = _compare(table, a, b, dataset, va, vb, n_permutations)
            line.seed, why = _seed_level(table, a, b, {dataset: sa}, {dataset: sb}, n_permutations)
            line.note = "; ".join(w for w in (line.note, why) if w)
        else:
            missing.append(dataset)
        lines.append(line)
    if len(table.datasets) > 1:
        lines.append(_pooled_line(table, a, b, budget, per_set, missing, n_permutations))
    return lines


def _pooled_line(table: Table, a: str, b: str, budget: str, per_set: dict[str, tuple[dict, dict]],
                 missing: list[str], n_permutations: int) -> ContrastLine:
    """Query level: every collection's queries as one sample; seed level: stratified by collection (the avg column)."""
    line = ContrastLine(a, b, POOLED, budget, min((len(sa) for sa, _ in per_set.values()), default=0),
                        min((len(sb) for _, sb in per_set.values()), default=0), None)
    if missing:
        line.note = f"not pooled: no per-query values on {', '.join(missing)}"
        return line
    means = {d: tuple(stats.mean_over_seeds(list(x.values())) for x in pair) for d, pair in per_set.items()}
    pooled_a = {f"{d}/{q}": v for d, (va, _) in means.items() for q, v in va.items()}
    pooled_b = {f"{d}/{q}": v for d, (_, vb) in means.items() for q, v in vb.items()}
    line.result = _compare(table, a, b, POOLED, pooled_a, pooled_b, n_permutations)
    line.seed, line.note = _seed_level(table, a, b, {d: sa for d, (sa, _) in per_set.items()},
                                       {d: sb for d, (_, sb) in per_set.items()}, n_permutations)
    return line


def _headline(lines: Sequence[ContrastLine], n_datasets: int) -> ContrastLine | None:
    """The line that stands for a contrast's claim: the average over collections (pooled), at full sparsity."""
    want = POOLED if n_datasets > 1 else None
    return next((x for x in lines if x.budget == FULL and (want is None or x.dataset == want)), None)


def _reading(line: ContrastLine) -> str:
    """"confirmed" only where the Holm-adjusted seed-level p is below ALPHA; otherwise why not."""
    if line.seed is None or line.p_seed_holm is None:
        return "not testable at seed level"
    if line.p_seed_holm < stats.ALPHA:
        return f"confirmed: A {'>' if line.seed.delta > 0 else '<'} B"
    reasons = []
    if line.seed.min_p >= stats.ALPHA:
        reasons.append(f"{line.seed.n} matched seeds cannot give p < {stats.ALPHA} (smallest p "
                       f"{line.seed.min_p:.3g})")
    if line.result is not None and line.result.p_randomization < stats.ALPHA:
        reasons.append(f"query level only (p {_p(line.result.p_randomization)})")
    return "not confirmed" + (f": {'; '.join(reasons)}" if reasons else "")


def _adjust(heads: Sequence[ContrastLine]) -> None:
    """Holm over the table's contrasts (one headline line each), then each headline's reading."""
    adjusted = stats.holm([x.seed.p if x.seed is not None else float("nan") for x in heads])
    for line, p in zip(heads, adjusted):
        line.p_seed_holm = None if p != p else p
        line.reading = _reading(line)


def build_contrasts(table: Table, n_permutations: int = stats.N_PERMUTATIONS) -> Contrasts | None:
    """The table's contrasts (None without any): per collection, pooled, at full sparsity and each budget; both
    levels of test on every line, Holm and the reading on each contrast's headline line."""
    if not table.contrasts and not table.problems:
        return None
    lines: list[ContrastLine] = []
    heads: list[ContrastLine] = []
    for a, b, _ in table.contrasts:
        mine = [x for budget in [FULL, *_budgets((table.row(a), table.row(b)), table.measure)]
                for x in _contrast_lines(table, a, b, budget, n_permutations)]
        for x in mine:
            x.primary = (a, b) == table.primary
        head = _headline(mine, len(table.datasets))
        heads += [head] if head is not None else []
        lines += mine
    _adjust(heads)
    footer = _contrast_footer(table, len(heads), n_permutations, any(x.budget != FULL for x in lines))
    return Contrasts(f"contrasts: {table.title}", table.measure, lines, footer)


def _contrast_footer(table: Table, n_heads: int, n_permutations: int, budgets: bool) -> list[str]:
    footer = [
        f"query level — per-query {table.measure} of a row: the mean over its seeds; queries paired by id (both rows "
        "must have evaluated the same queries); the models are taken as fixed, so these p-values cover the sampling "
        "of queries, not the variation between training runs",
        f"Δ = mean(A) − mean(B); 95% CI: paired t interval of the mean difference; p query (sign-flip): two-sided "
        f"paired sign-flip test over queries, {n_permutations:,} random sign vectors, seed {stats.SEED}, p = (1 + #as "
        f"extreme) / (1 + {n_permutations:,}); p query (t): two-sided paired t-test (scipy.stats.ttest_rel)",
        f"seed level — seed i of A matched with seed i of B (matched: how many); Δ seeds: per matched seed the mean "
        f"over collections of the per-collection mean difference (the avg column's difference), averaged over seeds; "
        f"p seed (sign-flip): two-sided, the sign of each seed's whole difference flipped, every pattern enumerated up "
        f"to {stats.MAX_EXACT_SEEDS} seeds (n seeds cannot give p < 2/2^n: 3 seeds 0.25), sampled beyond "
        f"({n_permutations:,} patterns)",
        f"p seed Holm: Holm's adjustment over the table's {n_heads} contrasts, on each contrast's headline line "
        f"({POOLED if len(table.datasets) > 1 else 'its collection'}, {FULL}); reading: \"confirmed\" only where it "
        f"is below {stats.ALPHA}",
    ]
    if table.primary is not None:
        footer.append(f"(primary): the contrast the experiment config declares primary (report.primary: "
                      f"{table.primary[0]} − {table.primary[1]}), decided before the runs; adjusted with the others")
    if len(table.datasets) > 1:
        footer.append(f"{POOLED}: query level, the queries of every collection as one sample, each query weighing the "
                      "same (a query-weighted Δ); seed level, stratified by collection (Δ seeds is the avg column's)")
    if budgets:
        footer.append("budget qK-dK: every query (doc) pruned to its K largest weights after encoding, then searched "
                      f"again (eval.budgets); {FULL}: each run's own sparsity")
    footer += [f"not computed: {p}" for p in table.problems]
    return footer


def _compare(table: Table, a: str, b: str, dataset: str, va: dict[str, float], vb: dict[str, float],
             n_permutations: int) -> stats.PairedComparison:
    try:
        return stats.compare(va, vb, n_permutations=n_permutations, what=f"{a} vs {b} on {dataset}")
    except stats.StatsError as exc:
        raise ReportError(f"{table.sweep}: contrast {exc}") from exc


def _split_contrast(text: str, labels: set[str]) -> tuple[str, str]:
    """`A,B` -> (A, B); a label may itself hold a comma (`lr=1,2`): the split whose two sides are both row labels."""
    splits = [(text[:i], text[i + 1:]) for i, c in enumerate(text) if c == ","]
    known = [(a, b) for a, b in splits if a in labels and b in labels]
    if len(known) == 1:
        return known[0]
    if len(splits) == 1:
        return splits[0]
    raise ReportError(f"--contrast {text!r}: expected two row labels as A,B")


def add_cli_contrast(tables: Sequence[Table], text: str) -> None:
    """`--contrast A,B`: added to every table that has both rows (several sweeps: the ones it concerns)."""
    a, b = _split_contrast(text, {r.label for t in tables for r in t.rows})
    hits = [t for t in tables if {a, b} <= {r.label for r in t.rows}]
    if not hits:
        rows = "; ".join(f"{t.sweep}: {', '.join(r.label for r in t.rows)}" for t in tables)
        raise ReportError(f"--contrast {text!r}: no table has both rows {a!r} and {b!r} (rows: {rows})")
    for table in hits:
        add_contrast(table, a, b, f"--contrast {text!r}")


# ---------------------------------------------------------------------------------------------------- rendering


def _fmt(x: float | None, decimals: int) -> str:
    return "" if x is None else f"{x:.{decimals}f}"


def _cell_text(cell: Cell, decimals: int, row_n: int, pm: str) -> str:
    if cell.mean is None:
        return ""
    text = _fmt(cell.mean, decimals) + (f"{pm}{_fmt(cell.std, decimals)}" if cell.std is not None else "")
    return text if cell.n == row_n else f"{text} (n={cell.n})"


def _short(text: str) -> str:
    return text if len(text) <= MAX_NOTE_CHARS else text[: MAX_NOTE_CHARS - 1] + "…"


def _row_texts(table: Table, row: Row, pm: str) -> list[str]:
    cells = [_cell_text(c, col.decimals, row.n, pm) for c, col in zip(row.cells, table.columns)]
    return [row.label, str(row.n), *cells, _short(row.status)]


def _headers(table: Table) -> list[str]:
    return ["run", "n", *(c.header for c in table.columns), "status"]


def _md_line(cells: Sequence[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") or "–" for c in cells) + " |"


def to_markdown(table: Table) -> str:
    headers = _headers(table)
    rule = "|" + "|".join(["---", *["---:"] * (len(headers) - 2), "---"]) + "|"  # numbers right-aligned
    lines = [f"### {table.title}", "", _md_line(headers), rule]
    lines += [_md_line(_row_texts(table, row, " ± ")) for row in table.rows]
    return "\n".join([*lines, "", *(f"{f}." for f in table.footer)]) + "\n"


def to_csv(table: Table) -> str:
    """One line per row; numbers unrounded, a `<column> std` and `<column> n` after each mean; full error text."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["run", "n", *(f"{c.header}{s}" for c in table.columns for s in ("", " std", " n")), "status"])
    for row in table.rows:
        stats = [x for c in row.cells for x in (c.mean, c.std, c.n)]
        writer.writerow([row.label, row.n, *("" if x is None else repr(x) for x in stats), row.status])
    return out.getvalue()


_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "|": r"\textbar{}",
                  "<": r"\textless{}", ">": r"\textgreater{}", "±": r"$\pm$"}
_LATEX_RE = re.compile("|".join(re.escape(c) for c in _LATEX_SPECIAL))


def latex_escape(text: str) -> str:
    return _LATEX_RE.sub(lambda m: _LATEX_SPECIAL[m.group()], text)


def to_latex(table: Table) -> str:
    """A booktabs `table` with a `tabular`: the markdown's rows and cells, footer as the caption."""
    headers = _headers(table)
    spec = "l" + "r" * (len(headers) - 2) + "l"
    lines = [r"\begin{table}[t]", r"\centering", rf"\begin{{tabular}}{{{spec}}}", r"\toprule",
             " & ".join(latex_escape(h) for h in headers) + r" \\", r"\midrule"]
    lines += [" & ".join(latex_escape(c) or "--" for c in _row_texts(table, row, " ± ")) + r" \\"
              for row in table.rows]
    caption = latex_escape(f"{table.title}: {table.footer[0]}.")
    lines += [r"\bottomrule", r"\end{tabular}", rf"\caption{{{caption}}}", r"\end{table}"]
    return "\n".join([f"% {' '.join(f.split())}" for f in table.footer[1:]] + lines) + "\n"


def _p(p: float) -> str:
    return "" if p != p else (f"{p:.4f}" if p >= 1e-4 else f"{p:.1e}")  # p != p: NaN (one query)


def _signed(x: float) -> str:
    return "" if x != x else f"{x:+.4f}".replace("-", "−")


def _seed_texts(line: ContrastLine) -> list[str]:
    """matched seeds, Δ seeds, p seed, p seed Holm, reading."""
    r = line.seed
    if r is None:
        return ["", "", "", "", line.reading]
    holm = "" if line.p_seed_holm is None else _p(line.p_seed_holm)
    return [str(r.n), _signed(r.delta), _p(r.p) + ("" if r.exact else " (sampled)"), holm, line.reading]


def _contrast_texts(line: ContrastLine) -> list[str]:
    r = line.result
    head = [f"{line.a} − {line.b}" + (" (primary)" if line.primary else ""), line.dataset, line.budget]
    if r is None:
        return [*head, "", f"{line.seeds_a}/{line.seeds_b}", "", "", "", "", "", "", *_seed_texts(line), line.note]
    ci = f"[{_signed(r.ci_low)}, {_signed(r.ci_high)}]" if r.ci_low == r.ci_low else ""
    return [*head, str(r.n), f"{line.seeds_a}/{line.seeds_b}", f"{r.mean_a:.4f}", f"{r.mean_b:.4f}",
            _signed(r.delta), ci, _p(r.p_randomization), _p(r.p_t), *_seed_texts(line), line.note]


CONTRAST_HEADERS = ("A − B", "set", "budget", "queries", "seeds A/B", "A {m}", "B {m}", "Δ", "95% CI",
                    "p query (sign-flip)", "p query (t)", "matched seeds", "Δ seeds", "p seed (sign-flip)",
                    "p seed Holm", "reading", "note")


def contrasts_markdown(contrasts: Contrasts) -> str:
    headers = [h.format(m=contrasts.measure) for h in CONTRAST_HEADERS]
    rule = "|" + "|".join(["---"] * 3 + ["---:"] * (len(headers) - 6) + ["---"] * 3) + "|"
    lines = [f"### {contrasts.title}", "", _md_line(headers), rule]
    lines += [_md_line(_contrast_texts(x)) for x in contrasts.lines]
    return "\n".join([*lines, "", *(f"{f}." for f in contrasts.footer)]) + "\n"


def contrasts_csv(contrasts: Contrasts) -> str:
    """One line per contrast, collection and budget; numbers unrounded."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    fields = ("n", "mean_a", "mean_b", "delta", "ci_low", "ci_high", "p_randomization", "p_t")
    seed_fields = ("matched_seeds", "delta_seeds", "p_seed", "p_seed_exact")
    writer.writerow(["a", "b", "set", "budget", "seeds_a", "seeds_b", "measure", *fields, *seed_fields,
                     "p_seed_holm", "primary", "reading", "note"])
    for x in contrasts.lines:
        numbers = ["" if x.result is None else repr(getattr(x.result, f)) for f in fields]
        s = x.seed
        seeds = ["", "", "", ""] if s is None else [s.n, repr(s.delta), repr(s.p), s.exact]
        holm = "" if x.p_seed_holm is None else repr(x.p_seed_holm)
        writer.writerow([x.a, x.b, x.dataset, x.budget, x.seeds_a, x.seeds_b, contrasts.measure, *numbers, *seeds,
                         holm, x.primary, x.reading, x.note])
    return out.getvalue()


def tradeoff_points(table: Table) -> dict[str, list[tuple[float, float]]]:
    """Per row, one (avg FLOPS, avg measure) point per seed that has both."""
    flops, measure = (next(c for c in table.columns if c.header == h)
                      for h in ("avg FLOPS", f"avg {table.measure}"))
    points: dict[str, list[tuple[float, float]]] = {}
    for row in table.rows:
        pairs = [(x, y) for seed in _seed_metrics(row.jobs)
                 if (x := flops.value(seed)) is not None and (y := measure.value(seed)) is not None]
        if pairs:
            points[row.label] = pairs
    return points


def write_tradeoff(table: Table, path: str | Path) -> Path | None:
    """tradeoff.png: average measure against FLOPS, seeds as small points, each row's mean as a large marker."""
    points = tradeoff_points(table)
    if not points:
        return None
    fig = Figure(figsize=(7, 4.5), constrained_layout=True)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for i, (label, pairs) in enumerate(points.items()):
        xs, ys = zip(*pairs)
        color = f"C{i % 10}"
        ax.scatter(xs, ys, s=14, alpha=0.5, color=color)
        ax.scatter([np.mean(xs)], [np.mean(ys)], s=80, marker="D", color=color, edgecolor="black",
                   label=f"{label} (n={len(pairs)})")
    flops = [x for pairs in points.values() for x, _ in pairs]
    if min(flops) > 0 and max(flops) / min(flops) > 10:  # rows an order of magnitude apart in cost
        ax.set_xscale("log")
    ax.set_xlabel("avg FLOPS (expected multiplications per query-doc pair)")
    ax.set_ylabel(f"avg {table.measure}")
    ax.set_title(f"{table.title}: {table.measure} vs FLOPS (points: seeds, diamonds: means)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    path = Path(path)
    with atomic_path(path, disk_errors=False) as tmp:  # readers never see half an image
        fig.savefig(tmp, format="png", dpi=120)
    return path


# ---------------------------------------------------------------------------------------------------- writing, CLI


def write_text(path: str | Path, text: str) -> Path:
    """Atomic (vtlab.atomic: a temp file renamed into place): readers never see half a table."""
    return atomic_write(path, lambda f: f.write(text))


def write_table(table: Table, out_dir: str | Path) -> list[Path]:
    renders = (to_markdown, to_csv, to_latex)
    return [write_text(Path(out_dir) / name, render(table)) for name, render in zip(OUTPUT_NAMES, renders)]


def write_contrasts(contrasts: Contrasts, out_dir: str | Path) -> list[Path]:
    renders = (contrasts_markdown, contrasts_csv)
    return [write_text(Path(out_dir) / name, render(contrasts)) for name, render in zip(CONTRAST_NAMES, renders)]


def _out_dirs(sweeps: Sequence[Path], out: Path | None) -> list[Path]:
    """Each sweep's own directory; with --out, DIR itself for one sweep, DIR/<date>_<time> for several."""
    if out is None:
        return list(sweeps)
    if len(sweeps) == 1:
        return [out]
    names = [f"{s.resolve().parent.name}_{s.resolve().name}" for s in sweeps]
    return [out / (n if names.count(n) == 1 else f"{n}_{i}") for i, n in enumerate(names)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m vtlab.report",
        description="Tables (markdown, CSV, LaTeX) from finished vtlab Hydra sweeps: mean ± sample std over seeds.")
    parser.add_argument("sweeps", nargs="+", type=Path, metavar="SWEEP_DIR",
                        help="outputs/multirun/<date>/<time>-<name>; one table each")
    parser.add_argument("--measure", default=DEFAULT_MEASURE,
                        help=f"measure shown per collection and averaged (default {DEFAULT_MEASURE})")
    parser.add_argument("--out", type=Path, default=None,
                        help="where table.md/.csv/.tex go (default: the sweep dir; one sub-directory per sweep "
                             "when several are given)")
    parser.add_argument("--contrast", action="append", default=[], metavar="A,B",
                        help=f"a contrast of two row labels, besides the sweeps' {CONTRAST_KEY} (repeatable)")
    parser.add_argument("--permutations", type=int, default=stats.N_PERMUTATIONS,
                        help=f"sign flips of the randomization test (default {stats.N_PERMUTATIONS:,})")
    args = parser.parse_args(argv)
    try:
        if args.permutations < 1:
            raise ReportError(f"--permutations={args.permutations}: expected >= 1")
        tables = [build_table(s, args.measure) for s in args.sweeps]  # all read before anything is written
        for text in args.contrast:
            add_cli_contrast(tables, text)
        contrasts = [build_contrasts(t, args.permutations) for t in tables]
        for table, contrast, out_dir in zip(tables, contrasts, _out_dirs(args.sweeps, args.out)):
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


if __name__ == "__main__":
    sys.exit(main())
