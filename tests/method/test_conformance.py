"""Conformance of every option of conf/loss, conf/init and conf/vocab with docs/architecture.md's "how to add" recipes
(lightning-ir's pattern): one fixture composes the run config with each option found on disk, so a new file is
checked with no edit here, and instantiates it; each test is one recipe step:

- the piece is the group's kind (a RankingLoss, an Initializer dataclass of its own, a TargetVocab) named as its file;
- its closed choices (Literal-typed parameters) are checked by vtlab.runs.checks: a wrong value is refused in one line
  naming the key and each choice;
- a cached piece (init, vocab) has a cache key (vtlab.core.cache_keys) that each of its settings changes, unless its
  class declares the setting KEY_NEUTRAL or refuses the change;
- docs/configuration.md's table names the option in its group's row;
- the export allow-list accepts what export reads of it (a vocabulary's `preprocess`, through `model.encoder`);
- a loss gives a finite scalar with gradients on a tiny batch; an initializer fills every row of a small transfer of
  a real tiny model's embeddings.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from typing import Any, get_type_hints

import numpy as np
import pytest
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from vtlab.backbones import Backbone
from vtlab.core.cache_keys import key_neutral, settings_key
from vtlab.core.errors import ConfigError, VtlabError
from vtlab.core.paths import CONF_DIR
from vtlab.export.safe_config import check_targets
from vtlab.losses.base import RankingLoss
from vtlab.runs.checks import check_config, literal_values
from vtlab.vocab.canonical import Overlap
from vtlab.vocab.init import Initializer
from vtlab.vocab.targets import TargetVocab

DOCS = CONF_DIR.parent / "docs" / "configuration.md"
KINDS: dict[str, type] = {"loss": RankingLoss, "init": Initializer, "vocab": TargetVocab}


def options(*groups: str) -> list[Any]:
    return [
        pytest.param((g, p.stem), id=f"{g}={p.stem}") for g in groups for p in sorted((CONF_DIR / g).glob("*.yaml"))
    ]


@dataclass
class Option:
    group: str
    name: str
    cfg: DictConfig
    piece: Any

    @property
    def node(self) -> dict[str, Any]:
        return OmegaConf.to_container(self.cfg[self.group], resolve=True)


_COMPOSED: dict[tuple[str, str], Option] = {}


@pytest.fixture
def option(request, compose) -> Option:
    """The run config composed with `<group>=<name>` and the piece its group node instantiates (once per option)."""
    group, name = request.param
    if (group, name) not in _COMPOSED:
        cfg = compose([f"{group}={name}"])
        _COMPOSED[group, name] = Option(group, name, cfg, instantiate(cfg[group]))
    return _COMPOSED[group, name]


def parameter_types(piece: Any) -> dict[str, Any]:
    """The types of the settings the piece's class takes: a dataclass's fields, else its constructor's parameters."""
    cls = type(piece)
    return get_type_hints(cls if dataclasses.is_dataclass(cls) else cls.__init__)


def closed_choices(piece: Any) -> dict[str, tuple[Any, ...]]:
    return {k: v for k, t in parameter_types(piece).items() if (v := literal_values(t))}


@pytest.mark.parametrize("option", options("loss", "init", "vocab"), indirect=True)
def test_the_piece_is_its_groups_kind_named_as_its_file(option):
    assert isinstance(option.piece, KINDS[option.group])
    if option.group == "init":  # its own @dataclass: its fields are the settings that key the transfer
        assert "__dataclass_fields__" in vars(type(option.piece))
    if option.group != "loss":
        assert option.piece.name == option.name


@pytest.mark.parametrize("option", options("loss", "init", "vocab"), indirect=True)
def test_each_closed_choice_is_checked_before_the_run(option):
    for parameter, allowed in closed_choices(option.piece).items():
        key = f"{option.group}.{parameter}"
        cfg = copy.deepcopy(option.cfg)
        for value in allowed:
            OmegaConf.update(cfg, key, value, force_add=True)
            check_config(cfg)
        OmegaConf.update(cfg, key, "bogus", force_add=True)
        with pytest.raises(ConfigError) as refused:
            check_config(cfg)
        assert str(refused.value) == f"{key}='bogus': expected one of {', '.join(map(str, allowed))}"


def changed(value: Any, choices: tuple[Any, ...]) -> Any:
    """Another value of a setting: another choice, the negation, a number moved, a string extended."""
    if choices:
        return next(c for c in choices if c != value)
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value * 1.5 + 1
    return value + "x"


