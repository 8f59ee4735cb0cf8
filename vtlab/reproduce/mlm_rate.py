"""The MLM adaptation's rate, chosen by a rule that sees no retrieval number (`mlm_rate` in conf/tables/<scale>.yaml):
one arm's adaptation (`row`, e.g. e5-vt: the arm with the most new rows to adapt) is trained at each rate of `grid`
(`stage=mlm`, the table's recipe, seed 0) and the rate whose held-out masked-LM loss after the steps is lowest
(vtlab/models/mlm_probe.py: the same held-out passages for every arm) is every arm's rate. The chosen arm's entry at
that rate is the cached adaptation its jobs load; the others train theirs at the same rate."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vtlab.core import overrides
from vtlab.core.errors import VtlabError
from vtlab.core.json_files import read_json
from vtlab.report.discovery import State, collect_jobs, override_key
from vtlab.reproduce.tables import tables_of

KEY = "mlm.lr"
DONE = "vtlab_mlm.json"  # vtlab.models.mlm's record in an adaptation's directory

Run = Callable[[list[str], Path], None]


def rate_dir(out: Path, table: str) -> Path:
    return out / f"mlm-rate-{table}"


def spec_of(scale: str, table: str) -> dict[str, Any] | None:
    return tables_of(scale)[table].get("mlm_rate")


def held_out_loss(job_dir: Path) -> float | None:
    """The held-out masked-LM loss after the steps of a `stage=mlm` job (its mlm/model link's record), or None."""
    record = job_dir / "mlm" / "model" / DONE
    if not record.is_file():
        return None
    held = read_json(record, dict, "an MLM adaptation's record").get("held_out") or {}
    loss = (held.get("after") or {}).get("loss")
    return float(loss) if isinstance(loss, (int, float)) and math.isfinite(loss) else None


def losses(sweep: Path) -> dict[float, float | None]:
    """rate → held-out loss after the steps, for every job of the rate sweep (None: failed or not probed)."""
    jobs, _ = collect_jobs(sweep)
    out: dict[float, float | None] = {}
    for job in jobs:
        pairs = {override_key(o): o for o in job.overrides if "=" in o}
        if KEY not in pairs:
            continue
        rate = float(overrides.value(pairs[KEY]))
        ok = job.state in (State.DONE, State.NO_METRICS) and job.path is not None  # stage=mlm evaluates nothing
        out[rate] = held_out_loss(job.path) if ok else None
    return out


def pick(scores: dict[float, float | None], sweep: Path) -> float:
    """The rate with the lowest held-out loss; an error naming the sweep when one rate has none."""
    missing = sorted(r for r, v in scores.items() if v is None)
    if missing or not scores:
        raise VtlabError(
            f"mlm rate rule: no held-out MLM loss for {KEY}={missing or 'any rate'} in {sweep} "
            "(the stage=mlm job failed, or its recipe has no mlm.held_out)"
        )
    return min(scores, key=lambda r: (scores[r], r))


def choose(scale: str, table: str, seed: int, out: Path, run: Run, dry_run: bool = False) -> list[str]:
    """Run the rule for a table with `mlm_rate` (none: []); returns the override every arm's jobs then take
    (`mlm.lr=<chosen>`), and writes the rule's numbers to <out>/mlm-rate-<table>.json."""
    spec = spec_of(scale, table)
    if not spec:
        return []
    sweep = rate_dir(out, table)
    grid = [float(v) for v in spec["grid"]]
    row = f"{scale}/{table}/{spec['row']}"
    run([f"{KEY}={','.join(map(str, grid))}", "stage=mlm", f"experiment={row}", f"seed={seed}"], sweep)
    if dry_run:
        return [f"{KEY}=<chosen>"]
    scores = losses(sweep)
    chosen = pick(scores, sweep)
    edge = chosen in (min(grid), max(grid)) and len(grid) > 1
    tried = ", ".join(f"{r:g} {v:.4f}" for r, v in sorted(scores.items()))
    print(
        f"mlm rate for every arm of {table}: {chosen:g} (held-out masked-LM loss of {spec['row']} after the steps: "
        f"{tried}{'; at the edge of the grid' if edge else ''})",
        flush=True,
    )
    record = {"row": spec["row"], "grid": grid, "losses": {str(k): v for k, v in scores.items()}, "chosen": chosen}
    (out / f"mlm-rate-{table}.json").write_text(json.dumps({**record, "at_edge": edge}, indent=1))
    return [f"{KEY}={chosen}"]
