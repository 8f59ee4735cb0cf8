"""What a run prints: the one place that decides between live progress bars and plain lines, and that silences
third-party chatter. Output that is not a terminal (SLURM, `| tee`, a test's pipe) gets no carriage-return frames:
training progress comes as one log line per interval (vtlab.tracking.progress), library progress bars are off."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vtlab.core.errors import disk_problem

# third-party logger -> (lowest level kept, messages dropped when they contain one of these)
_CHATTER: dict[str, tuple[int, tuple[str, ...]]] = {
    "bm25s": (logging.WARNING, ()),  # the library sets its own logger to DEBUG when it is imported
    "pytorch_lightning.utilities.rank_zero": (logging.INFO, ("litlogger",)),  # an advert on every Trainer
    # transformers' key-by-key table of the weights a checkpoint lacks (an encoder without an MLM head, e.g. MiniLM as
    # semantic init's source or e5), and its "seem corrupted" line for the same head: vtlab.backbones.pretrained says
    # it in one line, with what vtlab does about it
    "transformers.modeling_utils": (logging.WARNING, ("LOAD REPORT", "This checkpoint seem corrupted")),
}
# (message regex, category) of warnings that say nothing a user can act on
_WARNINGS: tuple[tuple[str, type[Warning]], ...] = (
    (r"`isinstance\(treespec, LeafSpec\)` is deprecated", FutureWarning),  # Lightning's pytree helper vs torch
)
# Hugging Face progress bars: each library reads its variable when imported; an already imported one is switched off
# through its function (transformers caches the hub's switch at import)
_PROGRESS_SWITCHES: tuple[tuple[str, str, str], ...] = (
    ("HF_HUB_DISABLE_PROGRESS_BARS", "huggingface_hub.utils", "disable_progress_bars"),
    ("HF_HUB_DISABLE_PROGRESS_BARS", "transformers.utils.logging", "disable_progress_bar"),
    ("HF_DATASETS_DISABLE_PROGRESS_BARS", "datasets.utils.tqdm", "disable_progress_bars"),
)


def interactive() -> bool:
    """True when stdout and stderr are both terminals: only then may output redraw itself with `\\r`."""
    return all(stream is not None and stream.isatty() for stream in (sys.stdout, sys.stderr))


class _Drop(logging.Filter):
    """Set on the library's logger (not on a handler), so it holds whatever level the library gives its logger."""

    def __init__(self, min_level: int, fragments: tuple[str, ...]) -> None:
        super().__init__()
        self.min_level, self.fragments = min_level, fragments

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < self.min_level:
            return False
        message = record.getMessage()
        return not any(f in message for f in self.fragments)


def own_checkpoint_warnings(run_dir: str | os.PathLike[str]) -> list[str]:
    """The message patterns of Lightning's "Checkpoint directory <dir> exists and is not empty." for the run's own
    checkpoint directory (`<run_dir>/checkpoints`, as Lightning names it: its real path), and nothing else: vtlab owns
    that directory, whose earlier checkpoints are there only for a resume of this run (an earlier run's are refused,
    or deleted by overwrite=true: vtlab.runs.directory), so the warning came on every resume and said nothing. A
    checkpoint directory configured elsewhere keeps it."""
    own = Path(run_dir) / "checkpoints"
    dirs = dict.fromkeys((os.path.realpath(own), os.path.join(os.path.realpath(run_dir), "checkpoints")))
    return [rf"Checkpoint directory {re.escape(d)} exists and is not empty\.$" for d in dirs]


def quiet_third_party(run_dir: str | os.PathLike[str] | None = None) -> None:
    """Silence the chatter of the libraries under vtlab, and their progress bars when the output is not a terminal;
    with the job's `run_dir`, also Lightning's warning that its checkpoint directory is not empty
    (`own_checkpoint_warnings`). Called at the start of every `python -m vtlab` job; calling it again changes
    nothing (a sweep's jobs in one process each add their own directory's)."""
    for name, (level, fragments) in _CHATTER.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, _Drop) for f in logger.filters):
            logger.addFilter(_Drop(level, fragments))
    for message, category in _WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)
    for message in own_checkpoint_warnings(run_dir) if run_dir is not None else ():
        warnings.filterwarnings("ignore", message=message, category=UserWarning)
    if interactive():
        return
    chosen = {var for var, _, _ in _PROGRESS_SWITCHES if var in os.environ}  # the user's own setting wins
    for var, module, switch in _PROGRESS_SWITCHES:
        if var in chosen:
            continue
        os.environ[var] = "1"
        if module in sys.modules:
            getattr(sys.modules[module], switch)()


def guard_log_files() -> None:
    """A log file that meets a full, read-only, ... disk (Hydra's `<run_dir>/<job>.log`) is closed with one warning
    line naming it, instead of the logging module printing a traceback for every record after that; the console
    keeps getting them. Called at the start of every `python -m vtlab` job, after Hydra configured logging."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler) and not getattr(handler, "_vtlab_guarded", False):
            handler.handleError = _stop_on_disk_error(handler, handler.handleError)  # type: ignore[method-assign]
            handler._vtlab_guarded = True  # type: ignore[attr-defined]


def _stop_on_disk_error(
    handler: logging.FileHandler, fallback: Callable[[logging.LogRecord], None]
) -> Callable[[logging.LogRecord], None]:
    def handle_error(record: logging.LogRecord) -> None:
        problem = disk_problem(exc) if (exc := sys.exc_info()[1]) is not None else None
        if problem is None:
            fallback(record)
            return
        handler.emit = lambda record: None  # type: ignore[method-assign] # the later records: not retried
        with contextlib.suppress(OSError, ValueError):  # flushing what is buffered fails the same way
            handler.close()
        print(
            f"vtlab: warning: {handler.baseFilename}: cannot write the log: {problem[0]} ({problem[1]}); it stops "
            "here, the console keeps the rest",
            file=sys.stderr,
        )

    return handle_error


def print_line(console: Any, text: str) -> None:
    """`text` on one line of `console` (rich) however wide the terminal or log: a path wrapped mid-word cannot be
    copied, and no markup in a path is interpreted."""
    console.print(text, soft_wrap=True, markup=False, highlight=False)
