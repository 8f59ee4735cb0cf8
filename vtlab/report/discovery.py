"""Finding a sweep's jobs and reading their results: the job directories present (status.json, .hydra/, eval/),
and the jobs expected from multirun.yaml, expanded through Hydra's own override parser and BasicSweeper (see
vtlab.report)."""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf

from vtlab.core.atomic import atomic_write
from vtlab.core.errors import VtlabError
from vtlab.core.json_files import JsonFileError, read_json, what_is_wrong
from vtlab.core.overrides import key as override_key
from vtlab.core.records import load_record
from vtlab.runs.status import job_dirs

SEED_KEY = "seed"
CONTRAST_KEY = "report.contrasts"  # the experiment config's list of [row A, row B] pairs
PRIMARY_KEY = "report.primary"  # the experiment config's one [row A, row B] pair declared primary before the runs
# the experiment config's {doc_dims: <number or null>, score: <number or null>}: a finished seed whose final mean active
# document dims, or whose average of the table's measure over its collections, is strictly under it counts as collapsed
COLLAPSE_FLOOR_KEY = "report.collapse_floor"
EXPLORATORY_FILE = "exploratory.json"  # in a sweep directory, {"reason": "..."}: its table's contrasts get no verdict


class ReportError(VtlabError):
    """Bad input to the report: the message names the path and what is wrong with it."""


class State(enum.Enum):
    DONE = "done"
    FAILED = "failed"
    MISSING = "missing"
    INCOMPLETE = "incomplete"
    NO_METRICS = "no metrics"  # finished, but evaluated nothing (stage=transfer, eval=none)


_STATUS_STATES = {"done": State.DONE, "failed": State.FAILED, "running": State.INCOMPLETE}


@dataclass(frozen=True)
class CollapseFloor:
    """An experiment's declared collapse floor (COLLAPSE_FLOOR_KEY); a side left null is not checked."""

    doc_dims: float | None = None  # final mean active dims per document, mean over the collections (`doc_active_dims`)
    score: float | None = None  # the table's measure, mean over the collections (the table's avg column)

    def __str__(self) -> str:
        parts = [f"doc_dims: {self.doc_dims:g}" if self.doc_dims is not None else "doc_dims: null"]
        parts.append(f"score: {self.score:g}" if self.score is not None else "score: null")
        return "{" + ", ".join(parts) + "}"


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
    # collapsed, in one line: the collapse detector's record (collapse.json: what and when), else, set by the table,
    # the declared floor its final values fell under (report.collapse_floor); None: not collapsed
    collapse: str | None = None
    collapse_floor: CollapseFloor | None = None  # its config's report.collapse_floor (None: not declared)
    _per_query: dict[str, dict[str, dict[str, float]] | None] = field(default_factory=dict, repr=False)

    def per_query(self, dataset: str) -> dict[str, dict[str, float]] | None:
        """eval/<dataset>/per_query.json ({measure key: {query id: value}}), None for runs from before it; read once."""
        if dataset not in self._per_query:
            path = (self.path or Path()) / "eval" / dataset / "per_query.json"
            self._per_query[dataset] = _read_per_query(path) if self.path is not None and path.is_file() else None
        return self._per_query[dataset]


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
    """The JSON object in `path`; ReportError `<path>: malformed <what> (why)` for anything read_json refuses (not a
    regular file, not JSON, not an object)."""
    try:
        return read_json(path)
    except JsonFileError as exc:
        raise ReportError(f"{path}: malformed {what} ({what_is_wrong(exc, path)})") from None


def read_metrics(path: Path) -> dict[str, Any]:
    """The "metrics" object of an `eval/<collection>/metrics.json` (see vtlab.evaluation.evaluate)."""
    metrics = _load_json(path, "metrics.json").get("metrics")
    if not isinstance(metrics, dict):
        raise ReportError(f'{path}: malformed metrics.json (no "metrics" object)')
    return metrics


