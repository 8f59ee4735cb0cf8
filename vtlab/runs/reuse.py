"""Reuse a finished run whose config equals this one's: a sweep's ablation row that repeats a main-table row (e.g.
`init=semantic-pmi` in testbed/ablation-init is testbed/main/bpe-vt) is run once, not twice.

A run with `reuse_runs=[DIR, ...]` looks in each DIR (a run directory or a sweep directory of job directories) for a
job whose status.json says done and whose recorded `.hydra/config.yaml` equals its own config apart from the keys in
IGNORED (labels that do not change what is computed). The first match's results are copied into the run directory,
`reused_from.txt` names it, and no stage runs. Like the stage caches (transfer, MLM), it trusts that the code has not
changed since: use it within one reproduction (vtlab.reproduce passes the main table's sweep to the ablations).
"""
from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from vtlab.runs.status import job_dirs, read_status


log = logging.getLogger("vtlab")

IGNORED = ("name", "group", "paths", "reuse_runs", "report", "selection")  # wandb labels, where the run writes,
# this option itself, which contrasts a table reports, how vtlab.reproduce picks settings on dev before any job (an
# ablation's `selection.arm` names the main row whose choice it takes; no stage reads it)
# What a reused run gets: its results and reports; not the logs, trackers or checkpoints of the original invocation.
NOT_COPIED = (".hydra", "status.json", "*.log", "wandb", "checkpoints", "csv", "mlm", "reused_from.txt")
MARKER = "reused_from.txt"


def comparable(cfg: DictConfig | dict[str, Any]) -> dict[str, Any]:
    """The config as a plain dict, unresolved (paths stay `${...}`), without the IGNORED keys."""
    data = OmegaConf.to_container(cfg, resolve=False) if isinstance(cfg, DictConfig) else dict(cfg)
    return {k: v for k, v in data.items() if k not in IGNORED and k != "hydra"}


def _job_dirs(root: Path) -> list[Path]:
    """`root` itself when it is a run directory, else its sweep's job directories."""
    return [root] if (root / ".hydra" / "config.yaml").is_file() else job_dirs(root)


def _is_done(job: Path) -> bool:
    try:
        return (read_status(job) or {}).get("status") == "done"
    except (OSError, ValueError):
        return False


def find_equal_run(cfg: DictConfig, dirs: list[str | Path], exclude: Path | None = None) -> Path | None:
    """The first finished job under `dirs` whose recorded config equals `cfg` (up to IGNORED), or None."""
    want = comparable(cfg)
    for root in dirs:
        for job in _job_dirs(Path(root)):
            if exclude is not None and job.resolve() == exclude.resolve():
                continue
            if _is_done(job) and comparable(OmegaConf.load(job / ".hydra" / "config.yaml")) == want:
                return job
    return None


def copy_results(src: Path, dst: Path) -> None:
    """src's results into dst (which Hydra has created), and the marker naming src."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(*NOT_COPIED), dirs_exist_ok=True, symlinks=True)
    (dst / MARKER).write_text(f"{src.resolve()}\n")


def reuse(cfg: DictConfig) -> Path | None:
    """If `cfg.reuse_runs` holds an equal finished run, copy its results into `cfg.paths.run_dir`; returns its path."""
    dirs = list(cfg.get("reuse_runs") or [])
    if not dirs:
        return None
    run_dir = Path(str(cfg.paths.run_dir))
    src = find_equal_run(cfg, dirs, exclude=run_dir)
    if src is not None:
        copy_results(src, run_dir)
        log.info("reuse: the config equals the finished run %s (up to %s): its results copied, no stage run",
                 src, ", ".join(IGNORED))
    return src
