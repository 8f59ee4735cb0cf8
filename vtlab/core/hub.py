"""The Hugging Face hub in one place: the one offline check (`offline`), one bounded reachability probe (`reachable`),
and the one loader of hub datasets and dataset files (`load_dataset`, `dataset_file`). Model loaders (backbones,
the inference-free IDF table, export) ask `offline` and `reachable` too, and `refuse_unavailable` refuses a run whose
config names a hub model this machine cannot have (`hub_models`) before any data is prepared.

Offline (a flag set, or the endpoint unreachable) the loaders use only the local cache: a cached copy still loads,
an uncached one fails at once, with no retries. A failure is `HubUnavailable`, which callers reword into their own
one-line AssetError naming the dataset.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Iterator
from functools import lru_cache
from typing import Any
from urllib.parse import urlparse

from vtlab.core.assets import looks_like_path
from vtlab.core.errors import AssetError, exception_chain

# huggingface_hub.constants.ENV_VARS_TRUE_VALUES: a flag is on when its value, upper-cased, is one of these
TRUE_VALUES = frozenset({"1", "ON", "YES", "TRUE"})
HUB_FLAGS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")  # huggingface_hub's (and transformers') offline flags
DATASETS_FLAG = "HF_DATASETS_OFFLINE"  # the `datasets` library's own
_PROBE_TIMEOUT_S = 3.0


def is_true(value: str | None) -> bool:
    """An environment flag's value read as huggingface_hub reads it: 1, true, yes or on, in any case."""
    return value is not None and value.upper() in TRUE_VALUES


def offline(*, datasets: bool = False) -> bool:
    """The one offline check: HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE is on (`is_true`), or was when huggingface_hub
    was imported (it reads the environment once; a flag set later in the process counts here too). `datasets=True`
    (a hub dataset or dataset file) counts HF_DATASETS_OFFLINE as well."""
    from huggingface_hub import constants

    names = (*HUB_FLAGS, DATASETS_FLAG) if datasets else HUB_FLAGS
    return bool(constants.HF_HUB_OFFLINE) or any(is_true(os.environ.get(name)) for name in names)


@lru_cache(maxsize=1)
def reachable() -> bool:
    """One quick TCP probe of the hub endpoint: without it an offline machine spends ~25 s per file in hub retries."""
    if any(os.environ.get(k) for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True  # behind a proxy a direct probe says nothing; let the hub client decide
    from huggingface_hub import constants

    url = urlparse(constants.ENDPOINT)
    host, port = url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)
    ok: list[bool] = []

    def probe() -> None:
        try:
            socket.create_connection((host, port), timeout=_PROBE_TIMEOUT_S).close()
            ok.append(True)
        except OSError:
            pass

    # A thread bounds the DNS lookup too, which socket timeouts do not cover.
    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t.join(_PROBE_TIMEOUT_S + 1.0)
    return bool(ok)


def is_connection_error(exc: BaseException) -> bool:
    """Whether `exc` (or an exception it was raised from) means "no connection to the hub"."""
    for seen in exception_chain(exc):
        if isinstance(seen, (ConnectionError, TimeoutError, socket.gaierror)) or "ConnectError" in type(seen).__name__:
            return True
        if type(seen).__name__ in {"LocalEntryNotFoundError", "OfflineModeIsEnabled"}:
            return True
    return False


class HubUnavailable(AssetError):
    """A hub dataset or dataset file that could not be had. `flagged`: an offline flag is on; `offline`: flagged or
    the endpoint unreachable (only the local cache was tried); `reason`: "ErrorType: first line of its message"."""

    def __init__(self, repo: str, *, flagged: bool, offline: bool, reason: str) -> None:
        self.repo, self.flagged, self.offline, self.reason = repo, flagged, offline, reason
        super().__init__(f"cannot load '{repo}' from the Hugging Face hub: {reason}")


def _reason(exc: BaseException) -> str:
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
    return f"{type(exc).__name__}: {first}"


def _mode() -> tuple[bool, bool]:
    """(flagged, offline) for a dataset load: the probe runs only when no flag already says offline."""
    flagged = offline(datasets=True)
    return flagged, flagged or not reachable()


@contextlib.contextmanager
def _cache_only() -> Iterator[None]:
    """Make `datasets` use only its local cache. It reads the offline flag at import time, so an unreachable hub
    without the env flag would otherwise cost ~25 s of retries per file before failing."""
    import datasets.config
    import huggingface_hub.constants as hub_constants

    saved = datasets.config.HF_HUB_OFFLINE, hub_constants.HF_HUB_OFFLINE
    datasets.config.HF_HUB_OFFLINE = hub_constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        datasets.config.HF_HUB_OFFLINE, hub_constants.HF_HUB_OFFLINE = saved


