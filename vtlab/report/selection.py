"""Equal selection budget: every arm of a table gets the same grid of settings (e.g. learning rates), each tried at one
seed and scored on the dev split — never on an evaluation set — and keeps its own best.

`vtlab.reproduce` runs the selection sweep (`selection` in the table's experiment config: the grid, the dev evaluation,
the measure, the seed), then `choose` reads it and `write_selected` writes one experiment config per arm — the arm's
own config plus its chosen values, with every tried value's dev score recorded under `report.selection` — which the
table's sweep then runs at all seeds. A table may add a second stage (`selection.then`): settings each arm tries at its
best of the grid (e.g. APC switched off), kept only where they score higher on dev (`refine`). A job that failed or
did not score leaves its arm without a choice: the arm is named in the error, nothing is guessed.

Two rules go beyond "each arm its own best". A **shared** setting (`selection.shared`, e.g. the MLM adaptation's steps)
is one value for every arm, chosen by the arms the table's primary contrast compares (`choose_shared`: the value whose
mean over those arms of their best dev score is highest), so no arm's setting is tuned to another arm's liking. A grid
whose choice sits at its **edge** (`at_edges`) says the best value may lie outside it: vtlab.reproduce then extends it
once, for every arm, on dev.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from vtlab.core.overrides import value as overrides_value
from vtlab.report.discovery import ReportError, State, collect_jobs, override_key


@dataclass(frozen=True)
class Choice:
    arm: str  # the job name (the experiment config's `name`)
    values: dict[str, Any]  # the chosen setting, e.g. {"model.optimizer.lr": 0.001}
    score: float
    tried: tuple[tuple[dict[str, Any], float | None], ...]  # every setting tried and its dev score (None: no result)


def override_text(value: Any) -> str:
    """A value as a Hydra override writes it: None is `null` (str(None) would be the string "None")."""
    return "null" if value is None else str(value)


def setting_of(overrides: tuple[str, ...], keys: list[str]) -> dict[str, Any]:
    pairs = {override_key(o): o for o in overrides if "=" in o}
    return {k: overrides_value(pairs[k]) for k in keys if k in pairs}


def dev_score(metrics: dict[str, dict[str, Any]], sets: list[str], measure: str) -> float | None:
    """The mean of `measure` over the dev collections `sets` (None: one of them lacks it)."""
    values = [metrics.get(d, {}).get(measure) for d in sets]
    if not values or any(v is None for v in values):
        return None
    return sum(float(v) for v in values) / len(values)


def dev_name(dataset: str | None) -> str:
    """How a selection's dev score is named in its lines."""
    return "dev-average" if dataset is None else dataset


def _jobs(sweeps: Path | list[Path]) -> list[Any]:
    return [j for sweep in ([sweeps] if isinstance(sweeps, Path) else sweeps) for j in collect_jobs(sweep)[0]]


def choose(
    sweep: Path | list[Path], keys: list[str], dataset: str | None, measure: str, where: dict[str, Any] | None = None
) -> dict[str, Choice]:
    """arm name → its best setting of `keys` by `measure` on `dataset` (None: the mean over the dev collections; ties:
    the first tried, in sweep order), over the jobs of one sweep or several (a grid extended by a second sweep).
    `where`: only the jobs run at these settings (e.g. a shared setting's chosen value), which the choices include."""
    return _choose(_jobs(sweep), sweep, keys, dataset, measure, where)


def _choose(
    jobs: list[Any],
    sweep: Path | list[Path],
    keys: list[str],
    dataset: str | None,
    measure: str,
    where: dict[str, Any] | None,
) -> dict[str, Choice]:
    """`choose` over jobs already read from `sweep` (named in errors)."""
    if where:
        jobs = [j for j in jobs if setting_of(j.overrides, list(where)) == where]
    # dataset None: every collection any job of the sweep scored, so that no arm is averaged over fewer of them
    sets = list(dict.fromkeys(d for j in jobs for d in j.metrics)) if dataset is None else [dataset]
    tried: dict[str, list[tuple[dict[str, Any], float | None]]] = {}
    for job in jobs:
        if job.name is None:
            continue
        value = dev_score(job.metrics, sets, measure) if job.state is State.DONE else None
        tried.setdefault(job.name, []).append((setting_of(job.overrides, keys), value))
    if not tried:
        raise ReportError(f"selection: no job under {sweep}")
    unscored = sorted(arm for arm, runs in tried.items() if any(score is None for _, score in runs))
    if unscored:
        raise ReportError(
            f"selection: {', '.join(unscored)} under {sweep} have a setting without a {dev_name(dataset)} "
            f"{measure} (failed or missing jobs): every arm must be scored on the whole grid"
        )
    out = {}
    for arm, runs in tried.items():
        values, score = max(runs, key=lambda r: r[1])  # max keeps the first of equal scores
        out[arm] = Choice(arm, {**(where or {}), **values}, score, tuple(({**(where or {}), **v}, s) for v, s in runs))
    return out


