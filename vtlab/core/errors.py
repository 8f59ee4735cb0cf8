"""One exception type for user-facing errors: the entry point prints its message as one line and exits 2."""

from __future__ import annotations

import errno
import os
import re
import unicodedata
from collections.abc import Iterator
from pathlib import Path

from hydra.errors import InstantiationException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException


def exception_chain(exc: BaseException | None) -> Iterator[BaseException]:
    """`exc` and the exceptions it arose from (each one's cause, else its context), each once: a chain can loop (an
    exception raised again while handling itself), and a walk that did not stop there would hang the run at its end."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


class VtlabError(Exception):
    """A problem with the user's input (file, line, config key) or environment (missing asset, offline hub)."""


class DataError(VtlabError):
    """Malformed data: the message names file:line and the missing or bad field."""


class AssetError(VtlabError):
    """An offline asset or hub model that cannot be found or loaded."""


class ConfigError(VtlabError, ValueError):
    """A config value out of range or of the wrong kind: the message names the key (e.g. `data.batch_size`).

    `key`: the full config key the value was read from, when the code raising it knows it. The entry point follows it
    to the key the user sets when it is an interpolation (model.encoder.doc_max_length → data.doc_max_length)."""

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


class RunDirError(VtlabError):
    """The run directory cannot be used as asked: it holds an earlier run's results, or there is nothing to resume."""


class LinkError(VtlabError):
    """A write would go through a link that leads out of where it belongs (a run directory, the cache): refused."""


class NonFiniteLossError(VtlabError, FloatingPointError):
    """Training produced a NaN/inf loss: the message names the step, the loss parts and the last finite loss.
    Still a FloatingPointError, so code that catches numeric failures keeps working."""


class DiskError(VtlabError):
    """A write failed for lack of space or permission, or there is not enough free space to start: the message names
    the path (and the sizes)."""


# errno -> (what happened, what to do); the errors a write meets on a full, over-quota or read-only disk, or past the
# file-size limit (`ulimit -f`: Python ignores SIGXFSZ, so the write raises EFBIG instead of the process being killed)
_DISK_ERRNOS = {
    errno.ENOSPC: ("no space left on the device", "free some space there"),
    errno.EDQUOT: ("disk quota exceeded", "free some space there"),
    errno.EROFS: ("the file system is read-only", "make it writable"),
    errno.EFBIG: ("the file-size limit is reached", "raise it (ulimit -f)"),
    errno.EACCES: ("permission denied", "make it writable"),
    errno.EPERM: ("operation not permitted", "make it writable"),
}
# errnos that only a write meets: found anywhere in an exception's chain, they are its cause (EACCES/EPERM may be a
# read's, and a read's own error then names it better)
_WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG)
# libraries that report an OS error as text: safetensors (Rust) "No space left on device (os error 28)", a message
# that kept Python's "[Errno 28] ..."; safetensors names the file it wrote as `at path "..."`
_ERRNO_TEXT = re.compile(r"\(os error (\d+)\)|\[Errno (\d+)\]")
_PATH_TEXT = re.compile(r'at path "([^"]+)"')
# where a run writes (its run dir, the cache): set by the entry point, to name the place of an error that names no file
_WRITE_ROOTS: list[Path] = []


def disk_errno(exc: BaseException) -> int | None:
    """The errno of `exc` itself when it is a full, over-quota or read-only disk, a file-size limit or a denied
    permission: an OSError's, or one a library wrote into its message (safetensors' SafetensorError)."""
    if isinstance(exc, VtlabError):
        return None  # a message of ours that quotes an OS error already says what to do
    code = exc.errno if isinstance(exc, OSError) else None
    if code is None and not isinstance(exc, OSError) and (m := _ERRNO_TEXT.search(str(exc))):
        code = int(m.group(1) or m.group(2))
    return code if code in _DISK_ERRNOS else None


