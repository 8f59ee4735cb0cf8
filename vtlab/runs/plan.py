"""The run's plan: what its admission reads of the config, read once at the door (`run_plan`) into plain values, so
that each admission rule (the run directory, a resume, its inputs, the hub, the data, reuse) takes values and never
the config. The Hydra callback that admits a single run before Hydra writes (vtlab.runs.guard) and the admission
itself (vtlab.stages.admission.admit) build it with the same function; `checked_plan` first checks the config's
values (vtlab.runs.checks, vtlab.runs.launch, vtlab.runs.reads), as the admission's first step."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from vtlab.core.hub import hub_models
from vtlab.runs.checks import check_config, values
from vtlab.runs.launch import check_launch_environment
from vtlab.runs.reads import warn_unread_overrides

TRAINING_STEP = "vtlab.stages.finetune.run"  # the stage that resumes from last.ckpt (named, not imported: layering)
# the keys that name the files a training run reads (vtlab.runs.inputs); a BEIR directory stands for its files
INPUT_KEYS = ("data.train.path", "data.train.scores_path", "data.dev_path", "eval.path", "eval.evaluations.*.path")
# wandb labels, where the run writes, reuse_runs itself, which contrasts a table reports, how vtlab.reproduce picks
# settings on dev before any job (an ablation's `selection.arm` names the main row whose choice it takes; no stage
# reads it): keys two runs may differ in and compute the same (vtlab.runs.reuse)
IGNORED = ("name", "group", "paths", "reuse_runs", "report", "selection")


@dataclass(frozen=True)
class RunPlan:
    """What the admission reads of a run's config.

    `config`: the whole config as plain values, unresolved (paths stay `${...}`), without Hydra's node: what a
    checkpoint records and what reuse compares. `steps`: the `_target_` of each stage step, in order. `inputs`:
    (full key, value) of each input file the config names (`INPUT_KEYS`). `hub_models`: (hub id, revision) → the
    first key naming it. `loggers`: the logger group's node. `evaluations`: (config key, node) of each evaluation (the
    eval, or each member of a suite)."""

    run_dir: Path
    config: dict[str, Any]
    steps: tuple[str, ...] = ()
    resume: Any = "auto"
    overwrite: Any = False
    resume_with_changes: bool = False
    inputs: tuple[tuple[str, Any], ...] = ()
    hub_models: dict[tuple[str, str | None], str] = field(default_factory=dict)
    evaluations: tuple[tuple[str, DictConfig], ...] = ()
    eval_path: Any = None
    dev_path: Any = None
    dev_split: str = "dev"
    vocab_corpus: Any = None
    loggers: Any = None
    reuse_runs: tuple[str, ...] = ()

    @property
    def trains(self) -> bool:
        """Whether the run's stages include fine-tuning, the one stage that resumes from a checkpoint."""
        return TRAINING_STEP in self.steps


def step_targets(cfg: DictConfig) -> tuple[str, ...]:
    """The `_target_` of each of the stage's steps, in order."""
    steps = OmegaConf.select(cfg, "stage.steps", default=None) or []
    return tuple(str(s.get("_target_")) for s in steps if isinstance(s, DictConfig))


def trains(cfg: DictConfig) -> bool:
    """RunPlan.trains of a config (the first line, the lifecycle's interrupted line)."""
    return TRAINING_STEP in step_targets(cfg)


def comparable(cfg: DictConfig | dict[str, Any], ignored: tuple[str, ...] = IGNORED) -> dict[str, Any]:
    """The config as a plain dict, unresolved (paths stay `${...}`), without the `ignored` keys."""
    data = OmegaConf.to_container(cfg, resolve=False) if isinstance(cfg, DictConfig) else dict(cfg)
    return {k: v for k, v in data.items() if k not in ignored and k != "hydra"}


def _evaluations(cfg: DictConfig) -> tuple[tuple[str, DictConfig], ...]:
    ev = cfg.get("eval")
    if not isinstance(ev, DictConfig):
        return ()
    members = ev.get("evaluations")
    if isinstance(members, DictConfig):
        return tuple(
            (f"eval.evaluations.{name}", node) for name, node in members.items() if isinstance(node, DictConfig)
        )
    return (("eval", ev),)


def run_plan(cfg: DictConfig, run_dir: Path | None = None) -> RunPlan:
    """The plan of the run `cfg` configures; `run_dir`: where it writes when paths.run_dir does not resolve yet (the
    Hydra callback, before Hydra sets its output directory)."""
    select = lambda key, default=None: OmegaConf.select(cfg, key, default=default)  # noqa: E731
    return RunPlan(
        run_dir=run_dir if run_dir is not None else Path(str(cfg.paths.run_dir)),
        config=comparable(cfg, ()),
        steps=step_targets(cfg),
        resume=cfg.get("resume", "auto"),
        overwrite=cfg.get("overwrite", False),
        resume_with_changes=bool(cfg.get("resume_with_changes", False)),
        inputs=tuple(named for key in INPUT_KEYS for named in values(cfg, key)),
        hub_models=hub_models(cfg),
        evaluations=_evaluations(cfg),
        eval_path=select("eval.path"),
        dev_path=select("data.dev_path"),
        dev_split=str(select("data.dev_split", "dev")),
        vocab_corpus=select("vocab.corpus.path"),
        loggers=cfg.get("logger"),
        reuse_runs=tuple(str(d) for d in cfg.get("reuse_runs") or []),
    )


def checked_plan(cfg: DictConfig) -> RunPlan:
    """The admission's first step, then the plan: each value of the wrong kind or range, each name or output path
    that would leave its root (vtlab.runs.checks), a GPU accelerator torch cannot use here and a SLURM job shape
    Lightning would refuse (vtlab.runs.launch); an override no stage reads is one warning (vtlab.runs.reads)."""
    check_config(cfg)
    check_launch_environment(cfg)
    warn_unread_overrides(cfg)
    return run_plan(cfg)
