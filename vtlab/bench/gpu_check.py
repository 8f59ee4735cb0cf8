"""`make gpu-check`: the paper's multi-process and accelerator paths, each step asserting, in one short script.

    python -m vtlab.bench.gpu_check                 # on a GPU machine: every step (one GPU; the NCCL steps with two)
    python -m vtlab.bench.gpu_check --cpu           # `make gpu-check-cpu`: what runs on CPU (2 gloo processes)
    python -m vtlab.bench.gpu_check --only head,sigterm

Each step records to outputs/bench/gpu_check.json (rewritten after every step, so a killed check keeps what it
measured) as passed, failed (with why) or skipped (with why); any failed step makes the exit code 1. The steps:

- environment: the torch build (CUDA or CPU), the devices, bf16, NCCL (GPU mode: all required);
- head: the pooling's block path against the dense float64 reference on the device (vtlab.runtime.pooling_check);
- cached_loss: the cached loss against plain autograd with dropout on, fp32 and bf16 (vtlab.bench.cached_check);
- cached_loss_ddp (two processes: gloo, or NCCL on two GPUs): every rank's cached gradient through
  DistributedDataParallel equals the whole batch's;
- paper_step (GPU): the paper's fine-tune step at ModernBERT-base shape with and without the cached loss: finite
  losses, step time, peak memory, the head's share of the step (vtlab.bench.gpu_smoke);
- quickstart (GPU): `python -m vtlab trainer=gpu` trained and evaluated, the evaluation encoded on CUDA, nDCG@10
  above BM25's on the same collection;
- sigterm: a fine-tune on every process, SIGTERM to every rank at step 3: every process exits within a minute, one
  last.ckpt, status interrupted; the printed command resumes it on the same processes to a finished run;
- sigterm_one_rank (two processes): the same with SIGTERM to the last rank only;
- mlm_all: `stage=mlm` on every process from a cold cache, then `stage=all` through VT (tiny ModernBERT →
  bert-uncased) reading that adaptation, APC, fine-tune and evaluation on every process;
- encode (two processes): a DDP `stage=encode` equal, bit for bit, to the one-process index.

On the CPU (`--cpu`) the processes are two gloo processes and the shapes tiny; the steps that need a GPU say so.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
import torch.distributed as dist

from vtlab.bench import cached_check, gpu_smoke
from vtlab.bench.common import machine, write_result
from vtlab.bench.tiny_runs import TINY_FINETUNE
from vtlab.core.paths import CONF_DIR
from vtlab.runtime import pooling_check

GPU_ONLY = "needs a CUDA GPU"
TWO_GPUS = "needs two CUDA GPUs"
STEP_TIMEOUT_S = 600
EXIT_WITHIN_S = 60
_ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "WANDB_MODE": "offline", "TOKENIZERS_PARALLELISM": "false"}
TINY_EVAL = ["+eval.collection.max_queries=20", "+eval.collection.max_docs=60"]


class Skipped(Exception):
    """A step this machine cannot run, and why."""


@dataclass(frozen=True)
class Machine:
    """Where the check runs: the device type, how many processes a multi-process step uses, and a scratch folder."""

    cuda: bool
    gpus: int
    tmp: Path

    @property
    def device(self) -> str:
        return "cuda" if self.cuda else "cpu"

    @property
    def processes(self) -> int:
        return 2 if not self.cuda else min(2, self.gpus)

    def trainer(self, processes: int | None = None) -> list[str]:
        n = self.processes if processes is None else processes
        accelerator = "gpu" if self.cuda else "cpu"
        if n == 1:
            return ["trainer=gpu"] if self.cuda else ["trainer.accelerator=cpu", "trainer.devices=1"]
        return ["trainer=ddp", f"trainer.accelerator={accelerator}", f"trainer.devices={n}"]

    def need_two(self) -> None:
        if self.processes < 2:
            raise Skipped(TWO_GPUS)

    def need_gpu(self) -> None:
        if not self.cuda:
            raise Skipped(GPU_ONLY)


# ---- running vtlab ---------------------------------------------------------------------------------------------------
def start(args: list[str], log: Path) -> subprocess.Popen:
    """`python -m vtlab args` in the repository, offline, its output into `log`."""
    with open(log, "a") as f:
        return subprocess.Popen(
            [sys.executable, "-m", "vtlab", *args],
            cwd=CONF_DIR.parent,
            env={**os.environ, **_ENV},
            stdout=f,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def vtlab(args: list[str], log: Path, timeout: float = STEP_TIMEOUT_S) -> None:
    proc = start(args, log)
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError(f"`python -m vtlab {shlex.join(args)}` ran past {timeout:.0f} s (log: {log})") from None
    assert rc == 0, f"`python -m vtlab {shlex.join(args)}` exited {rc}: {tail(log)}"


def tail(log: Path, n: int = 1500) -> str:
    return log.read_text(errors="replace")[-n:] if log.is_file() else "(no log)"


def status(run_dir: Path) -> str:
    return json.loads((run_dir / "status.json").read_text())["status"]


def ranks_of(proc: subprocess.Popen) -> list[int]:
    """The run's processes: rank 0 (the command) and the later ranks Lightning's launcher started as its children."""
    children = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
    return [proc.pid, *map(int, children)]


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return "zombie" not in f.read().lower()
    except FileNotFoundError:
        return False


def interrupt(m: Machine, name: str, to_all: bool) -> dict[str, Any]:
    """A fine-tune on every process, SIGTERM at step 3 to every rank (`to_all`) or the last one: how it ended."""
    steps = 12 if not m.cuda else 3000  # a GPU step of SPLADE-tiny takes milliseconds
    run_dir, log = m.tmp / name, m.tmp / f"{name}.log"
    args = [
        *TINY_FINETUNE,
        "stage=finetune",
        f"trainer.max_steps={steps}",
        f"trainer.val_check_interval={steps}",
        "callbacks.progress_bar.every=1",
        "callbacks.last_checkpoint.every_n_train_steps=100000",
        *m.trainer(),
        f"hydra.run.dir={run_dir}",
    ]
    before = set(m.tmp.iterdir())
    proc = start(args, log)
    deadline = time.monotonic() + STEP_TIMEOUT_S
    while f"train: step 3/{steps}" not in log.read_text(errors="replace"):
        assert proc.poll() is None, f"the run ended before step 3: {tail(log)}"
        assert time.monotonic() < deadline, f"no step 3 after {STEP_TIMEOUT_S} s"
        time.sleep(0.02)
    pids = ranks_of(proc)
    assert len(pids) == m.processes, f"{len(pids)} processes, expected {m.processes}"
    for pid in pids if to_all else pids[-1:]:
        os.kill(pid, signal.SIGTERM)
    sent = time.monotonic()
    try:
        rc = proc.wait(timeout=EXIT_WITHIN_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError(f"rank 0 still running {EXIT_WITHIN_S} s after SIGTERM: {tail(log)}") from None
    while any(alive(p) for p in pids) and time.monotonic() - sent < EXIT_WITHIN_S:
        time.sleep(0.1)
    exited = time.monotonic() - sent
    assert not any(alive(p) for p in pids), f"a rank still runs {EXIT_WITHIN_S} s after SIGTERM"
    assert rc == 128 + signal.SIGTERM, f"rank 0 exited {rc}, expected {128 + signal.SIGTERM}: {tail(log)}"
    checkpoints = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert checkpoints == ["last.ckpt"], f"checkpoints: {checkpoints}"
    assert status(run_dir) == "interrupted", f"status.json: {status(run_dir)}"
    text = log.read_text(errors="replace")
    line = next(ln for ln in text.splitlines() if "vtlab: interrupted" in ln)
    # one run: rank 0's first line alone, every rank's files in its directory, nothing beside it
    assert text.count("vtlab: finetune-") == 1, "more than one first line: a later rank started a run of its own"
    later = {f"train_ddp_process_{r}.log" for r in range(1, len(pids))}
    assert later <= {p.name for p in run_dir.iterdir()}, f"no log of the later ranks in {run_dir}"
    assert set(m.tmp.iterdir()) - before == {run_dir, log}, f"written beside {run_dir}"
    return {"processes": len(pids), "exited_after_s": round(exited, 1), "line": line, "run_dir": str(run_dir)}


# ---- the steps -------------------------------------------------------------------------------------------------------
def environment(m: Machine) -> dict[str, Any]:
    info = {
        "torch": torch.__version__,
        "cuda_build": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "devices": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
        "bf16": bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported(including_emulation=False)),
        "nccl": bool(dist.is_available() and dist.is_nccl_available()),
        "gloo": bool(dist.is_available() and dist.is_gloo_available()),
        "machine": machine(),
    }
    assert info["gloo"], "torch.distributed has no gloo backend"
    if m.cuda:
        assert info["cuda_build"], "the installed torch is a CPU build"
        assert info["bf16"], "the GPU does not compute bf16 (compute capability 8.0 or later needed)"
        assert info["nccl"], "torch.distributed has no NCCL backend"
    return info


def head(m: Machine) -> dict[str, Any]:
    report = pooling_check.check_on(m.device, large=m.cuda)
    failed = [k for k, v in report.items() if isinstance(v, dict) and not v.get("ok")]
    assert report["ok"], f"the block pooling misses the dense reference in {failed}"
    return report


def cached_loss(m: Machine) -> dict[str, Any]:
    report = cached_check.check_on(m.device)
    assert report["passed"], f"the cached loss misses plain autograd: {report['worst_error']}"
    return report


def cached_loss_ddp(m: Machine) -> dict[str, Any]:
    m.need_two()
    report = cached_check.two_process_check(m.device)
    assert report["passed"], f"the cached loss on two processes misses the whole batch's: {report['worst_error']}"
    return report


def paper_step(m: Machine) -> dict[str, Any]:
    m.need_gpu()
    out = {}
    for label, extra in (("plain", []), ("cached", ["--cached-mini-batch", "4"])):
        with tempfile.TemporaryDirectory(dir=m.tmp) as tmp:
            args = gpu_smoke.parse_args(["--steps", "60", "--warmup", "10", "--init", "mean", *extra])
            args.tmp = tmp
            result = gpu_smoke.run(args)
        assert np.isfinite(result["final_loss"]), f"{label}: non-finite loss {result['final_loss']}"
        out[label] = result
    return out


def quickstart(m: Machine) -> dict[str, Any]:
    m.need_gpu()
    run_dir, bm25_dir = m.tmp / "quickstart", m.tmp / "bm25"
    log = m.tmp / "quickstart.log"
    vtlab(["trainer=gpu", f"hydra.run.dir={run_dir}"], log)
    vtlab(["stage=evaluate", "model=bm25", "vocab=native", f"hydra.run.dir={bm25_dir}"], m.tmp / "bm25.log")
    text = (run_dir / "__main__.log").read_text(errors="replace")
    assert "evaluating on cuda" in text, "the evaluation did not encode on CUDA"
    ndcg = json.loads((run_dir / "eval" / "boolq-clean" / "metrics.json").read_text())["metrics"]["nDCG@10"]
    bm25 = json.loads((bm25_dir / "eval" / "boolq-clean" / "metrics.json").read_text())["metrics"]["nDCG@10"]
    assert ndcg > bm25, f"nDCG@10 {ndcg:.4f} is not above BM25's {bm25:.4f}"
    return {"nDCG@10": ndcg, "bm25_nDCG@10": bm25}


def sigterm(m: Machine) -> dict[str, Any]:
    report = interrupt(m, "sigterm", to_all=True)
    command = shlex.split(report["line"].split(" with: ", 1)[1])
    assert command[:3] == ["python", "-m", "vtlab"], command
    run_dir = Path(report["run_dir"])
    vtlab(command[3:], m.tmp / "resume.log")
    assert status(run_dir) == "done", f"the resumed run's status: {status(run_dir)}"
    return {**report, "resumed": "done"}


def sigterm_one_rank(m: Machine) -> dict[str, Any]:
    m.need_two()
    return interrupt(m, "sigterm-one", to_all=False)


def mlm_all(m: Machine) -> dict[str, Any]:
    """`stage=mlm` builds the adaptation on every process (a cold cache), then `stage=all` reads it on every process
    and runs APC, the fine-tune and the evaluation."""
    vt = ["backbone=tiny-modernbert", "vocab=bert-uncased", "init=mean", "logger=none"]
    mlm = ["mlm.steps=2", "mlm.batch_size=4", "mlm.max_length=32", f"mlm.seed={time.time_ns() % 2**31}"]
    vtlab(["stage=mlm", *vt, *mlm, *m.trainer(), f"hydra.run.dir={m.tmp / 'mlm'}"], m.tmp / "mlm.log")
    assert "mlm: 2 steps on" in tail(m.tmp / "mlm.log", 10**6), "stage=mlm did not train (a cache entry was found)"
    run_dir = m.tmp / "mlm-all"
    args = [
        "stage=all",
        *vt,
        *mlm,
        "apc=p60",
        "apc.num_docs=16",
        "apc.max_length=32",
        "baseline=false",
        "trainer.max_steps=2",
        "trainer.val_check_interval=2",
        "data.batch_size=2",
        "data.doc_max_length=32",
        "data.dev.dev_size=10",
        "data.dev.max_docs=50",
        *TINY_EVAL,
        *m.trainer(),
        f"hydra.run.dir={run_dir}",
    ]
    vtlab(args, m.tmp / "mlm-all.log")
    assert "mlm: cached" in tail(m.tmp / "mlm-all.log", 10**6), "stage=all did not read the adaptation stage=mlm built"
    assert status(run_dir) == "done", status(run_dir)
    assert (run_dir / "mlm" / "model").is_symlink(), "no mlm/model link"
    metrics = json.loads((run_dir / "eval" / "boolq-clean" / "metrics.json").read_text())["metrics"]
    entry = (run_dir / "mlm" / "model").resolve()
    shutil.rmtree(entry)  # the check's own adaptation (its seed is new each time): not left in $VTLAB_CACHE
    entry.with_name(entry.name + ".lock").unlink(missing_ok=True)
    return {"processes": m.processes, "nDCG@10": metrics["nDCG@10"]}


def encode(m: Machine) -> dict[str, Any]:
    m.need_two()
    base = ["stage=encode", "backbone=splade-tiny", "vocab=native", "logger=none", "eval=boolq", *TINY_EVAL]
    one, two = m.tmp / "encode-1", m.tmp / "encode-2"
    vtlab([*base, *m.trainer(1), f"hydra.run.dir={one}"], m.tmp / "encode-1.log")
    vtlab([*base, *m.trainer(), f"hydra.run.dir={two}"], m.tmp / "encode-2.log")
    a, b = sp.load_npz(one / "index" / "docs.npz"), sp.load_npz(two / "index" / "docs.npz")
    same = all(np.array_equal(getattr(a, k), getattr(b, k)) for k in ("data", "indices", "indptr"))
    assert a.shape == b.shape and same, "the two-process index differs from the one-process index"
    return {"docs": a.shape[0], "nnz": int(a.nnz)}


STEPS: dict[str, Callable[[Machine], dict[str, Any]]] = {
    "environment": environment,
    "head": head,
    "cached_loss": cached_loss,
    "cached_loss_ddp": cached_loss_ddp,
    "paper_step": paper_step,
    "quickstart": quickstart,
    "sigterm": sigterm,
    "sigterm_one_rank": sigterm_one_rank,
    "mlm_all": mlm_all,
    "encode": encode,
}


def check(m: Machine, names: list[str], out: Path) -> dict[str, Any]:
    """Run the steps `names` in order, recording each to `out` as it ends."""
    report: dict[str, Any] = {"mode": m.device, "gpus": m.gpus, "processes": m.processes, "steps": {}}
    for name in names:
        began = time.perf_counter()
        try:
            entry = {"status": "passed", **STEPS[name](m)}
        except Skipped as why:
            entry = {"status": "skipped", "why": str(why)}
        except Exception as err:  # noqa: BLE001 - a failed step is recorded; the next one still runs
            entry = {"status": "failed", "why": f"{type(err).__name__}: {err}"}
        entry["seconds"] = round(time.perf_counter() - began, 1)
        report["steps"][name] = entry
        write_result(out, report)
        why = f": {entry['why']}" if "why" in entry else ""
        print(f"gpu-check: {name}: {entry['status']} ({entry['seconds']} s){why}", flush=True)
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m vtlab.bench.gpu_check", description=__doc__.split("\n\n")[0])
    p.add_argument("--cpu", action="store_true", help="the steps that run on CPU: two gloo processes, tiny shapes")
    p.add_argument("--only", default=None, help=f"comma-separated steps of: {', '.join(STEPS)}")
    p.add_argument("--out", type=Path, default=Path("outputs/bench/gpu_check.json"))
    args = p.parse_args(argv)
    names = list(STEPS) if args.only is None else [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [n for n in names if n not in STEPS]
    if unknown:
        p.error(f"--only: unknown step(s) {', '.join(unknown)}; the steps: {', '.join(STEPS)}")
    if not args.cpu and not torch.cuda.is_available():
        print("vtlab: error: gpu-check needs a CUDA GPU (`make gpu-check-cpu` runs its CPU steps)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="vtlab-gpu-check-") as tmp:
        m = Machine(cuda=not args.cpu, gpus=torch.cuda.device_count() if not args.cpu else 0, tmp=Path(tmp))
        report = check(m, names, args.out)
    failed = [n for n, e in report["steps"].items() if e["status"] == "failed"]
    skipped = [f"{n} ({e['why']})" for n, e in report["steps"].items() if e["status"] == "skipped"]
    print(f"gpu-check ({m.device}): {len(names) - len(failed) - len(skipped)} passed, {len(failed)} failed", end="")
    print(f"; skipped: {', '.join(skipped)}" if skipped else "", f"-> {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