def disk_problem(exc: BaseException) -> tuple[str, str] | None:
    """(what happened, errno name) for the first disk error in `exc`'s chain (see `disk_errno`), else None."""
    for seen in exception_chain(exc):
        if (code := disk_errno(seen)) is not None:
            return _DISK_ERRNOS[code][0], errno.errorcode[code]
    return None


def disk_error(path: str | os.PathLike[str], exc: BaseException) -> DiskError | None:
    """A DiskError naming `path` when `exc` (or an exception it arose from: torch.save reports a failed write as a
    RuntimeError raised while handling the OSError) is a full disk, an exceeded quota, a read-only file system, a
    file-size limit or a denied permission; None for anything else."""
    for seen in exception_chain(exc):
        if isinstance(seen, DiskError):
            return seen
        if (code := disk_errno(seen)) is not None:
            what, fix = _DISK_ERRNOS[code]
            return DiskError(
                f"{path}: cannot write: {what} ({errno.errorcode[code]}); {fix} or choose another "
                "location (hydra.run.dir, VTLAB_CACHE); nothing half-written was left behind"
            )
    return None


def note_write_roots(*roots: str | os.PathLike[str]) -> None:
    """Where this process writes (the run dir, the cache): an error that names no file is placed among these, and no
    write under one of them goes out of it through a link (vtlab.core.atomic.guard_write)."""
    _WRITE_ROOTS[:] = [Path(r) for r in roots]


def write_roots() -> list[Path]:
    """The roots note_write_roots recorded (none outside `python -m vtlab`)."""
    return list(_WRITE_ROOTS)


def _statvfs(path: Path) -> os.statvfs_result | None:
    for p in (path, *path.parents):  # a directory not made yet: the file system it would be made on
        try:
            return os.statvfs(p)
        except OSError:
            continue
    return None


def _place(code: int) -> str:
    """The write root that shows `code`'s condition (the read-only one; the fullest one), else all of them."""
    roots = [(r, st) for r in _WRITE_ROOTS if (st := _statvfs(r)) is not None]
    if code == errno.EROFS:
        found = [r for r, st in roots if st.f_flag & os.ST_RDONLY]
    elif code == errno.ENOSPC and roots:
        least = min(st.f_bavail * st.f_frsize for _, st in roots)
        found = [r for r, st in roots if st.f_bavail * st.f_frsize == least]  # a tie (one disk): all of them
    else:
        found = []
    if len(found) == 1:
        return f"a file under {found[0]}"
    return " or ".join(f"a file under {r}" for r in _WRITE_ROOTS) or "a file"


def _as_disk_error(exc: BaseException, code: int) -> DiskError:
    """The one line for an error met outside vtlab's write helpers: the file it names (an OSError's filename,
    safetensors' `at path`), else the write root it happened under."""
    m = _PATH_TEXT.search(str(exc))
    path = getattr(exc, "filename", None) or (m.group(1) if m else None) or _place(code)
    what, fix = _DISK_ERRNOS[code]
    if code not in _WRITE_ERRNOS:  # a denied permission may be a read's: no advice about where to write
        return DiskError(f"{path}: {what} ({errno.errorcode[code]}); check its permissions")
    return DiskError(
        f"{path}: cannot write: {what} ({errno.errorcode[code]}); {fix} or choose another location "
        "(hydra.run.dir, VTLAB_CACHE)"
    )


def gib(n_bytes: float) -> str:
    """A size for messages: 1.23 GiB."""
    return f"{n_bytes / 2**30:.2f} GiB"


# ---- classifying and printing: what the entry point shows as one line ------------------------------------------
_USER_ERRORS = (VtlabError, MissingMandatoryValue, OmegaConfBaseException, ValueError, FileNotFoundError)


def _is_signature_error(exc: BaseException) -> bool:
    """A TypeError raised while binding a target's arguments (an unknown or missing config key), not inside the
    target: its innermost frame is Hydra's call site."""
    if not isinstance(exc, TypeError) or exc.__traceback__ is None:
        return False
    tb = exc.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    return f"{Path('hydra', '_internal')}" in tb.tb_frame.f_code.co_filename


