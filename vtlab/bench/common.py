"""Shared bench plumbing: one measurement per fresh subprocess, peak RSS, timers, machine facts."""

from __future__ import annotations

import json
import os
import platform
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vtlab.runtime.cpu import isa_env, max_isa


def peak_rss_mb() -> float:
    """This process's peak resident set so far: VmHWM of its own address space.

    Not ru_maxrss: Linux carries ru_maxrss over execve, so a worker started by a big parent would report the
    parent's peak (the bench parent holds the 1M-doc synthetic collection while generating it)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def rss_mb() -> float:
    """Current resident set."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def cpu_s() -> float:
    """User + system CPU seconds of this process (all threads): less sensitive than wall time to other jobs."""
    t = os.times()
    return t.user + t.system


@dataclass
class Timer:
    wall_s: float = 0.0
    cpu_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


@contextmanager
def timed() -> Iterator[Timer]:
    t = Timer()
    w0, c0 = time.perf_counter(), cpu_s()
    try:
        yield t
    finally:
        t.wall_s, t.cpu_s = time.perf_counter() - w0, cpu_s() - c0


def set_threads(n: int, torch_threads: bool = True) -> None:
    """Same thread count for every tool: torch intra-op threads (unless the tool runs without torch, e.g. ONNX
    Runtime, which takes its own count) and the BLAS/OpenMP pools."""
    if torch_threads:
        import torch

        torch.set_num_threads(n)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(n)


def worker_env(threads: int) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        OMP_NUM_THREADS=str(threads),
        MKL_NUM_THREADS=str(threads),
        OPENBLAS_NUM_THREADS=str(threads),
        TOKENIZERS_PARALLELISM="false",
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        WANDB_MODE="disabled",
        TRANSFORMERS_VERBOSITY="error",
        PYTHONWARNINGS="ignore",
    )
    env.update(isa_env(max_isa()))  # $VTLAB_MAX_CPU_ISA: torch's libraries held to the same level as vtlab
    return env


def run_worker(module: str, args: list[str], out: Path, threads: int, timeout: float | None = None) -> dict[str, Any]:
    """Run `python -m module args --out out` in a fresh process and return the JSON it wrote.

    A fresh process per measurement makes peak RSS (ru_maxrss) belong to one tool; the worker's stderr passes through.
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", module, *args, "--out", str(out)]
    began = time.perf_counter()
    proc = subprocess.run(cmd, env=worker_env(threads), timeout=timeout, stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0 or not out.is_file():
        tail = "\n".join(proc.stdout.splitlines()[-20:])
        raise RuntimeError(f"{' '.join(cmd)} failed with exit code {proc.returncode}\n{tail}")
    result = json.loads(out.read_text())
    result["process_wall_s"] = round(time.perf_counter() - began, 2)
    return result


def write_result(path: str | Path, result: dict[str, Any]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    result.setdefault("peak_rss_mb", round(peak_rss_mb(), 1))
    path.write_text(json.dumps(result, indent=2, default=float) + "\n")


def machine() -> dict[str, Any]:
    """What the numbers were measured on, including how busy the machine was (other jobs skew wall times)."""
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "loadavg_1_5_15": [round(x, 2) for x in os.getloadavg()],
    }
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    # what the precisions run on: the CPU's vector, native-bf16 and native-int8 flags, and what precision=auto picks
    # here without a model (imported here: it loads torch, which the workers that run without it, ONNX Runtime's,
    # must not)
    from vtlab.runtime.precision import NATIVE_FLAGS, cpu_flags, native, resolve_precision

    flags = cpu_flags()
    info["max_cpu_isa"] = max_isa()  # set: the flags below are that level's, not the CPU's own (vtlab.runtime.cpu)
    wanted = {"avx2", "avx512f"}.union(*NATIVE_FLAGS.values())
    info.update({flag: flag in flags for flag in sorted(wanted)})
    info.update({f"{p}_native": native(p, flags) for p in NATIVE_FLAGS})
    info["precision_auto"] = resolve_precision("auto", "cpu")
    from vtlab.runtime.fused import in_use

    info["fused_pooling_kernels"] = in_use()  # per precision: amx / avx512 / avx2 / None (the tiled GEMM)
    try:
        import torch

        info["torch"] = torch.__version__
        info["gpu"] = torch.cuda.is_available()
    except ImportError:
        pass
    return info