def _read_per_query(path: Path) -> dict[str, dict[str, float]]:
    data = _load_json(path, "per_query.json")
    for key, values in data.items():
        if not isinstance(values, dict) or not all(_number(v) is not None for v in values.values()):
            raise ReportError(f'{path}: malformed per_query.json ("{key}" is not an object of query id -> number)')
    return data


def read_exploratory(sweep: str | Path) -> str | None:
    """Why the sweep's table is exploratory (the "reason" of EXPLORATORY_FILE in the sweep directory), None without
    the file. A marker that cannot be read still makes the table exploratory; the reason then says what is wrong."""
    path = Path(sweep) / EXPLORATORY_FILE
    if not path.exists():
        return None
    try:
        reason = _load_json(path, EXPLORATORY_FILE).get("reason")
    except ReportError as exc:
        return f"reason unreadable: {exc}"
    if not isinstance(reason, str) or not reason.strip():
        return f'reason unreadable: {path}: no "reason" string'
    return " ".join(reason.split())


def write_exploratory(sweep: str | Path, reason: str) -> Path:
    """Mark a sweep's table exploratory (EXPLORATORY_FILE, written atomically): the report gives its contrasts no
    verdict, the reading of each line says "exploratory: <reason>"."""
    if not reason.strip():
        raise ReportError(f"{sweep}: an exploratory table needs a reason")
    return atomic_write(Path(sweep) / EXPLORATORY_FILE, lambda f: f.write(json.dumps({"reason": reason}) + "\n"))


def _config_contrasts(cfg: Any, path: Path) -> tuple[tuple[str, str], ...]:
    raw = _plain(cfg, CONTRAST_KEY) if isinstance(cfg, DictConfig) else None
    if raw is None:
        return ()
    pairs = OmegaConf.to_container(raw) if isinstance(raw, (DictConfig, ListConfig)) else raw
    if not isinstance(pairs, list) or not all(
        isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p) for p in pairs
    ):
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


def _config_collapse_floor(cfg: Any, path: Path) -> CollapseFloor | None:
    """A job config's report.collapse_floor, None where absent, null or with both sides null."""
    raw = _plain(cfg, COLLAPSE_FLOOR_KEY) if isinstance(cfg, DictConfig) else None
    floor = OmegaConf.to_container(raw) if isinstance(raw, (DictConfig, ListConfig)) else raw
    if floor is None:
        return None
    values = floor.values() if isinstance(floor, dict) else ()
    if (
        not isinstance(floor, dict)
        or not set(floor) <= {"doc_dims", "score"}
        or not all(v is None or (_number(v) is not None and math.isfinite(v) and v >= 0) for v in values)
    ):
        raise ReportError(
            f"{path}: {COLLAPSE_FLOOR_KEY} must be {{doc_dims: <number >= 0 or null>, score: <number >= 0 or null>}}, "
            f"got {floor!r}"
        )
    if floor.get("doc_dims") is None and floor.get("score") is None:
        return None
    return CollapseFloor(*(None if floor.get(k) is None else float(floor[k]) for k in ("doc_dims", "score")))


def _load_config(path: Path) -> Any:
    try:
        return load_record(path)
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


def _collapse(job_dir: Path) -> str | None:
    """What the collapse detector recorded (vtlab/callbacks/collapse_detector.py: collapse.json) in words, or None."""
    path = job_dir / "collapse.json"
    if not path.is_file():
        return None
    try:
        fired = _load_json(path, "collapse.json")
    except ReportError as exc:
        return f"the collapse detector fired, its record unreadable ({exc})"
    side = f" on the {fired['side']} side" if fired.get("side") else ""
    then = "training stopped there" if fired.get("action", "stop") == "stop" else "training went on (action=warn)"
    return f"{fired.get('kind', 'a')} collapse{side} at step {fired.get('step', '?')}, {then}"


