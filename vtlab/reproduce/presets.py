"""`python -m vtlab.reproduce --preset <name>`: a table's recipe for another machine, as Hydra overrides added to every
job of the run (a user's own overrides win on the same key), and the time its plan should take there, estimated from
FLOPs before anything starts.

    python -m vtlab.reproduce --tables real-case --preset gpu --pilot    # the pilot first (go / no-go on dev)
    python -m vtlab.reproduce --tables real-case --preset gpu            # then the table

The estimate is arithmetic, not a measurement: 6 × (encoder parameters + hidden × output rows) FLOPs per token
(forward + backward; the head projects every position), times the tokens of each fine-tuning and MLM step of each job
of the plan, at `utilisation` of the device's dense bf16 peak; `pessimistic` is the slowdown a small encoder at a
small batch should be expected to show against that floor (kernel launches, the vocabulary-wide max-pooling's memory
traffic). The jobs' fixed costs (start-up, head fit, APC probe, evaluation) are not counted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from hydra import compose, initialize_config_dir

from vtlab.core.overrides import key as override_key
from vtlab.core.paths import CONF_DIR
from vtlab.reproduce import paper_plan
from vtlab.reproduce.learning import gate_rows
from vtlab.reproduce.tables import grid_keys, main_rows, tables_of


@dataclass(frozen=True)
class Preset:
    """A recipe for one machine: the tables it is for, the overrides it adds, and what its estimate assumes."""

    what: str
    tables: tuple[str, ...]  # the tables it is written for (their `needs` run with them); others are refused
    overrides: tuple[str, ...]
    device: str
    peak_tflops: float  # the device's dense bf16 peak
    utilisation: float  # the assumed fraction of it: the optimistic floor
    pessimistic: float  # the expected slowdown against that floor


# One H100. 60 steps of 16 triplets (the CPU recipe) show the fine-tune 960 triplets, 11% of one pass over the 8,840
# training triplets, and the pilot ends 0.02-0.04 below BM25 on dev; 400 steps of 32 show 12,800 (1.45 passes, 13x),
# the longest fine-tune whose plan, a twice-extended rate grid included, stays under 30 minutes at the pessimistic
# factor. Batch 32 gives InfoNCE 63 negatives per query where 16 gave 31. The warm-ups keep the CPU recipe's fractions
# (a tenth of the steps for the rate, a third for FLOPS); sdpa is the faster attention on a GPU (eager was the CPU's).
PRESETS: dict[str, Preset] = {
    "gpu": Preset(
        what="the real-case table on one H100 (bf16-mixed), with a fine-tune meant to pass its learning gate",
        tables=("real-case",),
        overrides=(
            "trainer=gpu",
            "data.batch_size=32",
            "trainer.max_steps=400",
            "trainer.val_check_interval=400",
            "model.scheduler.num_warmup_steps=40",
            "regularizer.query.warmup_steps=133",
            "regularizer.doc.warmup_steps=133",
            "backbone.attn_implementation=sdpa",
        ),
        device="one H100 SXM",
        peak_tflops=989.0,
        utilisation=0.35,
        pessimistic=10.0,
    )
}


def with_extra(preset: Preset, extra: list[str]) -> list[str]:
    """The preset's overrides less those the user's `extra` sets again, then `extra` (e.g. `trainer=cpu` in a test)."""
    mine = {override_key(o) for o in extra}
    return [o for o in preset.overrides if override_key(o) not in mine] + list(extra)


def applies(preset: Preset, scale: str, overrides: list[str]) -> bool:
    """Whether a sweep's jobs are rows of the preset's tables (their selection, seeds, pilot, at their chosen settings
    or not), not of the references they are read against (BM25 trains nothing and has no fine-tuning to set)."""
    experiments = [e for o in overrides if o.startswith("experiment=") for e in o.split("=", 1)[1].split(",")]
    dirs = {f"{scale}/{t}" for t in preset.tables} | {f"{scale}/selected-{t}" for t in preset.tables}
    return bool(experiments) and all(e.rsplit("/", 1)[0] in dirs for e in experiments)


@dataclass(frozen=True)
class Estimate:
    jobs: int  # fine-tuning jobs (the plan's, each seed one)
    mlm: int  # MLM adaptations (cached per arm and length)
    flops: float
    seconds: float  # at the preset's utilisation of its peak
    pessimistic_seconds: float


def _cfg(experiment: str, overrides: list[str]) -> Any:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return compose("config", overrides=[f"experiment={experiment}", "paths.run_dir=/tmp/vtlab-plan", *overrides])


def job_flops(cfg: Any) -> tuple[float, float]:
    """(FLOPs of the fine-tune, FLOPs of its MLM adaptation) of one job: triplets padded to the query length
    paper_plan assumes and the documents' cut."""
    per_token = paper_plan.token_flops(cfg)
    data = cfg.data
    query = min(int(data.query_max_length), paper_plan.QUERY_TOKENS)
    tokens = int(data.batch_size) * (query + (1 + int(data.num_negatives)) * int(data.doc_max_length))
    mlm = cfg.mlm
    mlm_tokens = int(mlm.batch_size) * int(mlm.accumulate_grad_batches) * int(mlm.max_length)
    return int(cfg.trainer.max_steps) * tokens * per_token, int(mlm.steps) * mlm_tokens * per_token


