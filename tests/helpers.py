"""Plain helpers shared by the test modules (importable at collection time, unlike fixtures)."""

import contextlib
import importlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from vtlab.bench.tiny_runs import TINY_FINETUNE

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
CONF = ROOT / "conf"
# what every process a test starts runs under: offline (hub, datasets, wandb), no tokenizer threads
OFFLINE = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "WANDB_MODE": "offline",
    "TOKENIZERS_PARALLELISM": "false",
}
# a real SPLADE-tiny training run small enough for a test (add its steps, cadence, stage): fp32 encoding, so that two
# runs compared bit for bit never depend on what precision=auto picks on the CPU
TINY_RUN = [
    "backbone=splade-tiny",
    "vocab=native",
    "apc=off",
    "baseline=false",
    "logger=none",
    "model.encoder.precision=fp32",
    "data.batch_size=4",
    "data.doc_max_length=64",
    "data.dev.dev_size=20",
    "data.dev.max_docs=100",
    "+eval.collection.max_queries=40",
    "+eval.collection.max_docs=150",
]

# two steps of SPLADE-tiny fine-tuning: the smallest training run a command-line test starts (the GPU check's too)
TWO_STEP_FINETUNE = [*TINY_FINETUNE, "stage=finetune", "trainer.max_steps=2", "trainer.val_check_interval=2"]


def child_env(*first_on_path: str | os.PathLike[str], **extra: str) -> dict[str, str]:
    """The environment of a process a test starts, read when it starts (VTLAB_CACHE is then the test's cache
    fixture's): OFFLINE, PYTHONPATH `first_on_path` then this checkout (its vtlab imported from any working
    directory), and `extra`."""
    path = os.pathsep.join([*map(str, first_on_path), str(ROOT)])
    return {**os.environ, **OFFLINE, "PYTHONPATH": path, **extra}


def vtlab_command(*args: str) -> list[str]:
    """`python -m vtlab <args>` with this interpreter."""
    return [sys.executable, "-m", "vtlab", *args]


def run_vtlab(
    *args: str,
    cwd: str | os.PathLike[str] = ROOT,
    env: dict[str, str] | None = None,
    timeout: float | None = None,
    check: bool = False,
    text: bool = True,
) -> subprocess.CompletedProcess:
    """`python -m vtlab <args>` as a user runs it from a terminal, to its end (as_from_a_terminal: whatever the suite's
    own signal dispositions): its output captured, in child_env() unless `env`; `check`: it must exit 0 (else the test
    fails with the end of its output)."""
    proc = subprocess.run(
        vtlab_command(*args),
        cwd=cwd,
        env=child_env() if env is None else env,
        capture_output=True,
        text=text,
        timeout=timeout,
        preexec_fn=as_from_a_terminal,
    )
    if check:
        assert proc.returncode == 0, (
            f"{' '.join(proc.args)}: exit {proc.returncode}\n{proc.stdout[-3000:]!s}{proc.stderr[-3000:]!s}"
        )
    return proc


def start_vtlab(
    *args: str, cwd: str | os.PathLike[str] = ROOT, env: dict[str, str] | None = None, **popen: Any
) -> subprocess.Popen:
    """`python -m vtlab <args>` started and not waited for (a test signals it, or runs several at once), in
    child_env() unless `env`, with a terminal's signal dispositions (as_from_a_terminal) unless `popen` gives another
    preexec_fn; `popen`: where its output goes, text."""
    popen.setdefault("preexec_fn", as_from_a_terminal)
    return subprocess.Popen(vtlab_command(*args), cwd=cwd, env=child_env() if env is None else env, **popen)


