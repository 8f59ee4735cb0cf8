"""Run the configured stages in order, and turn user errors into one clear line + a non-zero exit."""
from __future__ import annotations

import logging
import sys
from typing import Any

from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig
from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

from vtlab.errors import VtlabError

log = logging.getLogger("vtlab")

# Exceptions that mean "the user's input is wrong": reported as one line, never a traceback.
_USER_ERRORS = (VtlabError, MissingMandatoryValue, OmegaConfBaseException, ValueError, FileNotFoundError)


def run(cfg: DictConfig) -> dict[str, Any]:
    """Each stage is `fn(cfg, state) -> state`; `state` carries artifacts (model, paths, metrics) to the next."""
    state: dict[str, Any] = {}
    for step in instantiate(cfg.stage.steps):
        state = step(cfg, state)
    return state


def user_error(exc: BaseException) -> BaseException | None:
    """The user-facing error behind `exc` (Hydra wraps errors raised while instantiating targets), if any."""
    seen = exc
    while seen is not None:
        if isinstance(seen, _USER_ERRORS) and not isinstance(seen, InstantiationException):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def one_line(exc: BaseException) -> str:
    msg = " ".join(str(exc).split())
    if isinstance(exc, OmegaConfBaseException) and getattr(exc, "full_key", None) and exc.full_key not in msg:
        msg = f"{msg} (config key: {exc.full_key})"
    return f"vtlab: error: {msg}"


def run_or_exit(cfg: DictConfig) -> dict[str, Any]:
    try:
        return run(cfg)
    except Exception as exc:  # noqa: BLE001 - classify, then re-raise what is not a user error
        err = user_error(exc)
        if err is None:
            raise
        print(one_line(err), file=sys.stderr)
        sys.exit(2)