def estimate(
    preset: Preset, scale: str, table: str, spec: dict[str, Any], seeds: int, extra: list[str], pilot: bool = False
) -> Estimate:
    """The FLOPs of a row table's plan under `preset`: each arm's MLM adaptation once (the rate rule's arm once per
    rate of its grid, `mlm_rate` in conf/tables), every arm at each rate of the selection grid, up to two more rates
    per arm where the grid is extended (counted: the worst case), then seeds 1.. of each arm (seed 0 is the
    selection's job). `pilot`: the gate arms' part of that, and the primary's arms at the pilot's seeds."""
    overrides = with_extra(preset, extra)
    rates = math.prod(len(values) for _, values in grid_keys(spec.get("grid")))
    extension = 2 if spec.get("extend") else 0
    conf = tables_of(scale)[table]
    rule = conf.get("mlm_rate") or {}
    pilot_seeds = int((conf.get("power") or {}).get("pilot_seeds", 1))
    rows = gate_rows(scale, table) if pilot else main_rows(scale, table)
    primary = {f"{scale}/{table}/{r}" for r in _primary_rows(scale, table)} if pilot else set()
    jobs = mlm = 0
    flops = 0.0
    for row in rows:
        tune, adapt = job_flops(_cfg(row, overrides))
        n = rates + extension + ((pilot_seeds - 1 if row in primary else 0) if pilot else seeds - 1)
        adaptations = len(rule.get("grid", [])) if row == f"{scale}/{table}/{rule.get('row')}" else 1
        jobs += n
        mlm += adaptations if adapt > 0 else 0
        flops += n * tune + adaptations * adapt
    seconds = flops / (preset.utilisation * preset.peak_tflops * 1e12)
    return Estimate(jobs, mlm, flops, seconds, seconds * preset.pessimistic)


def _primary_rows(scale: str, table: str) -> list[str]:
    """The row files of the table's declared primary contrast (report.primary of its first row)."""
    rows = tables_of(scale)[table]["rows"]
    primary = list(_cfg(main_rows(scale, table)[0], []).report.get("primary") or [])
    return [r for r in rows if _cfg(f"{scale}/{table}/{r}", []).name in primary]


def render(preset: Preset, name: str, table: str, est: Estimate, pilot: bool = False) -> str:
    """One line: what the plan costs on the preset's device, floor and pessimistic, and that it is an estimate."""
    what = f"the {table} pilot" if pilot else f"the {table} table"
    return (
        f"preset {name}: {what}: {est.jobs} fine-tuning jobs and {est.mlm} MLM adaptations, {est.flops / 1e15:.1f} "
        f"PFLOPs: about {est.seconds / 60:.1f} min on {preset.device} at {preset.utilisation:.0%} of its "
        f"{preset.peak_tflops:g} TFLOP/s bf16 peak, {est.pessimistic_seconds / 60:.0f} min at {preset.pessimistic:g}x "
        "that (a small encoder at a small batch); an estimate from FLOPs, not a measurement (start-up, head fit, APC "
        "and evaluation not counted)"
    )
