"""Signals: an interrupted run exits 128 + the signal's number, like a shell reports a process killed by it, and a run
that trains stops at a step boundary with a checkpoint to resume from.

Outside training a caught signal raises where the process is (Terminated; SIGINT is Python's KeyboardInterrupt).
While training (`defer_signals`, switched on by vtlab.callbacks.last_checkpoint) the first signal is only noted: the
step under way finishes, `last.ckpt` is written, and then it is raised (`raise_pending`). A second signal raises at
once, for a user who will not wait.

No finaliser swallows a signal. A signal that lands while Python runs a `__del__` (or a weakref callback) raises
inside it, and Python only prints "Exception ignored in ..." and goes on. `catch_signals` therefore wraps
`sys.unraisablehook`: an interruption that reaches it is sent to the process again a moment later, from another
thread, until it is raised outside any finaliser. A signal received but never acted on is raised again before a run
records itself done (`raise_unheeded`).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

from vtlab.core.errors import exception_chain

# the signals a run records as an interruption: a scheduler's kill (TERM), a dropped ssh session (HUP), Ctrl-\ (QUIT),
# a batch system's warning (USR1/USR2; under SLURM with auto-requeue, Lightning takes USR1 over while fitting)
CAUGHT = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
_deferring = False
_stopping = False
log = logging.getLogger("vtlab")
_pending: list[int] = []
_received: list[int] = []
REDELIVER_AFTER_S = 0.05  # every caught signal, in order; emptied once one is acted on (`heeded`)


class Terminated(BaseException):
    """A signal in CAUGHT, raised where the process is (like KeyboardInterrupt for SIGINT): a BaseException, so no
    `except Exception` on the way swallows it, and Lightning's fit tears down and re-raises it."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)


def _raise(signum: int) -> None:
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated(signum)


def raise_terminated(signum: int, frame: Any) -> None:
    """The handler of every caught signal (and of SIGINT while training): raise it, or note it while training. Once
    the run stops for an agreed signal (`raise_pending`), a later one is only logged: the stop under way writes the
    run's status (another rank ending first may send one)."""
    if _stopping:
        _say("%s received while the run stops: ignored", signal.Signals(signum).name)
        return
    _received.append(int(signum))
    if _deferring and not _pending:
        _pending.append(int(signum))
        _say(
            "%s received: stopping after this training step, once its checkpoint is written (send it again to stop "
            "at once)",
            signal.Signals(signum).name,
        )
        return
    _raise(signum)


def _say(message: str, *args: Any) -> None:
    """Log a handler's line from a thread of its own. A handler runs between two bytecodes of the main thread, which
    may be inside a log handler's write or flush at that moment: logging there re-enters the stream (a "reentrant
    call", and logging's own traceback on stderr). The thread waits for the log handler's lock instead."""
    threading.Thread(target=log.warning, args=(message, *args), name="vtlab-signal-line", daemon=True).start()


def take_over() -> None:
    """vtlab's handler in charge again of every caught signal it was in charge of: Lightning installs its own at the
    start of a fit (a SIGTERM handler that broadcasts inside the handler); it restores the previous ones, vtlab's, at
    the fit's end."""
    for signum in CAUGHT:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, raise_terminated)


def catch_signals() -> None:
    """Every signal in CAUGHT raises Terminated with its number (SIGINT is Python's KeyboardInterrupt already). One
    the process was started ignoring stays ignored: `nohup` ignores HUP so that a run outlives its terminal; a run
    started with SIGINT ignored said so in its start line (`ignored_sigint_line`). An interruption raised inside a
    finaliser is delivered again (`redeliver_swallowed`)."""
    global _stopping
    heeded()  # a new run: nothing received yet
    _stopping = False
    for signum in CAUGHT:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, raise_terminated)
    if not getattr(sys.unraisablehook, "redelivers_signals", False):
        sys.unraisablehook = _redelivering(sys.unraisablehook)


