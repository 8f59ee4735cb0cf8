"""Each closed choice of the config is a Literal type that the code taking the value declares as its parameter's type,
and the config check refuses a value outside it in one line naming the full key and every choice.

The reference for the choices is the consumer's own signature (typing.get_type_hints of the constructor or function
that takes the value), not vtlab/runs/checks.py's table: a check that drifts from the code fails here.
"""

from __future__ import annotations

from typing import Any, get_args, get_type_hints

import pytest
from helpers import compose_config
from omegaconf import OmegaConf

from vtlab.callbacks.collapse_detector import CollapseDetector
from vtlab.core import choices
from vtlab.core.errors import ConfigError, VtlabError
from vtlab.export.onnx_int8 import quantize_graphs
from vtlab.models.encoder import SpladeEncoder
from vtlab.regularizers.flops import Flops
from vtlab.runs.checks import CHECKS, check_config
from vtlab.vocab.init import Auto, Semantic
from vtlab.vocab.transfer import TransferOptions

# (full key, overrides that make its node present, the callable that takes the value, its parameter, the named type)
CASES: list[tuple[str, list[str], Any, str, Any]] = [
    ("init.similarity", ["init=semantic"], Semantic, "similarity", choices.Similarity),
    ("init.similarity", ["init=auto"], Auto, "similarity", choices.Similarity),
    ("transfer.bias", [], TransferOptions, "bias", choices.TransferBias),
    ("callbacks.collapse_detector.action", [], CollapseDetector.__init__, "action", choices.CollapseAction),
    ("regularizer.doc.normalize", ["regularizer=flops"], Flops.__init__, "normalize", choices.FlopsNormalization),
    ("model.encoder.precision", [], SpladeEncoder.__init__, "precision", choices.EncoderPrecision),
    ("export.onnx_int8", ["stage=export"], quantize_graphs, "target", choices.OnnxInt8Target),
]
IDS = [f"{key}-{getattr(consumer, '__qualname__', consumer)}" for key, _, consumer, *_ in CASES]


def declared(consumer: Any, parameter: str) -> tuple[Any, ...]:
    """The values the consumer's parameter type allows (Optional's None left out)."""
    hint = get_type_hints(consumer)[parameter]
    return tuple(v for member in (hint, *get_args(hint)) for v in get_args(member) if isinstance(v, str))


@pytest.mark.parametrize(("key", "overrides", "consumer", "parameter", "named"), CASES, ids=IDS)
def test_the_consumer_takes_the_named_type(key, overrides, consumer, parameter, named):
    hint = get_type_hints(consumer)[parameter]
    assert hint == named or named in get_args(hint)


@pytest.mark.parametrize(("key", "overrides", "consumer", "parameter", "named"), CASES, ids=IDS)
def test_a_wrong_value_is_one_line_naming_the_key_and_each_choice(key, overrides, consumer, parameter, named):
    allowed = declared(consumer, parameter)
    assert len(allowed) >= 2
    cfg = compose_config(overrides)
    for value in allowed:  # every declared choice passes
        OmegaConf.update(cfg, key, value)
        check_config(cfg)
    with pytest.raises(ConfigError) as refused:
        check_config(compose_config([*overrides, f"{key}=bogus"]))  # as the command line gives it
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"{key}='bogus': expected one of ")
    listed = message.split("expected one of ", 1)[1].removesuffix(", or null for no int8 graphs").split(", ")
    assert listed == list(allowed)


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda: Semantic(similarity="bogus"), "init.similarity='bogus'"),
        (lambda: TransferOptions(bias="bogus"), "transfer.bias"),
        (lambda: CollapseDetector(action="bogus"), "callbacks.collapse_detector.action='bogus'"),
        (lambda: Flops(1.0, normalize="bogus"), "regularizer normalize"),
    ],
)
def test_the_library_refuses_a_wrong_value_itself(make, words):
    """Callers that do not come through the pipeline (no config check) get the consumer's own one line."""
    with pytest.raises(VtlabError) as refused:
        make()
    assert words in str(refused.value) and "bogus" in str(refused.value) and "\n" not in str(refused.value)


def test_every_literal_of_vtlab_core_choices_is_checked():
    """A named closed choice that no check reads would be refused only late, by its consumer: each type of
    vtlab.core.choices used for a config key (TrainerPrecision is read beside Lightning's own) has a rule."""
    keys = {key for key, *_ in CASES}
    assert keys <= set(CHECKS) | {"regularizer.doc.normalize"} and "regularizer.*.normalize" in CHECKS
    named = {v for v in vars(choices).values() if get_args(v) and all(isinstance(a, str) for a in get_args(v))}
    assert named - {choices.TrainerPrecision} == {type_ for *_, type_ in CASES}