def load_dataset(repo: str, config: str | None = None, split: str = "train", streaming: bool = False) -> Any:
    """`datasets.load_dataset(repo, config, split=..., streaming=...)`, from the local cache only when offline;
    HubUnavailable when it cannot be had."""
    import datasets

    flagged, is_offline = _mode()
    try:
        with _cache_only() if is_offline else contextlib.nullcontext():
            return datasets.load_dataset(repo, config, split=split, streaming=streaming)
    except Exception as e:  # noqa: BLE001 - datasets raises many types; all mean "not available here"
        raise HubUnavailable(repo, flagged=flagged, offline=is_offline, reason=_reason(e)) from None


def dataset_file(repo: str, filename: str) -> str:
    """The local path of `filename` in the hub dataset `repo` (`hf_hub_download`), from the local cache only when
    offline; HubUnavailable when it cannot be had."""
    import huggingface_hub

    flagged, is_offline = _mode()
    try:
        return huggingface_hub.hf_hub_download(
            repo_id=repo, filename=filename, repo_type="dataset", local_files_only=is_offline
        )
    except Exception as e:  # noqa: BLE001 - the hub raises many types; all mean "not available here"
        raise HubUnavailable(repo, flagged=flagged, offline=is_offline, reason=_reason(e)) from None


# the config keys that name a model or tokenizer to load (a backbone's, a target vocabulary's, a teacher's backbone)
MODEL_KEYS = ("name_or_path", "tokenizer", "embedding_model")


def must_download(field: str, source: str) -> str:
    """The one line for a hub model this machine cannot have: offline and not in the local Hugging Face cache."""
    return (
        f"{field}={source!r} must be downloaded from the Hugging Face hub, which is unreachable (offline). "
        f"Run once with network or point {field} at a local directory."
    )


def _hub_models(node: Any, where: str) -> Iterator[tuple[str, str, str | None]]:
    """(config key, hub id, revision) of every model key in a plain config tree whose value is a hub id: not an
    offline asset ("asset:NAME"), not an existing local path, not a path (a mistyped one fails with its own line)."""
    if isinstance(node, dict):
        for key, value in node.items():
            field = f"{where}.{key}" if where else str(key)
            if key in MODEL_KEYS and isinstance(value, str):
                local = os.path.exists(os.path.expanduser(value))
                if value and not value.startswith("asset:") and not local and not looks_like_path(value):
                    revision = node.get("revision")
                    yield field, value, revision if isinstance(revision, str) else None
            else:
                yield from _hub_models(value, field)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _hub_models(value, f"{where}[{i}]")


def cached(repo: str, revision: str | None = None) -> bool:
    """Whether the local Hugging Face cache holds a snapshot of the model `repo` at `revision` (its files are checked
    when it loads)."""
    import huggingface_hub

    try:
        huggingface_hub.snapshot_download(repo_id=repo, revision=revision, local_files_only=True)
    except Exception:  # noqa: BLE001 - LocalEntryNotFoundError and kin: not in the cache
        return False
    return True


def hub_models(cfg: Any) -> dict[tuple[str, str | None], str]:
    """(hub id, revision) → the first config key naming it, for every hub model the run's config names (MODEL_KEYS
    anywhere in it). A node that does not resolve here is left out: it fails where its stage reads it, with its own
    line."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    models: dict[tuple[str, str | None], str] = {}
    for key in cfg:
        try:
            node = cfg[key]
            if not OmegaConf.is_config(node):
                continue
            tree = OmegaConf.to_container(node, resolve=True, throw_on_missing=False)
        except OmegaConfBaseException:
            continue
        for field, repo, revision in _hub_models(tree, str(key)):
            models.setdefault((repo, revision), field)
    return models


def refuse_unavailable(models: dict[tuple[str, str | None], str]) -> None:
    """AssetError (the loaders' own line, `must_download`) for the first of `models` (hub_models) that cannot be had:
    offline and not in the local cache. Before any data is built, so an offline run does not spend minutes preparing
    data for weights it cannot load. No probe when there is no hub model."""
    if not models or not (offline() or not reachable()):
        return
    for (repo, revision), field in models.items():
        if not cached(repo, revision):
            raise AssetError(must_download(field, repo))


def refuse_missing_hub_models(cfg: Any) -> None:
    """refuse_unavailable of the hub models `cfg` names."""
    refuse_unavailable(hub_models(cfg))
