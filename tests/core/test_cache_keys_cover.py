"""Every cache key covers every setting that changes its entry (vtlab.core.cache_keys).

Each option of conf/{init,vocab,mlm,apc,teacher} and the `transfer` node is composed and instantiated as its stage does;
every leaf is changed alone (negated, +1, ×1.5 + 0.1, +"x", one more item; OTHER's value for a null leaf or a closed
choice) and the key the stage computes must change, unless the class (or module) the setting belongs to declares it
key-neutral (KEY_NEUTRAL) or a config check refuses the change (REFUSED: a refused setting shares no entry). The IDF
and triplet settings are walked the same way. A piece that does not expose its settings, as an initializer written
without its own @dataclass, gets a key per setting or a loud error, never a shared entry."""

from __future__ import annotations

import copy
import functools
import inspect
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar
from unittest import mock

import pytest
from helpers import CONF, compose_config
from hydra.utils import get_object, instantiate
from omegaconf import OmegaConf

from vtlab.backbones import Backbone
from vtlab.callbacks import apc as apc_cache
from vtlab.core.cache_keys import CacheKeyError, key_data, key_neutral, settings_key
from vtlab.core.errors import VtlabError
from vtlab.data import boolq, clean, teacher
from vtlab.data.examples import TripletExample
from vtlab.models import idf, mlm
from vtlab.vocab import transfer
from vtlab.vocab.init import Initializer, Mean, NewRandom, Semantic
from vtlab.vocab.targets import Normalizer, PretrainedVocab, to_lower
from vtlab.vocab.transfer import TransferOptions

BACKBONE = Backbone("asset:splade-tiny")
VOCAB = PretrainedVocab("bert-uncased", "asset:minilm", "asset:splade-tiny")
EXAMPLES = [TripletExample("q", "p", ["n1", "n2"]), TripletExample("r", "s", ["t"])]
TEXTS = ["one text", "Another Text", "a third"]

# what a leaf becomes where the generic change would be refused or the leaf is null, by its key (the first value other
# than the leaf's own)
OTHER: dict[str, list[Any]] = {
    "similarity": ["pmi", "cosine"],
    "bias": ["zeros", "zmap"],
    "scheduler": ["linear", "cosine"],
    "variant": ["enpt", "full"],
    "precision": ["bf16", "fp32"],
    "preprocess": [{"_target_": "vtlab.vocab.targets.Normalizer", "lowercase": True}],
    "embedding_model": ["asset:minilm"],
    "percentile": [50.0],
    "shift": [0.5],
    "seed": [3],
    "max_docs": [7],
    "max_examples": [7],
    "gradient_clip_val": [1.0],
    "head_fit": [{"spans": 8, "ridge": 0.1, "scale": 2.0}],
    "trainable": [["embeddings"]],
    "warmup_ratio": [0.2],
    "held_out": [{"share": 0.1, "seed": 1, "max_spans": 64}],
}
# changes some options' config checks refuse (e.g. apc.shift beside a percentile), by group and leaf
REFUSED = {("apc", "shift"), ("apc", "per_term"), ("apc", "include_zeros"), ("vocab", "preprocess.lowercase")}
# subtrees keyed by their content, not their settings (the same texts give the same key, whichever settings name them)
CONTENT_KEYED = {("vocab", ("corpus",))}  # a vocabulary's corpus: vtlab.vocab.targets._corpus_id


class _ProbeEncoder:
    """What the APC cache key reads of an encoder: no networks, a tokenizer of three tokens."""

    max_length: ClassVar[dict[str, int]] = {"query": 8, "doc": 16}
    preprocess = None

    class tokenizer:
        @staticmethod
        def get_vocab() -> dict[str, int]:
            return {"a": 0, "b": 1, "c": 2}

    @staticmethod
    def networks() -> list[Any]:
        return []


def _teacher_path(node: dict[str, Any]) -> Path:
    """The file a data.teacher node's scores of EXAMPLES are cached in (the stage's call, its cache answered here)."""
    paths = []

    def answer(path: Path, examples: list[TripletExample], compute: Callable) -> list[list[float]]:
        paths.append(path)
        return [[0.0] * (1 + len(e.negatives)) for e in examples]

    with mock.patch.object(teacher, "cached_scores", answer):
        instantiate(node)(EXAMPLES)
    return paths[-1]