def ignored_sigint_line(pid: int, launcher: str = "") -> str | None:
    """The line a run started with SIGINT ignored prints at its start (`python -m vtlab`, after its first line): Ctrl-C
    will not stop it, and how to stop it instead. None when SIGINT is not ignored.

    A shell starts a command run in the background of a script (`cmd &`, no job control) with SIGINT ignored, so
    that Ctrl-C on the script leaves it running; Python keeps it ignored. vtlab leaves it so rather than taking SIGINT
    back: the shell asked for it, and a sweep's parallel jobs (hydra/launcher=parallel: joblib's loky workers, which
    inherit the ignored SIGINT and set nothing of their own) would otherwise stop on Ctrl-C while the sweep's process
    went on without them. A signal in CAUGHT (TERM) stops the run as Ctrl-C would: `kill -TERM <pid>`, for a parallel
    sweep to each job's process (`pkill -TERM -P <pid>`: the workers are its children). A submitit launcher's jobs run
    where SLURM (or submitit) starts them, with signals of their own: nothing to say. `launcher`: a sweep's
    `hydra.launcher._target_`, empty for a single run."""
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN or "submitit" in launcher:
        return None
    how = f"pkill -TERM -P {pid} (each job's process)" if "joblib" in launcher else f"kill -TERM {pid}"
    return (
        "vtlab: note: Ctrl-C does not stop this run: it was started with SIGINT ignored (as `cmd &` in a script "
        f"starts it); stop it with: {how}"
    )


def _redelivering(previous: Callable[[Any], object]) -> Callable[[Any], None]:
    """`sys.unraisablehook` that sends an interruption Python could not raise (it was raised in a finaliser) to this
    process again, and leaves every other unraisable exception to `previous`."""

    def hook(unraisable: Any) -> None:
        exc = unraisable.exc_value
        signum = interrupting_signal(exc) if exc is not None else None
        if signum is None:
            previous(unraisable)
            return
        log.debug("%s raised in a finaliser (%r): delivered again", signal.Signals(signum).name, unraisable.object)
        # from another thread, a moment later: the handler then runs in the main thread's own code, not in this hook
        # (whose exception Python would ignore too); a finaliser still running meets it again, and so on until none
        again = threading.Timer(REDELIVER_AFTER_S, os.kill, (os.getpid(), signum))
        again.daemon = True
        again.start()

    hook.redelivers_signals = True  # type: ignore[attr-defined]
    return hook


def heeded() -> None:
    """The run acted on the signals received so far (it is stopping): `raise_unheeded` has nothing left to raise."""
    _received.clear()


def raise_unheeded() -> None:
    """Raise the first signal received that nothing acted on (a safe point: before a run records itself done); a
    signal noted while training waits for its checkpoint (`raise_pending`) instead."""
    if _received and not _pending:
        signum = _received[0]
        heeded()
        _raise(signum)


def defer_signals(on: bool) -> None:
    """While training (`on`): a signal waits for the end of the step under way (`pending`, `raise_pending`). Ctrl-C
    is deferred too when it would raise KeyboardInterrupt (Python's default). Call from the main thread."""
    global _deferring
    _deferring = bool(on)
    if not on:
        _pending.clear()
    sigint = signal.getsignal(signal.SIGINT)
    if on and sigint is signal.default_int_handler:
        signal.signal(signal.SIGINT, raise_terminated)
    elif not on and sigint is raise_terminated:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def stop_at_step_ends(on: bool) -> None:
    """While a fit trains (`on`): vtlab's handler in charge (`take_over`) and a signal deferred to the end of the step
    under way (`defer_signals`), where the run's processes agree on it (`agreed`); off again when the fit ends."""
    if on:
        take_over()
    defer_signals(on)


def pending() -> int | None:
    """The signal noted while training, if any."""
    return _pending[0] if _pending else None


def agreed(most: Callable[[int], int]) -> int | None:
    """The signal noted on any of the run's processes, the same on every one: `most` is the world's maximum over the
    ranks (vtlab.runs.world.World.most), called by every rank at the same step boundary."""
    return most(pending() or 0) or None


def raise_pending(signum: int | None = None) -> None:
    """Raise `signum` (the agreed signal) or the noted one, after the caller wrote its checkpoint; nothing when there
    is none. A rank that received no signal raises the agreed one: every rank stops at the same step."""
    global _stopping
    signum = signum or (_pending[0] if _pending else None)
    if signum:
        defer_signals(False)
        _stopping = True
        heeded()
        _raise(signum)


def interrupting_signal(exc: BaseException) -> int | None:
    """The signal behind `exc`, if it is (or was raised while handling) an interruption: SIGINT for Ctrl-C (also after
    Lightning turned it into `sys.exit(1)`), the caught signal's own for Terminated, SIGTERM for Lightning's
    SIGTERMException (a SystemExit without a code, which would otherwise exit 0)."""
    # imported here: `python -m vtlab` imports this module for its start line (`ignored_sigint_line`) before torch
    from pytorch_lightning.utilities.exceptions import SIGTERMException

    for seen in exception_chain(exc):
        if isinstance(seen, KeyboardInterrupt):
            return int(signal.SIGINT)
        if isinstance(seen, Terminated):
            return seen.signum
        if isinstance(seen, SIGTERMException):
            return int(signal.SIGTERM)
    return None