@dataclass(frozen=True)
class SharedChoice:
    values: dict[str, Any]  # the shared setting every arm runs at, e.g. {"mlm.steps": 64}
    by: tuple[str, ...]  # the arms whose mean best dev score chose it (the primary contrast's)
    means: tuple[tuple[dict[str, Any], float], ...]  # each shared setting tried and that mean
    choices: dict[str, Choice]  # every arm's own best at the shared setting


def choose_shared(
    sweep: Path | list[Path], keys: list[str], shared: list[str], by: list[str], dataset: str | None, measure: str
) -> SharedChoice:
    """One setting of `shared` for every arm: the value at which the mean over the arms `by` of each one's best dev
    score (over its own `keys`) is highest (ties: the first tried); then each arm's own best of `keys` at that value.
    Every arm was run at every shared value (equal selection budget), but only `by` choose it."""
    jobs = _jobs(sweep)
    settings = list(dict.fromkeys(tuple(setting_of(j.overrides, shared).items()) for j in jobs if j.name is not None))
    if not settings:
        raise ReportError(f"selection: no job under {sweep} to choose {', '.join(shared)} from")
    means = []
    per_setting = {}
    for setting in settings:
        where = dict(setting)
        chosen = _choose(jobs, sweep, keys, dataset, measure, where)
        missing = sorted(set(by) - set(chosen))
        if missing:
            raise ReportError(f"selection: {', '.join(missing)} have no job at {where} under {sweep}")
        per_setting[setting] = chosen
        means.append((where, sum(chosen[a].score for a in by) / len(by)))
    best = max(range(len(settings)), key=lambda i: means[i][1])  # max keeps the first of equal means
    return SharedChoice(means[best][0], tuple(by), tuple(means), per_setting[settings[best]])


def at_edges(choices: dict[str, Choice], key: str, values: list[Any]) -> list[Any]:
    """The edges of a grid's `values` of `key` that some arm chose (the lowest, the highest, or both): the best value
    may lie beyond them."""
    low, high = min(values), max(values)
    picked = {c.values.get(key) for c in choices.values()}
    return [v for v in dict.fromkeys([low, high]) if v in picked]


def refine(first: dict[str, Choice], then: dict[str, Choice]) -> dict[str, Choice]:
    """The second stage of a selection: `then` holds each arm's jobs at its `first` choice plus a setting of
    `selection.then`; a setting replaces the first choice only where it scores higher on dev (a tie keeps the grid's
    choice, which changes less). Every setting tried is recorded with the full values it ran at."""
    missing = sorted(set(first) - set(then))
    if missing:
        raise ReportError(f"selection: {', '.join(missing)} have no job in the second stage (selection.then)")
    out = {}
    for arm, choice in first.items():
        runs = tuple(({**choice.values, **values}, score) for values, score in then[arm].tried)
        values, score = max([(choice.values, choice.score), *runs], key=lambda r: r[1])  # max keeps the first of ties
        out[arm] = Choice(arm, values, score, choice.tried + runs)
    return out


def write_selected(choices: dict[str, Choice], experiments: dict[str, str], root: Path, group: str) -> dict[str, str]:
    """One experiment config per arm under `root`/experiment/`group`/ (a Hydra search-path dir): `experiments` maps
    an arm name to the config it extends. Returns arm name → the `experiment=` value that runs it."""
    out = {}
    folder = root / "experiment" / group
    folder.mkdir(parents=True, exist_ok=True)
    for arm, experiment in experiments.items():
        if arm not in choices:
            raise ReportError(f"selection: no choice for {arm} (not in the selection sweep)")
        choice = choices[arm]
        stem = experiment.rsplit("/", 1)[-1]
        body: dict[str, Any] = {"defaults": [f"/experiment/{experiment}", "_self_"]}
        for key, value in choice.values.items():
            node = body
            *parents, leaf = key.split(".")
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = value
        body["report"] = {"selection": {"score": choice.score, "tried": [{**v, "score": s} for v, s in choice.tried]}}
        text = (
            f"# @package _global_\n# Written by vtlab.reproduce: {experiment} with the setting chosen on dev "
            f"(report.selection: every setting tried and its dev score).\n" + yaml.safe_dump(body, sort_keys=False)
        )
        (folder / f"{stem}.yaml").write_text(text)
        out[arm] = f"{group}/{stem}"
    (root / "selection.json").write_text(
        json.dumps(
            {
                arm: {"values": c.values, "score": c.score, "tried": [[v, s] for v, s in c.tried]}
                for arm, c in choices.items()
            },
            indent=1,
        )
    )
    return out
