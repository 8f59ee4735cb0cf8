"""What describes an exported model: a trained run's recorded config (<run_dir>/.hydra/config.yaml), read as data.

`stage=export run_dir=R` encodes R's own eval collection with R's own encoder settings: each node it needs (`eval`,
`model.encoder`) is R's, with the export command line's overrides under that key applied on top (`eval.path=...`,
`model.encoder.precision=fp32`); a command line that chooses the node itself (`eval=beir`, `~eval`) replaces it with
the command's own. Every node taken from R is checked (vtlab/export/safe_config.py: exact allowed targets, no remote
code), raw and resolved, and all the nodes export may instantiate are checked before any one of them is returned.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from vtlab.core.errors import VtlabError, first_line
from vtlab.core.records import RecordError, load_record
from vtlab.data.collections import Collection
from vtlab.export.safe_config import check_targets, rename_targets

log = logging.getLogger("vtlab")

# The nodes of a recorded config that export instantiates, each with the keys export supplies itself: those are dropped
# from the recorded node, never resolved, checked or instantiated (model.encoder's backbone is the run's saved model/,
# which encoder_from_run loads; the recorded one may name remote code, a hub id, an MLM recipe).
EXPORT_NODES: dict[str, tuple[str, ...]] = {"model.encoder": ("backbone",), "eval": ()}

_ABSENT = object()


def override_keys(overrides: Sequence[str]) -> list[str]:
    """The config keys / group names a Hydra command line sets (`eval=beir` → eval, `+eval.x.y=1` → eval.x.y)."""
    return [o.key_or_group for o in OverridesParser.create().parse_overrides(list(overrides))]


class RunConfig:
    """The config describing the exported model: `run_dir`'s recorded one when there is one, else `command` (the
    export's own config). `overrides`: the export command line (None: none recorded, nothing overrides the run)."""

    def __init__(
        self, command: DictConfig, run_dir: Path | None = None, overrides: Sequence[str] | None = None
    ) -> None:
        self.command = command
        path = None if run_dir is None else Path(run_dir) / ".hydra" / "config.yaml"
        self.path = path if path is not None and path.is_file() else None
        self.recorded: DictConfig | None = _load(self.path) if self.path is not None else None
        self.overrides = list(overrides or [])
        self._checked: dict[str, tuple[Any, str]] = {}

    @property
    def config(self) -> DictConfig:
        return self.recorded if self.recorded is not None else self.command

    def node(self, key: str) -> tuple[Any, str]:
        """(the node at `key`, where it comes from for messages). A recorded node has the command line's overrides
        under `key` applied, the keys export supplies itself dropped (EXPORT_NODES), and its targets checked before
        and after resolving its interpolations in the run's config (they may point elsewhere in that file). The other
        nodes export may instantiate are checked first too: a refused one stops the export before anything is built."""
        for other in EXPORT_NODES:
            if other != key:
                self._read(other, strict=False)
        return self._read(key, strict=True)

    def _read(self, key: str, strict: bool) -> tuple[Any, str]:
        """node(key), checked once. Not `strict`: a node that does not resolve here is left for when it is asked for
        (an export of the model alone never needs the run's eval); its raw form is checked all the same, and what
        does not resolve cannot be instantiated either."""
        if key in self._checked:
            return self._checked[key]
        keys = override_keys(self.overrides)
        if self.recorded is None or key in keys:
            return OmegaConf.select(self.command, key), f"this command's {key}"
        applied = [k for k in keys if k.startswith(key + ".")]
        dropped = [f"{key}.{k}" for k in EXPORT_NODES.get(key, ())]
        merged = self.recorded
        try:  # a node (or a parent of it) that is an interpolation which does not resolve: named, not a traceback
            if applied or dropped:
                merged = copy.deepcopy(self.recorded)  # interpolations in the node still resolve in the run's config
                for k in applied:
                    _set(merged, k, OmegaConf.select(self.command, k, default=_ABSENT))
                for k in dropped:
                    _set(merged, k, _ABSENT)
            node = OmegaConf.select(merged, key)
        except (OmegaConfBaseException, RecursionError) as e:
            if strict:
                raise VtlabError(f"{self.path} ({key}): does not resolve ({first_line(e)})") from e
            return None, f"{self.path} ({key})"
        if node is not None and rename_targets(copy.deepcopy(node)):  # a run recorded before a target was renamed
            if merged is self.recorded:
                merged = copy.deepcopy(self.recorded)  # the node's interpolations still resolve in the run's config
            node = OmegaConf.select(merged, key)
            rename_targets(node)
        where = f"{self.path} ({key}" + (f", with {', '.join(applied)} from the command line" if applied else "")
        if node is not None:
            check_targets(node, f"{where})")
            try:
                resolved = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node
            except Exception as e:  # noqa: BLE001 - omegaconf raises several types; when strict, named where it is
                if strict:
                    raise VtlabError(f"{where}): does not resolve ({first_line(e)})") from e
                return node, f"{where})"
            check_targets(resolved, f"{where}, resolved)")
        self._checked[key] = node, f"{where})"
        return self._checked[key]

    def value(self, key: str) -> Any:
        """The resolved value at `key` of the describing config; None when absent or unresolvable here (e.g. a
        `${hydra:...}` interpolation outside that run)."""
        try:
            value = OmegaConf.select(self.config, key, throw_on_resolution_failure=True)
        except Exception as exc:  # noqa: BLE001 - omegaconf raises several types; any means "not known here"
            log.debug("export: %s of %s not resolved (%s)", key, self.path or "the command", exc)
            return None
        return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def _load(path: Path) -> DictConfig:
    """A recorded config as data (YAML tags that would build objects are refused by the safe loader); VtlabError
    naming the file when it is no mapping of config keys."""
    try:
        loaded = load_record(path)
    # OSError: unreadable, or a YAML scalar (omegaconf's "Invalid loaded object type"); Recursion: `&a [*a]`
    except (yaml.YAMLError, UnicodeDecodeError, OmegaConfBaseException, RecursionError, OSError, RecordError) as e:
        raise VtlabError(
            f"{path}: not a readable run config ({type(e).__name__}: {first_line(e)}): expected the "
            ".hydra/config.yaml a vtlab run writes"
        ) from None
    if not isinstance(loaded, DictConfig):
        raise VtlabError(
            f"{path}: not a run config (a YAML {type(loaded).__name__}, not a mapping of config keys): expected the "
            ".hydra/config.yaml a vtlab run writes"
        )
    return loaded


