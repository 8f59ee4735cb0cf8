"""The launch, refused before the run where Lightning or torch would refuse it inside: vtlab.runs.precheck asks
`check_launch` (the command line's launcher and the torch build, without importing torch), vtlab.stages.admission
asks `check_launch_environment` (the process's GPUs and its SLURM allocation, with torch and Lightning)."""

from __future__ import annotations

import ast
import importlib.util
import os
import sys
import warnings
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from vtlab.core.errors import ConfigError
from vtlab.runs.checks import device_count

CUDA_INDEX = "https://download.pytorch.org/whl/cu128"  # the CUDA 12.8 wheels of the pinned torch (pyproject.toml)


def needs_cuda(accelerator: Any) -> bool:
    """Whether trainer.accelerator asks for CUDA ("gpu" is Apple's MPS on macOS)."""
    return accelerator == "cuda" or (accelerator == "gpu" and sys.platform != "darwin")


def torch_build() -> dict[str, Any] | None:
    """The installed torch's `version.py` values (__version__, cuda, hip), read as text: no import of torch; None
    when torch is not installed."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    version_file = Path(next(iter(spec.submodule_search_locations))) / "version.py"
    if not version_file.is_file():
        return None
    found: dict[str, Any] = {}
    for node in ast.parse(version_file.read_text(encoding="utf-8")).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if isinstance(target, ast.Name) and isinstance(getattr(node, "value", None), ast.Constant):
            found[target.id] = node.value.value
    return found


def cpu_build_line(accelerator: Any, version: str) -> str:
    """The refusal of a GPU accelerator under a torch built without CUDA, with the install that fixes it."""
    base = version.split("+", 1)[0]
    return (
        f"trainer.accelerator={accelerator!r}, but the installed torch {version} is the CPU build (no CUDA): install "
        f"the CUDA wheel into this environment, pip install torch=={base}+cu128 --index-url {CUDA_INDEX}, or run "
        "with trainer=cpu"
    )


def check_launch(cfg: DictConfig) -> None:
    """Before torch loads: a SLURM launcher (hydra/launcher=slurm) whose tasks or nodes per job differ from the job's
    trainer.devices or trainer.num_nodes (Lightning's DDP runs one task per device and refuses the job on its node);
    a GPU accelerator with a CPU build of torch."""
    trainer = OmegaConf.select(cfg, "trainer")
    if not isinstance(trainer, DictConfig):
        return
    launcher = OmegaConf.select(cfg, "hydra.launcher")
    devices, nodes = device_count(trainer.get("devices")), trainer.get("num_nodes", 1)
    if isinstance(launcher, DictConfig) and str(launcher.get("_target_", "")).endswith("SlurmLauncher"):
        setting = "++paper.gpus" if OmegaConf.select(cfg, "paper.gpus") is not None else "trainer.devices"
        tasks, slurm_nodes = launcher.get("tasks_per_node"), launcher.get("nodes")
        if devices is not None and tasks != devices:
            raise ConfigError(
                f"hydra.launcher.tasks_per_node={tasks}, but trainer.devices={devices}: Lightning's DDP under SLURM "
                f"needs one task per device and would refuse the job on its node; set hydra.launcher.gpus_per_node="
                f"{devices} (tasks_per_node follows it), or {setting}={tasks}",
                key="hydra.launcher.tasks_per_node",
            )
        if slurm_nodes != nodes:
            raise ConfigError(
                f"hydra.launcher.nodes={slurm_nodes}, but trainer.num_nodes={nodes}: Lightning under SLURM refuses a "
                f"job on another number of nodes; set trainer.num_nodes={slurm_nodes} or hydra.launcher.nodes={nodes}",
                key="hydra.launcher.nodes",
            )
    build = torch_build()
    if needs_cuda(trainer.get("accelerator")) and build is not None and not (build.get("cuda") or build.get("hip")):
        raise ConfigError(cpu_build_line(trainer.accelerator, str(build.get("__version__"))), key="trainer.accelerator")


def check_launch_environment(cfg: DictConfig) -> None:
    """In the run's process (torch loaded): a GPU accelerator with a CPU build of torch or with no visible GPU, and a
    SLURM allocation (as Lightning detects one) whose tasks differ from trainer.devices × trainer.num_nodes."""
    trainer = OmegaConf.select(cfg, "trainer")
    if not isinstance(trainer, DictConfig):
        return
    if needs_cuda(trainer.get("accelerator")):
        import torch

        if not (torch.version.cuda or torch.version.hip):
            raise ConfigError(cpu_build_line(trainer.accelerator, torch.__version__), key="trainer.accelerator")
        if torch.cuda.device_count() == 0:
            raise ConfigError(
                f"trainer.accelerator={trainer.accelerator!r}, but torch {torch.__version__} (CUDA "
                f"{torch.version.cuda or torch.version.hip}) sees no GPU (CUDA_VISIBLE_DEVICES="
                f"{os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')}): run on a GPU node (under SLURM, with GPUs "
                "asked for: #SBATCH --gpus-per-node=N) or with trainer=cpu",
                key="trainer.accelerator",
            )
    check_slurm_tasks(cfg, device_count(trainer.get("devices")), trainer.get("num_nodes", 1))


def check_slurm_tasks(cfg: DictConfig, devices: int | None, nodes: Any) -> None:
    """Inside a SLURM job step Lightning takes its processes from SLURM (one task per device): the allocation's tasks
    per node and nodes against trainer.devices and trainer.num_nodes, decided by Lightning's own SLURMEnvironment
    (detection, an interactive `srun --pty bash` excluded; its validate_settings), and the tasks in all when SLURM
    states no count per node (the processes would wait for each other forever)."""
    if (
        "SLURM_NTASKS" not in os.environ
        or devices is None
        or not (isinstance(nodes, int) and not isinstance(nodes, bool))
    ):
        return  # Lightning detects SLURM only where SLURM_NTASKS is set: nothing to import otherwise
    from lightning_fabric.plugins.environments import SLURMEnvironment, TorchElasticEnvironment

    with warnings.catch_warnings():  # Lightning's "srun is available but not used" hint: Lightning gives it later
        warnings.simplefilter("ignore")
        if TorchElasticEnvironment.detect() or not SLURMEnvironment.detect():
            return  # torchrun under SLURM, or an interactive allocation: Lightning starts the processes itself
        try:
            SLURMEnvironment(auto_requeue=False).validate_settings(num_devices=devices, num_nodes=nodes)
            refused = None
        except (RuntimeError, ValueError) as err:
            refused = str(err).split(". HINT")[0].split(" HINT")[0]
    env = {k: os.environ.get(k) for k in ("SLURM_NTASKS", "SLURM_NTASKS_PER_NODE", "SLURM_NNODES")}
    if refused is None and env["SLURM_NTASKS_PER_NODE"] is None and int(env["SLURM_NTASKS"] or 1) != devices * nodes:
        refused = f"{env['SLURM_NTASKS']} task(s) in all for {devices * nodes} devices"
    if refused is None:
        return
    shown = " ".join(f"{k}={v}" for k, v in env.items() if v is not None)
    setting = "++paper.gpus" if OmegaConf.select(cfg, "paper.gpus") is not None else "trainer.devices"
    raise ConfigError(
        f"SLURM runs this job as {shown}, but trainer.devices={devices} × trainer.num_nodes={nodes} ({refused}): "
        f"Lightning's DDP under SLURM needs one task per device; submit with #SBATCH --nodes={nodes} "
        f"--ntasks-per-node={devices} and start it with srun (hydra/launcher=slurm: hydra.launcher.tasks_per_node="
        f"{devices}), or set {setting} to the allocation's tasks per node",
        key="trainer.devices",
    )
