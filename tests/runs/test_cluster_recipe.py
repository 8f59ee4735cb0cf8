"""The cluster recipe is one command, right as written: docs/experiments.md and docs/paper-scale.md show the same SLURM
launch, it parses, and composed (the launcher as Hydra reads it for the whole sweep, before a swept experiment is
applied; each job as it runs) its SLURM tasks per node equal its GPUs per node equal every job's trainer.devices, its
nodes equal trainer.num_nodes, and its time limit covers the plan's estimate of the longest job. No cluster needed."""

import re

from helpers import ROOT, compose_config, hydra_conf
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import RunMode

from vtlab.reproduce import paper_plan

DOCS = ("docs/experiments.md", "docs/paper-scale.md")


def _documented() -> dict[str, str]:
    out = {}
    for page in DOCS:
        lines = [ln.strip().strip("`") for ln in (ROOT / page).read_text().splitlines() if "hydra/launcher=slurm" in ln]
        commands = [m.group(0) for ln in lines for m in [re.search(r"python -m vtlab -m [^`]*", ln)] if m]
        assert len(commands) == 1, (page, commands)
        out[page] = commands[0].strip()
    return out


def test_both_pages_show_the_same_command_and_it_parses():
    commands = _documented()
    assert len(set(commands.values())) == 1, commands
    overrides = next(iter(commands.values())).split()[4:]
    parsed = OverridesParser.create().parse_overrides(overrides)
    assert {o.key_or_group for o in parsed} >= {"experiment", "hydra/launcher", "hydra.launcher.partition"}


def test_the_launcher_and_every_job_agree_on_processes_gpus_nodes_and_time():
    overrides = next(iter(_documented().values())).split()[4:]
    parsed = OverridesParser.create().parse_overrides(overrides)
    sweep = next(o for o in parsed if o.key_or_group == "experiment")
    experiments = list(sweep.sweep_string_iterator())
    rest = [o.input_line for o in parsed if o is not sweep]
    with hydra_conf():  # a multirun's load, not a compose
        top = GlobalHydra.instance().config_loader().load_configuration("config", overrides, run_mode=RunMode.MULTIRUN)
    launcher = top.hydra.launcher
    jobs = [compose_config([f"experiment={e}", *rest]) for e in experiments]
    assert launcher._target_.endswith("SlurmLauncher")
    assert launcher.tasks_per_node == launcher.gpus_per_node  # Lightning's DDP under SLURM: one process per GPU
    for experiment, job in zip(experiments, jobs):
        assert job.trainer.devices == launcher.gpus_per_node, experiment
        assert job.trainer.num_nodes == launcher.nodes, experiment
    plan = paper_plan.plan({"main": [f"experiment={','.join(experiments)}", "seed=0"]})
    longest = max(j.gpu_hours / j.gpus for j in plan)  # wall-clock hours of one job on its GPUs
    assert 0 < longest <= launcher.timeout_min / 60, (longest, launcher.timeout_min)