def _set(config: DictConfig, key: str, value: Any) -> None:
    """config[key] = value (created if needed); `_ABSENT` deletes it (a `~key` override)."""
    if value is not _ABSENT:
        OmegaConf.update(config, key, value, merge=False, force_add=True)
        return
    parent_key, _, leaf = key.rpartition(".")
    parent = OmegaConf.select(config, parent_key) if parent_key else config
    if isinstance(parent, DictConfig) and leaf in parent:
        del parent[leaf]


class EvalSource:
    """The eval collection an export encodes (documents, queries, an untrained inference-free model's IDF): the
    `eval` node of `run` (read only when needed: an export of the model alone never touches it), or with `member`
    (export.vectors.collection) that member of an evaluation suite. Instantiated once, loaded once."""

    def __init__(self, run: RunConfig, member: str | None) -> None:
        self.run, self.member = run, member
        self._node: tuple[Any, str] | None = None
        self._evaluation: Any = None
        self._collection: Collection | None = None

    def _read(self) -> tuple[Any, str]:
        if self._node is None:
            self._node = self.run.node("eval")
        return self._node

    @property
    def origin(self) -> str:
        """Whose config names the collection, e.g. `<run_dir>/.hydra/config.yaml (eval)`."""
        return self._read()[1]

    def evaluation(self, what: str, fix: str) -> Any:
        """The one evaluation to read (not loaded yet); a one-line error when there is none or a suite is unpicked."""
        if self._evaluation is None:
            node, origin = self._read()
            evaluation = instantiate(node) if node is not None else None
            if evaluation is None:
                raise VtlabError(f"{what} comes from the eval collection, but {origin} is none (eval=none); set {fix}")
            members = dict(evaluation.items()) if not hasattr(evaluation, "collection") else None
            if members is not None:  # an evaluation suite (eval=testbed, eval=beir13)
                if self.member is None or self.member not in members:
                    given = "" if self.member is None else f"export.vectors.collection={self.member} is not one; "
                    raise VtlabError(
                        f"{what} comes from the eval collection, but {origin} is an evaluation "
                        f"suite ({', '.join(members)}): {given}pick one with "
                        f"export.vectors.collection=<name>, or set {fix}"
                    )
                evaluation = members[self.member]
            elif self.member is not None:
                raise VtlabError(
                    f"export.vectors.collection={self.member}: {origin} is one collection, not an "
                    "evaluation suite (set export.vectors.collection=null)"
                )
            self._evaluation = evaluation
        return self._evaluation

    def collection(self, what: str, fix: str) -> Collection:
        if self._collection is None:
            self._collection = self.evaluation(what, fix).collection
        return self._collection

    @property
    def name(self) -> str:
        if self._collection is None:
            return self.member or "the eval collection"
        return self.member or getattr(self._evaluation, "name", None) or self._collection.name