def _vocab_keys(node: dict[str, Any]) -> tuple[str, str]:
    """A vocabulary's keys: the transfer's (its cache_key) and the MLM adaptation's (its input preprocessing)."""
    vocab = instantiate(node)
    return (
        transfer._cache_key(BACKBONE, vocab, Mean(), TransferOptions()),
        mlm.cache_key(BACKBONE, {}, vocab.preprocess, 0, "32-true"),
    )


# group → (its node in the composed config, the key its stage computes from that node, whose KEY_NEUTRAL its
# top-level leaves read when the node names no _target_)
GROUPS: dict[str, tuple[Callable, Callable, Any]] = {
    "init": (
        lambda cfg: cfg.init,
        lambda n: transfer._cache_key(BACKBONE, VOCAB, instantiate(n), TransferOptions()),
        None,
    ),
    "transfer": (
        lambda cfg: cfg.transfer,
        # an init that draws from transfer.seed: with a deterministic one the seed is rightly not in the key
        # (tests/method/test_vocab_init.py: Initializer.draws)
        lambda n: transfer._cache_key(BACKBONE, VOCAB, NewRandom(), TransferOptions(**n)),
        TransferOptions,
    ),
    "vocab": (lambda cfg: cfg.vocab, _vocab_keys, None),
    "mlm": (lambda cfg: cfg.mlm, lambda n: mlm.cache_key(BACKBONE, n, None, 0, "32-true"), mlm),
    "apc": (lambda cfg: cfg.apc, lambda n: apc_cache._key(instantiate(n), _ProbeEncoder(), TEXTS), None),
    "teacher": (lambda cfg: cfg.data.teacher, _teacher_path, None),
}
CASES = [(g, p.stem) for g in ("init", "vocab", "mlm", "apc", "teacher") for p in sorted((CONF / g).glob("*.yaml"))]


def changed(key: str, value: Any) -> Any:
    """`value` of the leaf `key` changed: OTHER's first other value, else by its type."""
    for other in OTHER.get(key, []):
        if other != value:
            return other
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value * 1.5 + 0.1
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, list):
        return [*value, *value[-1:]] or ["x"]
    pytest.fail(f"{key}={value!r}: give OTHER a value to change it to")


