"""A launch torch or Lightning would refuse inside the run is refused before it, in one line naming the fix: a GPU
accelerator with the CPU build of torch (the precheck reads torch's version.py as text; the admission asks the loaded
torch, and also refuses a CUDA build that sees no GPU), a SLURM launcher whose tasks per node differ from the job's
devices (the precheck), and a SLURM job step whose tasks Lightning's SLURMEnvironment rejects (the admission)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from helpers import child_env, compose_config, one_error_line, run_vtlab

import vtlab.runs.launch as launch
from vtlab.core.errors import ConfigError
from vtlab.core.paths import CONF_DIR
from vtlab.runs.launch import check_launch_environment, torch_build
from vtlab.runs.precheck import checked
from vtlab.stages.admission import admit

CPU_BUILD = {"__version__": "2.13.0+cpu", "cuda": None, "hip": None}
CUDA_BUILD = {"__version__": "2.13.0+cu128", "cuda": "12.8", "hip": None}
INSTALL = "pip install torch==2.13.0+cu128 --index-url https://download.pytorch.org/whl/cu128"
SLURM_SWEEP = ["-m", "experiment=paper/main/modernbert-vt,paper/main/modernbert-native", "hydra/launcher=slurm"]


# ---- the torch build ------------------------------------------------------------------------------------------------


def test_the_build_is_read_from_torchs_version_file_as_the_loaded_torch_reports_it() -> None:
    build = torch_build()
    assert build is not None
    assert (build["__version__"], build["cuda"], build["hip"]) == (
        torch.__version__,
        torch.version.cuda,
        torch.version.hip,
    )


@pytest.mark.parametrize("accelerator", ["gpu", "cuda"])
def test_a_gpu_accelerator_with_the_cpu_build_is_one_line_at_the_precheck(monkeypatch, accelerator: str) -> None:
    monkeypatch.setattr(launch, "torch_build", lambda: CPU_BUILD)
    problem, composed = checked(["trainer=gpu", f"trainer.accelerator={accelerator}"], CONF_DIR)
    assert composed is None and problem is not None and "\n" not in problem
    assert problem.startswith(f"trainer.accelerator='{accelerator}'") and "CPU build" in problem and INSTALL in problem
    monkeypatch.setattr(launch, "torch_build", lambda: CUDA_BUILD)
    assert checked(["trainer=gpu"], CONF_DIR)[0] is None
    monkeypatch.setattr(launch, "torch_build", lambda: CPU_BUILD)
    assert checked(["trainer=cpu"], CONF_DIR)[0] is None


def _planted_torch(tmp_path: Path, cuda: str | None) -> tuple[dict[str, str], Path]:
    """A torch package whose import leaves a marker and fails, with a version.py of the given CUDA build."""
    fake, marker = tmp_path / "fake", tmp_path / "imported"
    for name in ("torch", "pytorch_lightning", "transformers"):
        (fake / name).mkdir(parents=True)
        (fake / name / "__init__.py").write_text(f"open({str(marker)!r}, 'a').write({name!r})\nraise ImportError\n")
    version = "2.13.0+cpu" if cuda is None else "2.13.0+cu128"
    (fake / "torch" / "version.py").write_text(
        f"from typing import Optional\n__version__ = {version!r}\ncuda: Optional[str] = {cuda!r}\nhip = None\n"
    )
    return child_env(fake), marker


@pytest.mark.cli
def test_the_cpu_build_exits_2_before_torch_is_imported_and_writes_nothing(tmp_path: Path) -> None:
    env, marker = _planted_torch(tmp_path, cuda=None)
    proc = run_vtlab("trainer=gpu", cwd=tmp_path, env=env)
    assert proc.returncode == 2, proc.stderr[-2000:]
    one_error_line(proc.stderr, ["trainer.accelerator='gpu'", "2.13.0+cpu", INSTALL])
    assert not marker.exists() and not (tmp_path / "outputs").exists()
    env, marker = _planted_torch(tmp_path / "cuda", cuda="12.8")  # the same line passes with a CUDA build
    proc = run_vtlab("trainer=gpu", "--cfg", "job", cwd=tmp_path, env=env)
    assert proc.returncode == 0 and "accelerator: gpu" in proc.stdout, proc.stderr[-2000:]
    assert not marker.exists()


def test_the_admission_refuses_the_cpu_build_and_a_cuda_build_without_a_gpu(tmp_path: Path, monkeypatch) -> None:
    cfg = compose_config(["trainer=gpu", f"paths.run_dir={tmp_path / 'run'}"])
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(torch.version, "hip", None)
    with pytest.raises(ConfigError, match="CPU build") as err, admit(cfg):
        pass
    assert INSTALL in str(err.value) and not (tmp_path / "run").exists()
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(ConfigError, match=r"CUDA 12.8\) sees no GPU \(CUDA_VISIBLE_DEVICES=\)") as err, admit(cfg):
        pass
    assert "trainer=cpu" in str(err.value) and not (tmp_path / "run").exists()
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    check_launch_environment(cfg)


# ---- SLURM: the launcher (precheck) ---------------------------------------------------------------------------------


def test_a_slurm_launcher_with_other_tasks_than_devices_is_one_line(monkeypatch) -> None:
    monkeypatch.setattr(launch, "torch_build", lambda: CUDA_BUILD)
    problem, _ = checked([*SLURM_SWEEP, "hydra.launcher.gpus_per_node=4"], CONF_DIR)
    assert problem is not None and problem.startswith("hydra.launcher.tasks_per_node=4, but trainer.devices=8")
    assert "hydra.launcher.gpus_per_node=8" in problem and "++paper.gpus=4" in problem
    problem, _ = checked([*SLURM_SWEEP, "hydra.launcher.nodes=2"], CONF_DIR)
    assert problem is not None and problem.startswith("hydra.launcher.nodes=2, but trainer.num_nodes=1")
    problem, first = checked([*SLURM_SWEEP, "hydra.launcher.gpus_per_node=4", "++paper.gpus=4"], CONF_DIR)
    assert problem is None and first is not None and first.trainer.devices == 4 and first.data.batch_size == 32


# ---- SLURM: the job step (admission, Lightning's SLURMEnvironment) -------------------------------------------------

ELASTIC = ("RANK", "GROUP_RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "TORCHELASTIC_RUN_ID")


def _slurm(monkeypatch, job_name: str = "vtlab", **variables: str) -> None:
    for name in [k for k in os.environ if k.startswith("SLURM_")] + list(ELASTIC):
        monkeypatch.delenv(name, raising=False)
    base = {"SLURM_JOB_NAME": job_name, "SLURM_JOB_ID": "1234", "SLURM_PROCID": "0", "SLURM_LOCALID": "0"}
    for name, value in {**base, "SLURM_NODEID": "0", **variables}.items():
        monkeypatch.setenv(name, value)


def _eight_devices(tmp_path: Path):
    return compose_config(
        ["experiment=paper/main/modernbert-vt", "trainer.accelerator=cpu", f"paths.run_dir={tmp_path}"]
    )


def test_one_task_for_eight_devices_is_refused_naming_the_sbatch_and_launcher_settings(tmp_path, monkeypatch) -> None:
    _slurm(monkeypatch, SLURM_NTASKS="1", SLURM_NTASKS_PER_NODE="1", SLURM_NNODES="1")
    cfg = _eight_devices(tmp_path / "run")
    with pytest.raises(ConfigError) as err, admit(cfg):
        pass
    line = str(err.value)
    assert "\n" not in line and "SLURM_NTASKS_PER_NODE=1" in line and "trainer.devices=8" in line
    assert "#SBATCH --nodes=1 --ntasks-per-node=8" in line and "hydra.launcher.tasks_per_node=8" in line
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "variables",
    [
        {"SLURM_NTASKS": "8"},  # Lightning's own refusal: --ntasks without --ntasks-per-node
        {"SLURM_NTASKS": "1"},  # one task in all for eight devices: the processes would wait forever
        {"SLURM_NTASKS": "16", "SLURM_NTASKS_PER_NODE": "8", "SLURM_NNODES": "2"},  # two nodes, num_nodes 1
    ],
)
def test_other_shapes_lightning_rejects_are_refused(tmp_path, monkeypatch, variables: dict[str, str]) -> None:
    _slurm(monkeypatch, **variables)
    with pytest.raises(ConfigError, match=r"^SLURM runs this job as SLURM_NTASKS="):
        check_launch_environment(_eight_devices(tmp_path))


@pytest.mark.parametrize(
    "job_name,variables",
    [
        ("vtlab", {"SLURM_NTASKS": "8", "SLURM_NTASKS_PER_NODE": "8", "SLURM_NNODES": "1"}),  # one task per GPU
        ("bash", {"SLURM_NTASKS": "1", "SLURM_NTASKS_PER_NODE": "1", "SLURM_NNODES": "1"}),  # srun --pty bash
        ("interactive", {"SLURM_NTASKS": "1", "SLURM_NTASKS_PER_NODE": "1"}),
    ],
)
def test_shapes_lightning_accepts_pass(tmp_path, monkeypatch, job_name: str, variables: dict[str, str]) -> None:
    _slurm(monkeypatch, job_name, **variables)
    check_launch_environment(_eight_devices(tmp_path))


def test_outside_slurm_nothing_is_checked(tmp_path, monkeypatch) -> None:
    _slurm(monkeypatch)
    monkeypatch.delenv("SLURM_JOB_NAME")
    check_launch_environment(_eight_devices(tmp_path))


@pytest.mark.cli
def test_a_plain_job_step_with_too_few_tasks_exits_2_in_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in child_env().items() if not k.startswith("SLURM_") and k not in ELASTIC}
    env.update(SLURM_JOB_NAME="vtlab", SLURM_JOB_ID="1", SLURM_NTASKS="1", SLURM_NTASKS_PER_NODE="1", SLURM_NNODES="1")
    env.update(SLURM_PROCID="0", SLURM_LOCALID="0", SLURM_NODEID="0")
    run = ["stage=evaluate", "trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2", "logger=none"]
    proc = run_vtlab(*run, cwd=tmp_path, env=env)
    assert proc.returncode == 2, proc.stderr[-2000:]
    one_error_line(proc.stderr, ["SLURM_NTASKS_PER_NODE=1", "trainer.devices=2", "--ntasks-per-node=2"])
