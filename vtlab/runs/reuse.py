"""Reuse a finished run whose config equals this one's: a sweep's ablation row that repeats a main-table row (e.g.
`init=semantic-pmi` in testbed/ablation-init is testbed/main/bpe-vt) is run once, not twice.

A run with `reuse_runs=[DIR, ...]` looks in each DIR (a run directory or a sweep directory of job directories) for a
job whose status.json says done and whose recorded `.hydra/config.yaml` equals its own config apart from the keys in
vtlab.runs.plan.IGNORED (labels that do not change what is computed). The first match's results are copied into the
run directory, `reused_from.txt` names it, and no stage runs. Like the stage caches (transfer, MLM), it trusts that
the code has not changed since: use it within one reproduction (vtlab.reproduce passes the main table's sweep to the
ablations).

A training run whose config differs from a finished one's only in `eval` takes that run's training instead
(reuse_training): everything the training wrote (the saved model, APC report, training logs' results) is copied, its
evaluation is not, and the caller evaluates the copied model on this run's own eval — the testbed's selection job at
the chosen setting is the table's seed 0, trained once, scored on dev for the choice and on the test sets for the table.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from vtlab.core.records import load_record
from vtlab.runs.plan import IGNORED, RunPlan, comparable
from vtlab.runs.status import job_dirs, read_status
from vtlab.runs.tracking_id import ID_FILE

log = logging.getLogger("vtlab")

# What a reused run gets: its results and reports; not the logs, trackers (nor the wandb id: each directory is its own
# wandb run) or checkpoints of the original invocation.
NOT_COPIED = (".hydra", "status.json", "*.log", "wandb", ID_FILE, "checkpoints", "csv", "mlm", "reused_from.txt")
MARKER = "reused_from.txt"
EVALUATION = "eval"  # the config key a run may differ in and still take another's training; also its results folder
SAVED_MODEL = Path("model") / "config.json"  # what fine-tuning leaves in a run directory (vtlab.stages.finetune)


def _job_dirs(root: Path) -> list[Path]:
    """`root` itself when it is a run directory, else its sweep's job directories."""
    return [root] if (root / ".hydra" / "config.yaml").is_file() else job_dirs(root)


def _is_done(job: Path) -> bool:
    try:
        return (read_status(job) or {}).get("status") == "done"
    except (OSError, ValueError):
        return False


def find_equal_run(
    cfg: DictConfig | dict[str, Any],
    dirs: list[str | Path],
    exclude: Path | None = None,
    ignored: tuple[str, ...] = IGNORED,
    holding: Path | None = None,
) -> Path | None:
    """The first finished job under `dirs` whose recorded config equals `cfg` (a config, or a RunPlan's `config`) up to
    `ignored` and, with `holding`, that holds that file; or None."""
    want = comparable(cfg, ignored)
    for root in dirs:
        for job in _job_dirs(Path(root)):
            if exclude is not None and job.resolve() == exclude.resolve():
                continue
            if holding is not None and not (job / holding).is_file():
                continue
            if _is_done(job) and (recorded := _recorded_config(job)) is not None:
                if comparable(recorded, ignored) == want:
                    return job
    return None


def _recorded_config(job: Path) -> DictConfig | None:
    """The job's `.hydra/config.yaml`; None (and a warning naming it) when it is unreadable or no mapping: a job whose
    config cannot be compared is not reused."""
    path = job / ".hydra" / "config.yaml"
    try:
        cfg = load_record(path)
    except (OSError, ValueError, yaml.YAMLError, OmegaConfBaseException, RecursionError) as exc:
        log.warning("reuse: %s is unreadable (%s): that job is not reused", path, " ".join(str(exc).split())[:200])
        return None
    if not isinstance(cfg, DictConfig):
        log.warning("reuse: %s holds no mapping of config keys: that job is not reused", path)
        return None
    return cfg


def copy_results(src: Path, dst: Path, skip: tuple[str, ...] = ()) -> None:
    """src's results (less `skip`) into dst (which Hydra has created), and the marker naming src."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(*NOT_COPIED, *skip), dirs_exist_ok=True, symlinks=True)
    (dst / MARKER).write_text(f"{src.resolve()}\n")


def reuse(plan: RunPlan) -> Path | None:
    """If `plan.reuse_runs` holds an equal finished run, copy its results into `plan.run_dir`; returns its path."""
    if not plan.reuse_runs:
        return None
    src = find_equal_run(plan.config, list(plan.reuse_runs), exclude=plan.run_dir)
    if src is not None:
        copy_results(src, plan.run_dir)
        log.info(
            "reuse: the config equals the finished run %s (up to %s): its results copied, no stage run",
            src,
            ", ".join(IGNORED),
        )
    return src


def reuse_training(plan: RunPlan) -> Path | None:
    """If `plan.reuse_runs` holds a finished run that trained this run's model (its config equal but for `eval`, its
    model saved), copy what its training wrote, not its evaluation, into `plan.run_dir`; returns its path. The
    caller then evaluates the copied model (vtlab.stages.pipeline)."""
    if not plan.reuse_runs or not plan.trains:
        return None
    ignored = (*IGNORED, EVALUATION)
    src = find_equal_run(plan.config, list(plan.reuse_runs), exclude=plan.run_dir, ignored=ignored, holding=SAVED_MODEL)
    if src is not None:
        copy_results(src, plan.run_dir, skip=(EVALUATION,))
        log.info(
            "reuse: the training equals the finished run %s's (its eval differs): its model copied, evaluated here", src
        )
    return src
