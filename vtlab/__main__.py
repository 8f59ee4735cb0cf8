"""`python -m vtlab [overrides]`: the Hydra entry point. Thin on purpose: all wiring is in conf/, the run's
lifecycle in vtlab.runs.lifecycle and its stages in vtlab.stages.pipeline."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from vtlab.core.errors import note_write_roots
from vtlab.core.logs import guard_log_files, quiet_third_party
from vtlab.core.overrides import quoted
from vtlab.core.paths import CONF_DIR, cache_root
from vtlab.runs.guard import taken
from vtlab.runs.plan import trains
from vtlab.runs.precheck import MULTIRUN, checked, first_line, sweep_size
from vtlab.runs.ranks import later_rank
from vtlab.runtime.allocator import keep_freed_memory

LOADING = "vtlab: loading torch, Lightning and the model code ..."  # said before they are imported


def task(cfg: DictConfig) -> None:
    """The job Hydra runs: the process set up, then the stages inside the run's lifecycle (vtlab.runs.lifecycle)."""
    # imported here: the command line was answered (a mistake, or the run's first line) before torch loads
    from vtlab.runs.lifecycle import Job, run_job
    from vtlab.runs.signals import catch_signals
    from vtlab.stages.pipeline import run_or_exit

    # here, not at import: a launcher (submitit) runs the job in another process; the run directory: Lightning's
    # warning that its checkpoints/ is not empty, on every resume
    quiet_third_party(cfg.paths.run_dir)
    guard_log_files()  # a full disk under the job log: one warning, not a traceback per log record
    # past `ulimit -f` a write must fail (EFBIG: one line naming the file, status.json "failed"), not kill the process
    # with SIGXFSZ; Python ignores it already, this keeps it so for a job started otherwise (a launcher, a test)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    # freed activations stay in the process for the next batch, not refaulted (vtlab.runtime.allocator)
    keep_freed_memory()
    # an error that names no file (safetensors' "No space left on device (os error 28)") is placed among these
    note_write_roots(cfg.paths.run_dir, cache_root())
    hc = HydraConfig.get()
    # TERM (a scheduler's kill, `timeout`), HUP (a dropped ssh session), QUIT, USR1/2 as an exception, like Ctrl-C:
    # status.json and the exit code tell
    catch_signals()
    guarded = taken(task)  # what the run dir guard answered before Hydra wrote (vtlab.runs.guard); None in a sweep
    job = Job(
        run_dir=Path(cfg.paths.run_dir),
        name=cfg.name,
        overrides=tuple(hc.overrides.task),
        trains=trains(cfg),
        num=hc.job.num if hc.mode == RunMode.MULTIRUN else None,
        lock=guarded.lock if guarded is not None else None,
    )
    run_job(job, lambda on_start: run_or_exit(cfg, on_start, guarded))


main = hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")(task)


if __name__ == "__main__":
    # the command line's mistakes in a second, before torch or a model loads (vtlab.runs.precheck): one line, exit 2
    problem, composed = checked(sys.argv[1:], CONF_DIR)
    if problem is not None:
        print(f"vtlab: error: {problem}", file=sys.stderr)
        raise SystemExit(2)
    if composed is not None and not later_rank():  # its first line, and Hydra writes where that line says
        sweep = any(a in MULTIRUN for a in sys.argv[1:])
        key = "hydra.sweep.dir" if sweep else "hydra.run.dir"
        if not any(a.lstrip("+").startswith(f"{key}=") for a in sys.argv[1:]):
            sys.argv.append(f"{key}={quoted(str(OmegaConf.select(composed, key)))}")
        print(first_line(composed, sweep_size(sys.argv[1:]) if sweep else None), flush=True)
        from vtlab.runs.signals import ignored_sigint_line  # after the first line: Hydra's import, not torch's

        launcher = str(OmegaConf.select(composed, "hydra.launcher._target_", default="")) if sweep else ""
        if (note := ignored_sigint_line(os.getpid(), launcher)) is not None:  # Ctrl-C will not stop it: say so
            print(note, file=sys.stderr, flush=True)
        print(LOADING, file=sys.stderr, flush=True)  # the seconds torch takes to import are not silent
    main()
