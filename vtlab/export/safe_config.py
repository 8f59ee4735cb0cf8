"""What a config read from disk may instantiate: the objects an encoder and an evaluation collection are built from,
by exact name, and no model's own Python code.

A run directory is data: `stage=export run_dir=R` instantiates nodes of R's recorded .hydra/config.yaml (its
`model.encoder` and `eval`, vtlab/export/run_config.py), and whoever could write that file must not be able to run
code through it. Hydra resolves a `_target_` by attribute walk, so a prefix rule (`vtlab.*`) is not enough:
`vtlab.callbacks.checkpoints.torch.load` is torch.load, `vtlab.runs.directory.shutil.copyfile` is shutil.copyfile. So
a target passes only when it is one of ALLOWED_TARGETS, or a `vtlab.` name that resolves (importing vtlab modules only)
to the very same object; and `allow_remote_code` / `trust_remote_code` must be false wherever they appear.

Export is the only place vtlab instantiates a config it did not compose itself: the other readers of recorded configs
(vtlab.runs.reuse, vtlab.callbacks.resume_state, vtlab.report, vtlab.export.model_card) compare or print values and
instantiate nothing. A new one goes through `check_targets` first (tests/core/test_security.py checks the code for it).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from importlib import import_module
from types import MethodType, ModuleType
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from vtlab.core.errors import VtlabError
from vtlab.core.targets import RENAMED_TARGETS

# Exactly the objects the `model.encoder` nodes of conf/model, the `preprocess` nodes of conf/vocab they interpolate,
# and the conf/eval nodes name (tests/core/test_security.py keeps this equal to what conf/ uses). Nothing that loads a
# pickle, writes, copies or imports code: the collection loaders read text/parquet data only. The backbone is not
# here: export loads the run's saved model itself (RunConfig drops the recorded model.encoder.backbone).
ALLOWED_TARGETS: frozenset[str] = frozenset(
    {
        # encoders
        "vtlab.models.encoder.SpladeEncoder.from_backbone",
        "vtlab.models.inference_free.InferenceFreeEncoder.from_backbone",
        "vtlab.models.bm25.BM25Encoder",
        "vtlab.vocab.targets.Normalizer",
        "vtlab.data.boolq.probe_texts",  # the texts precision=auto checks int8 on
        # evaluations and their collection loaders
        "vtlab.evaluation.retrieval.RetrievalEvaluation",
        "vtlab.evaluation.suite.EvaluationSuite",
        "vtlab.data.collections.load_beir",
        "vtlab.data.collections.load_hf_beir",
        "vtlab.data.collections.load_mteb",
        "vtlab.data.collections.subsampled",
        "vtlab.data.splits.held_out",
        "vtlab.data.boolq.boolq_collection",
        "vtlab.data.clean.boolq_clean_collection",
        "vtlab.data.olmo_eval.squad_collection",
        "vtlab.data.olmo_eval.sciriff_collection",
        "vtlab.data.olmo_eval.qasper_collection",
    }
)

# Keys whose true value makes a Backbone import a model directory's own Python: never from a file on disk.
REMOTE_CODE_KEYS: tuple[str, ...] = ("allow_remote_code", "trust_remote_code")

_ALLOWED_HINT = (
    "a config read from a run directory may only name an encoder, an evaluation or a collection loader "
    "(vtlab.export.safe_config.ALLOWED_TARGETS)"
)


def locate(name: str) -> Any:
    """The object the dotted `name` names, walked as Hydra walks it (getattr first, then a submodule import), but
    importing vtlab modules only: the walk leaves vtlab only through getattr (`vtlab.callbacks.checkpoints.torch` is
    the torch module already imported), and never imports anything from there. LookupError when it names nothing."""
    parts = name.split(".")
    if parts[0] != "vtlab" or not all(p.isidentifier() for p in parts):
        raise LookupError(name)
    obj: Any = import_module("vtlab")
    for i, part in enumerate(parts[1:], start=1):
        try:
            obj = getattr(obj, part)
            continue
        except AttributeError:
            pass
        # a submodule not imported yet: only of the vtlab package the walk stands on (its name is the prefix so far)
        if not (isinstance(obj, ModuleType) and hasattr(obj, "__path__") and obj.__name__ == ".".join(parts[:i])):
            raise LookupError(name)
        try:
            obj = import_module(".".join(parts[: i + 1]))
        except ImportError as exc:
            raise LookupError(name) from exc
    return obj


def _same(a: Any, b: Any) -> bool:
    # a classmethod is a new bound method at each access: the same function bound to the same class is the same object
    if isinstance(a, MethodType) and isinstance(b, MethodType):
        return a.__func__ is b.__func__ and a.__self__ is b.__self__
    return a is b


def qualified_name(obj: Any) -> str:
    """`module.qualname` of a function, class or bound classmethod (what a target really is, for messages)."""
    owner = obj.__self__ if isinstance(obj, MethodType) else None
    if owner is not None:
        return (
            f"{getattr(owner, '__module__', '?')}.{getattr(owner, '__qualname__', type(owner).__name__)}.{obj.__name__}"
        )
    if isinstance(obj, ModuleType):
        return f"the module {obj.__name__}"
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', type(obj).__name__)}"


@functools.cache
def allowed_objects() -> tuple[Any, ...]:
    """ALLOWED_TARGETS as objects (vtlab modules imported on first use)."""
    return tuple(locate(name) for name in sorted(ALLOWED_TARGETS))


def target_problem(target: Any) -> str | None:
    """Why `target` (a `_target_` value) may not be instantiated from a file, or None when it may."""
    if not isinstance(target, str):
        return f"is not instantiated: it is not a dotted name, and {_ALLOWED_HINT}"
    if target in ALLOWED_TARGETS:
        return None
    if not target.startswith("vtlab."):  # never imported, whatever it is
        return f"is not instantiated: {_ALLOWED_HINT}"
    try:
        obj = locate(target)
    except LookupError:
        return f"is not instantiated: it names nothing in vtlab, and {_ALLOWED_HINT}"
    if any(_same(obj, allowed) for allowed in allowed_objects()):
        return None
    real = qualified_name(obj)
    return f"is not instantiated: {'' if real == target else f'it is {real}, and '}{_ALLOWED_HINT}"


def _dicts(value: Any, key: str = "") -> Iterator[tuple[str, dict[Any, Any]]]:
    """(key prefix, dict) of every dict under `value`, lists and `_args_` included, outer before inner."""
    if isinstance(value, dict):
        prefix = key + "." if key else ""
        yield prefix, value
        for k, v in value.items():
            yield from _dicts(v, f"{prefix}{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _dicts(v, f"{key}[{i}]")


def check_targets(node: Any, where: str) -> None:
    """VtlabError (one line naming `where` and the key) for a true allow_remote_code / trust_remote_code anywhere
    under `node` (named first: a nested Backbone asking for code is refused as such), else for the first `_target_`
    that target_problem refuses. Checks the node as given: RunConfig.node calls it on the raw and the resolved form,
    before anything is instantiated."""
    tree = OmegaConf.to_container(node, resolve=False) if OmegaConf.is_config(node) else node
    for prefix, d in _dicts(tree):
        for flag in REMOTE_CODE_KEYS:
            if d.get(flag):  # any truthy value: Backbone takes bool(...) of it
                raise VtlabError(
                    f"{where}: {prefix}{flag}={d[flag]!r} is refused (expected false): a config read "
                    "from a run directory never makes vtlab import a model's own Python code"
                )
    for prefix, d in _dicts(tree):
        if "_target_" in d:
            problem = target_problem(d["_target_"])
            if problem is not None:
                raise VtlabError(f"{where}: {prefix}_target_={d['_target_']!r} {problem}")


def _renamed(node: Any, key: Any) -> str | None:
    """The current name of node[key] when that is a plain (not interpolated) old target name, else None."""
    if isinstance(node, DictConfig):
        if OmegaConf.is_interpolation(node, key):
            return None
        value = node._get_node(key)._value()  # the raw value, without resolving anything
    else:
        value = node[key]
    return RENAMED_TARGETS.get(value) if isinstance(value, str) else None


def rename_targets(node: Any) -> int:
    """Replace, in place, every `_target_` under `node` (OmegaConf or plain containers) that RENAMED_TARGETS lists by
    its current name; the number replaced."""
    count = 0
    if isinstance(node, (dict, DictConfig)):
        for k in list(node.keys()):
            new = _renamed(node, k) if k == "_target_" else None
            if new is not None:
                node[k] = new
                count += 1
            elif isinstance(node, dict) or not OmegaConf.is_interpolation(node, k):
                child = node._get_node(k) if isinstance(node, DictConfig) else node[k]
                count += rename_targets(child)
    elif isinstance(node, (list, ListConfig)):
        for i in range(len(node)):
            child = node._get_node(i) if isinstance(node, ListConfig) else node[i]
            count += rename_targets(child)
    return count
