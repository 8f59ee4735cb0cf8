"""`python -m vtlab [overrides]`: the Hydra entry point. Thin on purpose: all wiring is in conf/ and
vtlab.stages.pipeline."""

from __future__ import annotations

import logging
import os
import signal
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from vtlab.core.errors import DiskError, note_write_roots, one_line, user_error
from vtlab.core.logs import guard_log_files, quiet_third_party
from vtlab.core.overrides import quoted
from vtlab.core.paths import CONF_DIR, cache_root
from vtlab.runs.directory import LAST_CKPT, release_run_dir_lock, trains
from vtlab.runs.precheck import MULTIRUN, checked, first_line, sweep_size
from vtlab.runs.ranks import later_rank
from vtlab.runtime.allocator import keep_freed_memory

log = logging.getLogger("vtlab")
LOADING = "vtlab: loading torch, Lightning and the model code ..."  # said before they are imported


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
def main(cfg: DictConfig) -> None:
    # imported here: the command line was answered (a mistake, or the run's first line) before torch loads
    from vtlab.runs.signals import (
        CAUGHT,
        catch_signals,
        interrupted_line,
        interrupting_signal,
        raise_unheeded,
        rerun_command,
        resume_command,
    )
    from vtlab.runs.status import RunStatus, error_line
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
    status = RunStatus(cfg.paths.run_dir, name=cfg.name, overrides=list(hc.overrides.task))
    started = []

    def start() -> None:  # only once the run dir is accepted: a refused run never touches an earlier run's status
        started.append(True)  # first: a signal arriving while status.json is written still records the interruption
        status.start()

    try:
        run_or_exit(cfg, on_start=start)
        raise_unheeded()  # a signal no step acted on still ends the run as interrupted, not done
    except BaseException as exc:  # noqa: BLE001 - interruptions too: recorded, then an honest exit code
        signum = interrupting_signal(exc)
        if signum is not None:
            for signum_ in (signal.SIGINT, *CAUGHT):  # a second signal must not cut the status write short
                signal.signal(signum_, signal.SIG_IGN)
            if started:
                status.interrupted(signum)
            run_dir, training = Path(cfg.paths.run_dir), trains(cfg)
            checkpoint = run_dir / LAST_CKPT if training and (run_dir / LAST_CKPT).is_file() else None
            task = list(hc.overrides.task)
            command = resume_command(task, run_dir) if checkpoint else rerun_command(task, run_dir)
            release_run_dir_lock(run_dir)  # free when the line appears: the rerun may start at once
            print(interrupted_line(signum, run_dir, checkpoint, command, training), file=sys.stderr)
            leave(128 + signum)  # a sweep stops too: the user asked to stop
        if started:
            _record_failure(status, exc)
        if hc.mode == RunMode.MULTIRUN:
            # one failed job must not end the sweep: the table shows it as failed (vtlab.report), and the sweep exits
            # 1 at its end (vtlab.runs.status.SweepExitCode)
            log.error("job %s failed: %s", hc.job.num, error_line(exc))
            return
        raise
    try:
        if started:  # a later rank of a run records nothing: rank 0 does (vtlab.runs.ranks)
            status.done()
    except DiskError as err:  # the results are written, but status.json cannot say so: not an honest exit 0
        if hc.mode == RunMode.MULTIRUN:
            log.error("job %s: %s", hc.job.num, err)
            return
        print(one_line(err), file=sys.stderr)
        raise SystemExit(2) from None


def _record_failure(status: object, exc: BaseException) -> None:
    """status.json says "failed"; where it cannot be written (a link there, a full disk) that is one more line, and
    none after a refusal that already named the file (the run exits 2 on its own line, no traceback)."""
    try:
        status.fail(exc)  # type: ignore[attr-defined]
    except Exception as err:  # noqa: BLE001 - a user's error is one line; anything else is a bug
        said = user_error(err)
        if said is None:
            raise
        if not isinstance(exc, SystemExit):
            print(one_line(said), file=sys.stderr)


def leave(code: int) -> None:
    """Exit now, the line printed: flush what is open and skip the interpreter's teardown (collecting a large
    model's objects took minutes on a loaded machine, holding the CPU past the line a scheduler reads)."""
    from vtlab.runs import world

    wandb = sys.modules.get("wandb")
    if wandb is not None and getattr(wandb, "run", None) is not None:
        wandb.finish(exit_code=code, quiet=True)
    world.current().farewell()  # every rank leaves once rank 0 recorded the run's end
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


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