def run_vtlab_together(
    runs: Mapping[str, Sequence[str]],
    *,
    cwd: str | os.PathLike[str] | Mapping[str, str | os.PathLike[str]] = ROOT,
    env: dict[str, str] | None = None,
    timeout: float | None = None,
) -> dict[str, subprocess.CompletedProcess]:
    """`python -m vtlab <args>` for each of `runs` (name → args), all started at once (each is mostly interpreter
    start-up), in `cwd` (or each in its own: name → directory); each one's output captured, by name. One still running
    after `timeout` seconds fails the test, naming it, and every run is killed."""
    procs = {
        name: start_vtlab(
            *args,
            cwd=cwd[name] if isinstance(cwd, Mapping) else cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, args in runs.items()
    }
    done = {}
    for name, proc in procs.items():
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for p in procs.values():
                p.kill()
                p.wait()
            raise AssertionError(f"{name}: python -m vtlab ran past {timeout} s (a pipe waited on?)") from None
        done[name] = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    return done


def run_results(run_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """A finished TINY_RUN's BoolQ-clean metrics without timings, and its trained weights."""
    from safetensors.torch import load_file

    metrics = json.loads((run_dir / "eval" / "boolq-clean" / "metrics.json").read_text())["metrics"]
    quality = {k: v for k, v in metrics.items() if not k.endswith(("_s", "_ms_per_query"))}
    return quality, load_file(str(run_dir / "model" / "model.safetensors"))


def compose_config(
    overrides: Iterable[str] = (),
    *,
    return_hydra_config: bool = False,
    config_name: str = "config",
    config_dir: Path = CONF,
) -> DictConfig:
    """Hydra's compose of conf/ (as `python -m vtlab` would) with `overrides`, the one way a test composes a config
    (also the `compose` fixture); `return_hydra_config=True` keeps the `hydra` node (launcher, sweeper, run dir)."""
    with hydra_conf(config_dir):
        return compose(config_name, overrides=list(overrides), return_hydra_config=return_hydra_config)


def compose_run(run_dir: str | os.PathLike[str], *overrides: str) -> DictConfig:
    """compose_config for a run writing to `run_dir` (paths.run_dir), with `overrides`: the config an in-process
    test hands to the pipeline, the admission or the run-directory check."""
    return compose_config([f"paths.run_dir={run_dir}", *overrides])


def hydra_conf(config_dir: Path = CONF) -> contextlib.AbstractContextManager[Any]:
    """An initialized Hydra on conf/, for code that reads Hydra's state itself (a multirun's load, the config groups an
    override chose); a plain compose is compose_config."""
    return initialize_config_dir(str(config_dir), version_base="1.3")


def prepare_run_dir(cfg: DictConfig) -> Path | None:
    """The admission's run-directory step (vtlab.stages.admission): check_run_dir's answer for the config's run
    directory, acted on (overwrite=true clears the earlier run's checkpoints); the checkpoint to resume from."""
    from vtlab.runs.directory import check_run_dir, clear_earlier_run

    run_dir = Path(str(cfg.paths.run_dir))
    resume_from, clear = check_run_dir(run_dir, cfg.get("resume", "auto"), cfg.get("overwrite", False))
    clear_earlier_run(run_dir, clear, resume_from)
    return resume_from


def said(stderr: str) -> list[str]:
    """What a run said on stderr, line by line, less the line every accepted command prints before torch loads
    (vtlab.__main__.LOADING): a refusal's or an interruption's lines alone."""
    from vtlab.__main__ import LOADING

    return [line for line in stderr.strip().splitlines() if line != LOADING]


def one_error_line(stderr: str, expected: Iterable[str] = ()) -> str:
    """The single `vtlab: error:` line a refused command prints last, with no traceback and each of `expected` in it."""
    assert "Traceback" not in stderr, stderr[-3000:]
    errors = [line for line in stderr.splitlines() if line.startswith("vtlab: error: ")]
    assert len(errors) == 1 and stderr.strip().splitlines()[-1] == errors[0], stderr[-3000:]
    for needle in expected:
        assert needle in errors[0], errors[0]
    return errors[0]


def as_from_a_terminal() -> None:
    """A child's signal dispositions as a shell gives a foreground job (preexec_fn): a suite started under nohup, or in
    the background of a non-interactive shell, hands down SIGHUP, SIGINT and SIGQUIT ignored."""
    for signum in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_DFL)


# A missing offline asset or declared dependency is a broken install: the test fails, naming it, unless the suite runs
# with this flag (conftest.py), as lightning-ir's --run-models opts in. `.ci/run` and `make test` never pass it.
ALLOW_MISSING_FLAG = "--allow-missing-assets"
ALLOW_MISSING = {"on": False}  # set from the command line by conftest.pytest_configure


def missing(what: str) -> NoReturn:
    """`what` is not installed: a failure, or a skip where the run opted in with --allow-missing-assets."""
    if ALLOW_MISSING["on"]:
        pytest.skip(f"missing: {what}")
    pytest.fail(f"{what} — a broken install (make install provides it); {ALLOW_MISSING_FLAG} skips instead", False)


def need(load: Any, *args: Any) -> Any:
    """`load(*args)`, or `missing` with its AssetError (an offline asset this install should hold)."""
    from vtlab.core.errors import AssetError

    try:
        return load(*args)
    except AssetError as e:
        missing(str(e))


def need_module(name: str) -> ModuleType:
    """A declared dependency (pyproject.toml), imported, or `missing`."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        missing(f"{name} does not import ({e})")