def user_error(exc: BaseException) -> BaseException | None:
    """The user-facing error behind `exc` (Hydra wraps errors raised while instantiating targets), if any. A full,
    over-quota or read-only disk or a file-size limit anywhere in the chain wins (a DiskError; pathlib's mkdir raises
    EROFS while handling its own FileNotFoundError, which would otherwise name a missing directory as the cause)."""
    for seen in exception_chain(exc):
        if isinstance(seen, DiskError):
            return seen
        if (code := disk_errno(seen)) in _WRITE_ERRNOS:
            return _as_disk_error(seen, code)
    for seen in exception_chain(exc):
        if (code := disk_errno(seen)) is not None:  # a denied permission: before FileNotFoundError's kin (OSError)
            return _as_disk_error(seen, code)
        if isinstance(seen, _USER_ERRORS) and not isinstance(seen, InstantiationException):
            return seen
        if _is_signature_error(seen):
            return seen
    return None


def visible(text: str) -> str:
    """`text` with every control or format character (an escape sequence's ESC, a bell, a right-to-left override, a
    zero-width joiner) written as its escape (`\\x1b`, `\\u202e`): what reaches a terminal is what it shows."""
    return "".join(c if unicodedata.category(c) not in ("Cc", "Cf") else ascii(c)[1:-1] for c in text)


def hidden_character(text: str) -> str | None:
    """The first control or format character in `text` as `<escape> at position <n>`, or None."""
    for i, c in enumerate(text):
        if unicodedata.category(c) in ("Cc", "Cf"):
            return f"{ascii(c)[1:-1]} at position {i + 1}"
    return None


def first_line(exc: BaseException) -> str:
    """What an exception says, its first line (omegaconf, YAML and Hydra append the node's key, type or a caret on
    later ones); its type's name when it says nothing."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def one_line(exc: BaseException, key: str | None = None) -> str:
    msg = visible(" ".join(str(exc).split()))
    if isinstance(exc, OmegaConfBaseException) and getattr(exc, "full_key", None) and exc.full_key not in msg:
        key = exc.full_key
    if isinstance(exc, DiskError):
        key = None  # the file and the disk are what to act on, not the config node that was writing
    if key and key not in msg and "(config key: " not in msg:  # a message naming its own key knows it best
        msg = f"{msg} (config key: {key})"
    return f"vtlab: error: {msg}"


_FULL_KEY = re.compile(r"\nfull_key: (\S+)")


def config_key(exc: BaseException, cfg: DictConfig | None = None) -> str | None:
    """The config key behind `exc`: the one a ConfigError names (`key`), else the one whose instantiation raised it
    (from Hydra's InstantiationException), following an interpolation to the key the user sets
    (model.doc_regularizer → regularizer.doc)."""
    key, named = None, None
    for seen in exception_chain(exc):
        if isinstance(seen, InstantiationException) and (m := _FULL_KEY.search(str(seen))):
            key = m.group(1)  # the innermost one wins: the node that actually failed
        if named is None and isinstance(seen, ConfigError) and seen.key:
            named = seen.key  # more precise than the node being instantiated (a leaf of it)
    key = named or key
    if key is None or cfg is None:
        return key
    return _interpolation_target(cfg, key) or key


def _interpolation_target(cfg: DictConfig, key: str) -> str | None:
    parent_key, _, leaf = key.rpartition(".")
    parent = OmegaConf.select(cfg, parent_key) if parent_key else cfg
    if not isinstance(parent, DictConfig) or leaf not in parent:
        return None
    raw = parent._get_node(leaf)._value()  # noqa: SLF001 - the unresolved value: "${regularizer.doc}"
    m = re.fullmatch(r"\$\{([\w.]+)\}", raw) if isinstance(raw, str) else None
    return m.group(1) if m else None
