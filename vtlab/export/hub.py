"""The Hugging Face Hub side of an export: hub ids of the base model and datasets a run names (for the model card's
front matter), and `export.push_to_hub` (refused before any work when the Hub cannot be reached)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from vtlab.core import hub
from vtlab.core.assets import looks_like_path
from vtlab.core.errors import VtlabError
from vtlab.data.hf import MSMARCO, OPENSEARCH_REPO, ST_REPO

log = logging.getLogger("vtlab")

# Loaders that read a hub dataset, by `_target_`: the dataset ids they read (given the evaluation's `name`, which
# RetrievalEvaluation passes to them). Loaders not listed read local files or offline assets: no hub id.
HUB_LOADERS: dict[str, Callable[[str | None], tuple[str, ...]]] = {
    "vtlab.data.collections.load_hf_beir": lambda name: (f"BeIR/{name}",) if name else (),
    "vtlab.data.collections.load_mteb": lambda name: (f"mteb/{name}",) if name else (),
    "vtlab.data.hf.st_msmarco_hard_negatives": lambda _: (ST_REPO, MSMARCO),
    "vtlab.data.hf.st_msmarco_ce_pool": lambda _: (ST_REPO, MSMARCO),
    "vtlab.data.hf.opensearch_msmarco_hard_negatives": lambda _: (OPENSEARCH_REPO,),
}


def hub_model_id(name_or_path: Any) -> str | None:
    """A backbone's `name_or_path` when it is a hub id; None for an offline asset (`asset:NAME`), a local path, or
    nothing (tiny test backbones)."""
    if not isinstance(name_or_path, str) or not name_or_path or name_or_path.startswith("asset:"):
        return None
    if looks_like_path(name_or_path) or os.path.exists(os.path.expanduser(name_or_path)):
        return None
    return name_or_path


def hub_datasets(node: Any, name: str | None = None) -> dict[str, tuple[str, ...]]:
    """Evaluation / data name → hub dataset ids, for every hub loader under a plain config `node` (an `eval` or
    `data` node as a container). The name is the nearest enclosing `name` (a suite member's, an evaluation's)."""
    found: dict[str, tuple[str, ...]] = {}
    if isinstance(node, Mapping):
        name = str(node["name"]) if isinstance(node.get("name"), str) else name
        ids = HUB_LOADERS.get(str(node.get("_target_")), lambda _: ())(name)
        if ids:
            found[name or str(node["_target_"])] = ids
        for value in node.values():
            found.update(hub_datasets(value, name))
    elif isinstance(node, list):
        for value in node:
            found.update(hub_datasets(value, name))
    return found


def _offline_reason() -> str | None:
    """Why the Hub is not reachable from here, or None when it is."""
    if hub.offline():
        var = next((v for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE") if os.environ.get(v)), "HF_HUB_OFFLINE")
        return f"{var}={os.environ.get(var, '1')}"
    if not hub.reachable():
        from huggingface_hub import constants

        return f"no connection to {constants.ENDPOINT}"
    return None


def check_push(repo: str, out: Path) -> None:
    """VtlabError (one line) when `export.push_to_hub=repo` cannot work: a malformed repo id, or no Hub (offline
    flag, or the endpoint unreachable). Called before the export does any work."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo)
    except HFValidationError as exc:
        raise VtlabError(
            f"export.push_to_hub={repo}: not a Hub repo id ({str(exc).splitlines()[0]}); expected <user or org>/<name>"
        ) from None
    reason = _offline_reason()
    if reason is not None:
        raise VtlabError(
            f"export.push_to_hub={repo}: the Hugging Face Hub is not reachable ({reason}); export "
            f"without it and upload later with `hf upload {repo} {out}`"
        )


def push_to_hub(out: Path, repo: str, private: bool) -> str:
    """Create (if needed) the model repo `repo` and upload the directory `out` to it; the repo's URL. The token comes
    from HF_TOKEN or `hf auth login`."""
    from huggingface_hub import HfApi

    api = HfApi()
    try:
        url = api.create_repo(repo, private=private, exist_ok=True, repo_type="model")
        api.upload_folder(
            repo_id=repo,
            folder_path=str(out),
            repo_type="model",
            commit_message="Upload sparse encoder exported by vtlab",
        )
    except Exception as exc:  # noqa: BLE001 - the hub client raises many types; all mean "not uploaded"
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise VtlabError(
            f"export.push_to_hub={repo}: upload failed ({type(exc).__name__}: {first}); the export is "
            f"complete in {out}: upload it with `hf upload {repo} {out}`"
        ) from None
    log.info("export: uploaded %s to %s", out, url)
    return str(url)
