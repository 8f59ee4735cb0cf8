"""Cache keys from settings: the one way a cached stage names what its entry depends on.

`settings_key(kind, version, **parts)` hashes the stage's kind, its version (bumped when the stage computes differently
with the same settings) and its parts written as plain JSON data by `key_data`. `key_data` reads an object by what it
declares its settings to be, never by `repr()` (a repr leaves out whatever its class forgets to show, and two settings
would share one entry):

- plain data (None, bool, int, float, str; lists, tuples and mappings of them, OmegaConf containers included) as it is;
- `key_settings()`: the object's own account of its settings (a plain class, e.g. vtlab.apc.calibration.APC);
- `cache_key()`: the object's own key (backbones, vocabularies: they name what they load, not how they are labelled);
- a dataclass by its fields; the class itself must be a dataclass (an undecorated subclass of one would show only its
  base's fields) and hold no attribute that is not a field;
- a `functools.partial` (Hydra's `_partial_: true`) by its callable and arguments;
- a module-level function or class by its qualified name.

Anything else raises CacheKeyError naming where it sits: an object that does not expose its settings fails, loudly,
rather than share a cache entry. A class (or a module, for a recipe of plain settings) names its settings that do not
change an entry (a chunk size, a label) in `KEY_NEUTRAL`, beside their definition: its dataclass fields and a partial's
arguments of those names stay out of keys, and tests/core/test_cache_keys_cover.py, which checks that every other
setting of every config option changes its key, leaves them unchanged.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
from collections.abc import Mapping, Sequence
from typing import Any

from vtlab.core.atomic import stable_hash
from vtlab.core.errors import VtlabError

FORMAT = 1  # how key_data writes values: bump when that changes, so that no two formats share a key


class CacheKeyError(VtlabError, TypeError):
    """A value a cache key cannot read as settings (no plain data, no declared settings)."""


def key_neutral(target: Any) -> frozenset[str]:
    """The setting names `target` (a class or module, an instance, a classmethod bound to a class, or a function)
    declares key-neutral in its `KEY_NEUTRAL`."""
    owner = getattr(target, "__self__", target)
    keep = inspect.isclass(owner) or inspect.ismodule(owner) or inspect.isfunction(owner)
    owner = owner if keep else type(owner)
    return frozenset(getattr(owner, "KEY_NEUTRAL", ()))


def settings_key(kind: str, version: str | int, /, **parts: Any) -> str:
    """The cache key (16 hex digits) of a `kind` entry (e.g. "transfer") at `version`, computed from `parts`."""
    data = {"kind": kind, "version": version, "format": FORMAT, "parts": key_data(parts, kind)}
    return stable_hash(json.dumps(data, sort_keys=True))


def tokenizer_key(tokenizer: Any) -> str:
    """A tokenizer by what it does to text: a fast tokenizer's serialized state (vocabulary, normalizer,
    pre-tokenizer; not its truncation and padding, which encoding sets, so that a used tokenizer keeps its key), else
    its class and vocabulary."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        state = json.loads(backend.to_str())
        state.pop("truncation", None), state.pop("padding", None)
        return stable_hash(json.dumps(state, sort_keys=True), 40)
    return stable_hash(type(tokenizer).__name__ + json.dumps(tokenizer.get_vocab(), sort_keys=True), 40)


def key_data(value: Any, where: str = "value") -> Any:
    """`value` as plain JSON data of its settings (module docstring); `where` names it in errors."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Mapping):
        return {str(k): key_data(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray)):
        return [key_data(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, functools.partial):
        neutral = key_neutral(value.func)
        return {
            "callable": key_data(value.func, f"{where}.func"),
            "args": key_data(value.args, f"{where}.args"),
            "keywords": {k: key_data(v, f"{where}.{k}") for k, v in value.keywords.items() if k not in neutral},
        }
    if inspect.isclass(value) or inspect.isfunction(value) or inspect.ismethod(value) or inspect.isbuiltin(value):
        return _qualified_name(value, where)
    if callable(getattr(value, "key_settings", None)):
        return {"type": _qualified_name(type(value), where), "settings": key_data(value.key_settings(), where)}
    if callable(getattr(value, "cache_key", None)):
        return value.cache_key()
    if "__dataclass_fields__" in vars(type(value)):
        return {"type": _qualified_name(type(value), where), "fields": _fields(value, where)}
    kind = f"{type(value).__module__}.{type(value).__qualname__}"
    raise CacheKeyError(
        f"{where}: a {kind} cannot be read as settings for a cache key: make its class a @dataclass (its own "
        "decorator, not only its base's) or give it key_settings() or cache_key()"
    )


def _fields(value: Any, where: str) -> dict[str, Any]:
    """A dataclass instance's fields less its KEY_NEUTRAL ones; an attribute that is no field is an error."""
    names = {f.name for f in dataclasses.fields(value)}
    undeclared = sorted(set(getattr(value, "__dict__", {})) - names)
    if undeclared:
        raise CacheKeyError(
            f"{where}: {type(value).__qualname__} holds {', '.join(undeclared)}, which are not dataclass fields: "
            "declare every setting as a field"
        )
    neutral = key_neutral(value)
    return {n: key_data(getattr(value, n), f"{where}.{n}") for n in sorted(names - neutral)}


def _qualified_name(obj: Any, where: str) -> str:
    """module.qualname of a module-level function, class or method; a lambda or a local one has no stable name."""
    owner = getattr(obj, "__self__", None)
    if inspect.ismethod(obj) and not inspect.isclass(owner):
        raise CacheKeyError(f"{where}: the method {obj.__qualname__} of an instance cannot be read as settings")
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not module or not qualname or "<" in qualname:
        raise CacheKeyError(f"{where}: {obj!r} has no stable name to key a cache by: use a module-level function")
    return f"{module}.{qualname}"