@pytest.mark.parametrize("option", options("init", "vocab"), indirect=True)
def test_a_cached_piece_has_a_key_that_each_setting_changes(option):
    base = settings_key("conformance", 1, piece=option.piece)  # CacheKeyError if its settings are not exposed
    choices, neutral = closed_choices(option.piece), key_neutral(option.piece)
    node = option.node
    settings = [k for k, v in node.items() if isinstance(v, (bool, int, float, str)) and not k.startswith("_")]
    assert settings, "an option with no setting of its own"
    for key in (k for k in settings if k not in neutral):
        other = copy.deepcopy(node)
        other[key] = changed(node[key], choices.get(key, ()))
        try:
            piece = instantiate(other)
            key_now = settings_key("conformance", 1, piece=piece)
        except Exception as e:  # a refused setting shares no entry (VtlabError, or Hydra's wrapping of one)
            assert isinstance(e, VtlabError) or isinstance(e.__cause__, VtlabError), e
            continue
        assert key_now != base, f"{option.group}.{key} does not change the cache key"


def docs_row(group: str) -> str:
    rows = [line for line in DOCS.read_text(encoding="utf-8").splitlines() if line.startswith(f"| `{group}` |")]
    assert len(rows) == 1, f"docs/configuration.md: no single row for the group {group}"
    return rows[0].split(" | ")[1]  # the choices cell


@pytest.mark.parametrize("option", options("loss", "init", "vocab"), indirect=True)
def test_the_docs_table_names_the_option(option):
    assert f"`{option.name}`" in docs_row(option.group), f"docs/configuration.md's {option.group} row"


@pytest.mark.parametrize("option", options("vocab"), indirect=True)
def test_export_accepts_what_it_reads_of_a_vocabulary(option):
    """Export instantiates a recorded run's model.encoder, which interpolates vocab.preprocess (its backbone dropped:
    export loads the saved model)."""
    encoder = OmegaConf.to_container(option.cfg.model.encoder, resolve=True)
    encoder.pop("backbone", None)
    check_targets(encoder, f"vocab={option.name}")
    assert encoder.get("preprocess") == option.node["preprocess"]


@pytest.mark.parametrize("option", options("loss"), indirect=True)
def test_a_loss_gives_a_finite_scalar_with_gradients(option):
    generator = torch.Generator().manual_seed(0)
    queries, group, vocab = 3, 3, 40
    q = torch.relu(torch.randn(queries, vocab, generator=generator)).requires_grad_()
    d = torch.relu(torch.randn(queries * group, vocab, generator=generator)).requires_grad_()
    teacher = torch.randn(queries, group, generator=generator) if option.piece.requires_teacher else None
    loss = option.piece(q, d, teacher)
    assert loss.dim() == 0 and torch.isfinite(loss)
    loss.backward()
    for grad in (q.grad, d.grad):
        assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0


@pytest.fixture(scope="module")
def tiny(shared_cache) -> tuple[torch.Tensor, Any]:
    """SPLADE-tiny's input embeddings and tokenizer: the one real tiny model of this module."""
    backbone = Backbone("asset:splade-tiny")
    return backbone.load_model().get_input_embeddings().weight.detach().clone(), backbone.load_tokenizer()


@pytest.mark.parametrize("option", options("init"), indirect=True)
def test_an_initializer_fills_every_row_of_a_small_transfer(option, tiny):
    """The tiny model's vocabulary with a few ordinary words made new: every row finite, and (the init permitting) the
    overlap's rows copied."""
    embeddings, tokenizer = tiny
    size = embeddings.shape[0]
    new = np.array(tokenizer.convert_tokens_to_ids("the of and apple river music house green".split()))
    kept = np.setdiff1d(np.arange(size), new)
    overlap = Overlap(kept, kept, len(kept), 0, 0, size, size)
    rows, stats = option.piece(
        embeddings,
        overlap,
        target_size=size,
        source_tokenizer=tokenizer,
        target_tokenizer=tokenizer,
        target_embeddings=embeddings,
        generator=torch.Generator().manual_seed(0),
    )
    assert rows.shape == embeddings.shape and torch.isfinite(rows).all() and isinstance(stats, dict)
    if stats.get("copied"):
        assert torch.equal(rows[kept], embeddings[kept])