def floor_collapse(floor: CollapseFloor, doc_dims: float | None, score: float | None, measure: str) -> str | None:
    """The collapse a seed's final values show against the declared floor, in one line (None: not under it). Strictly
    under: a value at the floor is not collapsed; a value the run did not record is not checked."""
    under = []
    if floor.doc_dims is not None and doc_dims is not None and doc_dims < floor.doc_dims:
        under.append(f"final doc dims {doc_dims:.4g} under the floor {floor.doc_dims:g}")
    if floor.score is not None and score is not None and score < floor.score:
        under.append(f"final avg {measure} {score:.4g} under the floor {floor.score:g}")
    return f"{'; '.join(under)} ({COLLAPSE_FLOOR_KEY})" if under else None


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
    contrasts, primary, floor, problems = (), None, None, []
    try:  # a recorded config cannot be fixed after the run: report its mistakes, keep the table
        contrasts = _config_contrasts(cfg, config_yaml)
    except ReportError as exc:
        problems.append(str(exc))
    try:
        primary = _config_primary(cfg, config_yaml)
    except ReportError as exc:
        problems.append(str(exc))
    try:
        floor = _config_collapse_floor(cfg, config_yaml)
    except ReportError as exc:
        problems.append(str(exc))
    return Job(
        num=num,
        overrides=overrides,
        state=_job_state(status, bool(metrics)),
        collapse=_collapse(job_dir),
        name=str(name) if name is not None else (status or {}).get("name"),
        seed=seed,
        error=(status or {}).get("error"),
        metrics=metrics,
        path=job_dir,
        contrasts=contrasts,
        primary=primary,
        collapse_floor=floor,
        problems=tuple(problems),
    )


# ---------------------------------------------------------------------------------------------------- expected jobs


def _config_loader(config_sources: Sequence[dict[str, Any]]) -> Any:
    """Hydra's own ConfigLoader over the sweep's recorded config sources, for `glob()` (a config group's options)."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra._internal.config_search_path_impl import ConfigSearchPathImpl
    from hydra.core.plugins import Plugins

    Plugins.instance()  # registers the file/pkg/structured config source types
    search_path = ConfigSearchPathImpl()
    for source in config_sources:
        search_path.append(provider=str(source["provider"]), path=f"{source['schema']}://{source['path']}")
    return ConfigLoaderImpl(config_search_path=search_path)


def expand_sweep(multirun: dict[str, Any]) -> list[tuple[str, ...]]:
    """The jobs of a BasicSweeper sweep, in job-number order, as Hydra builds them from multirun.yaml."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    target = str(_dig(multirun, "hydra", "sweeper", "_target_") or BasicSweeper.__name__)
    if not target.endswith(BasicSweeper.__name__):
        raise ReportError(f"sweeper {target} is not Hydra's basic sweeper")
    # BasicSweeper.sweep's order: sweeper params first, then the command line's task overrides (sweep() itself would
    # launch the jobs and rewrite multirun.yaml, so its two lines are repeated here)
    arguments = [f"{k}={v}" for k, v in (_dig(multirun, "hydra", "sweeper", "params") or {}).items()]
    arguments += [str(o) for o in _dig(multirun, "hydra", "overrides", "task") or []]
    sources = _dig(multirun, "hydra", "runtime", "config_sources") or []
    loader = _config_loader(sources) if any("glob(" in a for a in arguments) else None
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
        raise ReportError(
            f"{sweep}: not a Hydra sweep directory (expected multirun.yaml or <n>/.hydra/) nor a run directory "
            "(.hydra/ or status.json)"
        )
    nums = [_job_num(d) for d in dirs]
    next_free = max((n for n in nums if n is not None), default=-1) + 1
    present = []
    for d, num in zip(dirs, nums):
        if num is None:  # a custom subdir without a job number: keep it, after the numbered ones
            num, next_free = next_free, next_free + 1
        present.append(read_job(d, num))
    expected, note = _expected_jobs(sweep, present)
    by_num = {j.num: j for j in present}
    missing = [
        Job(num=i, overrides=o, state=State.MISSING, seed=_override_value(o, SEED_KEY))
        for i, o in enumerate(expected or [])
        if i not in by_num
    ]
    return sorted(present + missing, key=lambda j: j.num), note


def _number(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None