def leaves(group: str, node: dict[str, Any], path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    for k, v in node.items():
        if k in ("_target_", "_partial_", "_recursive_") or (group, (*path, k)) in CONTENT_KEYED:
            continue
        if isinstance(v, dict) and v:
            yield from leaves(group, v, (*path, k))
        else:
            yield (*path, k), v


def neutral(node: dict[str, Any], path: tuple[str, ...], owner: Any) -> frozenset[str]:
    """KEY_NEUTRAL of what takes the leaf at `path`: its node's _target_, else the group's owner."""
    parent = functools.reduce(lambda n, k: n[k], path[:-1], node)
    target = parent.get("_target_")
    return key_neutral(get_object(target) if target else owner) if (target or owner) else frozenset()


def uncovered(group: str, node: dict[str, Any], key: Callable[[Any], Any], owner: Any) -> tuple[list[str], set]:
    """(leaves whose change leaves the key as it was, (group, leaf) of the changes refused)."""
    base, missed, refused = key(node), [], set()
    for path, value in leaves(group, node):
        if path[-1] in neutral(node, path, owner):
            continue
        other = copy.deepcopy(node)
        functools.reduce(lambda n, k: n[k], path[:-1], other)[path[-1]] = changed(path[-1], value)
        try:
            if key(other) == base:
                missed.append(".".join(path))
        except Exception as e:  # a config check's VtlabError, as it is or inside Hydra's InstantiationException
            if not isinstance(e, VtlabError) and not isinstance(e.__cause__, VtlabError):
                raise
            refused.add((group, ".".join(path)))
    return missed, refused


@pytest.mark.parametrize(("group", "option"), [*CASES, ("transfer", None)])
def test_every_setting_of_every_option_changes_its_stages_key(group, option, empty_cache):
    select, key, owner = GROUPS[group]
    node = OmegaConf.to_container(select(compose_config([f"{group}={option}"] if option else [])), resolve=True)
    missed, refused = uncovered(group, node, key, owner)
    assert missed == [] and refused <= REFUSED


def test_every_idf_setting_changes_the_tables_key():
    tokenizer = BACKBONE.load_tokenizer()
    options = set(inspect.signature(idf.IdfTable.from_corpus).parameters) - {"tokenizer", "texts", "cache"}
    assert options == set(inspect.signature(idf._cache_key).parameters) - {"tokenizer", "texts"}
    preprocesses = [None, to_lower, *(Normalizer(lo, blank) for lo in (False, True) for blank in (False, True))]
    keys = {idf._cache_key(tokenizer, TEXTS, lo, p) for lo in (False, True) for p in preprocesses}
    assert len(keys) == 2 * len(preprocesses)
    assert idf._cache_key(tokenizer, TEXTS[:-1], False, None) != idf._cache_key(tokenizer, TEXTS, False, None)


class _Captured(Exception):
    pass


@pytest.mark.parametrize("build", [boolq.boolq_triplets, clean.boolq_clean_triplets])
def test_every_triplet_setting_changes_the_triplets_key(build, monkeypatch):
    def captured(kind: str, recipe: str, settings: dict[str, Any]) -> Path:
        raise _Captured(kind, recipe, dict(settings))

    monkeypatch.setattr(boolq, "triplets_path", captured)

    def key(**settings: Any) -> str:
        with pytest.raises(_Captured) as got:
            build(**settings)
        kind, recipe, source = got.value.args
        return settings_key("triplets", boolq.CACHE_VERSION, kind=kind, recipe=recipe, settings=source)

    defaults = {n: p.default for n, p in inspect.signature(build).parameters.items()}
    with pytest.raises(_Captured) as got:
        build()
    assert got.value.args[2] == defaults  # every parameter is in the key's settings
    base = key(**defaults)
    assert [n for n, v in defaults.items() if key(**{**defaults, n: changed(n, v)}) == base] == []


class Scaled(Initializer):
    """An initializer as docs/architecture.md's recipe reads: a class of init.py's family storing its parameters."""

    def __init__(self, scale: float = 1.0, name: str = "scaled") -> None:
        self.scale = scale
        self.name = name

    def _fill(self, src, tgt_ids, src_ids, new_ids, **ctx):
        return src.mean(0).expand(len(new_ids), -1) * self.scale, {}


def test_an_initializer_that_is_no_dataclass_gets_a_key_per_setting_or_a_loud_error(empty_cache, monkeypatch):
    monkeypatch.setattr(transfer, "_cached_model", lambda out, *args: out)
    try:
        one = transfer.cached_transfer(BACKBONE, VOCAB, Scaled(scale=1.0))
        two = transfer.cached_transfer(BACKBONE, VOCAB, Scaled(scale=2.0))
    except VtlabError as e:
        assert "Scaled" in str(e)
        return
    assert one != two


@dataclass
class _Declared(Initializer):
    scale: float = 1.0
    chunk: int = field(default=8)
    KEY_NEUTRAL: ClassVar[tuple[str, ...]] = ("chunk",)


def test_what_a_key_reads_of_an_object_and_what_it_refuses():
    assert key_data(_Declared(scale=2.0, chunk=1)) == key_data(_Declared(scale=2.0, chunk=9))
    assert key_data(_Declared(scale=2.0)) != key_data(_Declared(scale=3.0))
    assert key_data(Semantic(chunk_rows=1)) == key_data(Semantic(chunk_rows=4096))
    assert key_data(Normalizer(True, False))["fields"] == {"lowercase": True, "blank_prefix": False}
    assert key_data(BACKBONE) == BACKBONE.cache_key() and key_data(to_lower) == "vtlab.vocab.targets.to_lower"
    factory = functools.partial(Backbone.derived, name="x")
    assert key_data(factory) == {
        "callable": "vtlab.backbones.pretrained.Backbone.derived",
        "args": [],
        "keywords": {"name": "x"},
    }
    added = _Declared()
    added.extra = 1
    for bad, words in [
        (Scaled(), "Scaled cannot be read as settings"),
        (added, "holds extra, which are not dataclass fields"),
        (lambda: 0, "has no stable name"),
        ({"init": {"rows": [object()]}}, "init.rows[0]: a builtins.object"),
    ]:
        with pytest.raises(CacheKeyError, match=re.escape(words)):
            settings_key("test", 1, value=bad)
