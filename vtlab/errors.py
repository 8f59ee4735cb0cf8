"""One exception type for user-facing errors: the entry point prints its message as one line and exits 2."""
from __future__ import annotations

import errno
import os
import re
from pathlib import Path

from hydra.errors import InstantiationException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException


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


class NonFiniteLossError(VtlabError, FloatingPointError):
    """Training produced a NaN/inf loss: the message names the step, the loss parts and the last finite loss.
    Still a FloatingPointError, so code that catches numeric failures keeps working."""


class DiskError(VtlabError):
    """A write failed for lack of space or permission, or there is not enough free space to start: the message names
    the path (and the sizes)."""


# errno -> (what happened, what to do); the errors a write meets on a full, over-quota or read-only disk
_DISK_ERRNOS = {
    errno.ENOSPC: ("no space left on the device", "free some space there"),
    errno.EDQUOT: ("disk quota exceeded", "free some space there"),
    errno.EROFS: ("the file system is read-only", "make it writable"),
    errno.EACCES: ("permission denied", "make it writable"),
    errno.EPERM: ("operation not permitted", "make it writable"),
}


def disk_error(path: str | os.PathLike[str], exc: BaseException) -> DiskError | None:
    """A DiskError naming `path` when `exc` (or an exception it arose from: torch.save reports a failed write as a
    RuntimeError raised while handling the OSError) is a full disk, an exceeded quota, a read-only file system or a
    denied permission; None for anything else."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, DiskError):
            return seen
        if isinstance(seen, OSError) and seen.errno in _DISK_ERRNOS:
            what, fix = _DISK_ERRNOS[seen.errno]
            return DiskError(f"{path}: cannot write: {what} ({errno.errorcode[seen.errno]}); {fix} or choose another "
                             "location (hydra.run.dir, VTLAB_CACHE); nothing half-written was left behind")
        seen = seen.__cause__ or seen.__context__
    return None


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
    """The user-facing error behind `exc` (Hydra wraps errors raised while instantiating targets), if any."""
    seen = exc
    while seen is not None:
        if isinstance(seen, _USER_ERRORS) and not isinstance(seen, InstantiationException):
            return seen
        if _is_signature_error(seen):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def one_line(exc: BaseException, key: str | None = None) -> str:
    msg = " ".join(str(exc).split())
    if isinstance(exc, OmegaConfBaseException) and getattr(exc, "full_key", None) and exc.full_key not in msg:
        key = exc.full_key
    if key and key not in msg and "(config key: " not in msg:  # a message naming its own key knows it best
        msg = f"{msg} (config key: {key})"
    return f"vtlab: error: {msg}"


_FULL_KEY = re.compile(r"\nfull_key: (\S+)")


def config_key(exc: BaseException, cfg: DictConfig | None = None) -> str | None:
    """The config key behind `exc`: the one a ConfigError names (`key`), else the one whose instantiation raised it
    (from Hydra's InstantiationException), following an interpolation to the key the user sets
    (model.doc_regularizer → regularizer.doc)."""
    seen, key, named = exc, None, None
    while seen is not None:
        if isinstance(seen, InstantiationException) and (m := _FULL_KEY.search(str(seen))):
            key = m.group(1)  # the innermost one wins: the node that actually failed
        if named is None and isinstance(seen, ConfigError) and seen.key:
            named = seen.key  # more precise than the node being instantiated (a leaf of it)
        seen = seen.__cause__ or seen.__context__
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
