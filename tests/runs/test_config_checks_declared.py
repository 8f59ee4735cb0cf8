"""The config checks read the allowed choices where they are declared (vtlab/runs/checks.py copies no table): a value
added to a declaration — vtlab's type, a node of vtlab/index/indexes.yaml, the Lightning Trainer's type — is accepted
by the check with no edit of vtlab/runs/checks.py, and a wrong value's one line lists it.

Each test changes a declaration (monkeypatch: restored after it), then runs vtlab/runs/checks.py anew (runpy: the
imported module, which other tests use, stays as it is) and checks a composed config with what that run defines.
"""

from __future__ import annotations

import runpy
from typing import Any, Literal, Optional, Union, get_args, get_type_hints

import pytest
from helpers import compose_config
from pytorch_lightning import Trainer

import vtlab.core.choices
import vtlab.core.paths
import vtlab.runs.checks
from vtlab.core.errors import ConfigError
from vtlab.models.encoder import SpladeEncoder
from vtlab.runs.checks import literal_values
from vtlab.runtime.precision import PRECISIONS


def fresh_checks() -> dict[str, Any]:
    """vtlab/runs/checks.py run anew: its names, with the declarations as they are now."""
    return runpy.run_path(vtlab.runs.checks.__file__)


def refusal(checks: dict[str, Any], override: str) -> str:
    with pytest.raises(ConfigError) as ei:
        checks["check_config"](compose_config([override]))
    return str(ei.value)


def test_literal_values_reads_literals_through_unions_and_optional():
    assert literal_values(Literal["a", "b"]) == ("a", "b")
    assert literal_values(Optional[Union[Literal[64, 32], Literal["64", "bf16"]]]) == (64, 32, "64", "bf16")  # noqa: UP007, UP045
    assert literal_values(Literal["a"] | Literal["b", "a"] | None) == ("a", "b")
    assert literal_values(str) == ()


def test_the_library_takes_the_declared_types():
    assert get_type_hints(SpladeEncoder.__init__)["precision"] == vtlab.core.choices.EncoderPrecision
    assert PRECISIONS == get_args(vtlab.core.choices.EncoderPrecision)


def test_a_new_encoder_precision_is_accepted_without_editing_the_check(monkeypatch):
    declared = vtlab.core.choices.EncoderPrecision
    monkeypatch.setattr(vtlab.core.choices, "EncoderPrecision", Literal[(*get_args(declared), "fp8")])
    checks = fresh_checks()
    checks["check_config"](compose_config(["model.encoder.precision=fp8"]))
    assert refusal(checks, "model.encoder.precision=fp9") == (
        "model.encoder.precision='fp9': expected one of auto, native, fp32, bf16, int8, fp8"
    )


def test_a_new_node_of_indexes_yaml_is_accepted_without_editing_the_check(monkeypatch, tmp_path):
    indexes = tmp_path / "indexes.yaml"
    node = "faiss:\n  _target_: my_project.FaissIndex\n  _partial_: true\n"
    indexes.write_text(vtlab.core.paths.INDEXES_FILE.read_text(encoding="utf-8") + node, encoding="utf-8")
    monkeypatch.setattr(vtlab.core.paths, "INDEXES_FILE", indexes)
    checks = fresh_checks()
    assert checks["INDEXES"] == ("exact", "scipy", "seismic", "faiss")
    checks["check_config"](compose_config(["eval.index=faiss"]))
    assert refusal(checks, "eval.index=annoy") == "eval.index='annoy': expected one of exact, scipy, seismic, faiss"


@pytest.mark.train
def test_a_new_lightning_precision_is_accepted_without_editing_the_check(monkeypatch):
    declared = Optional[Literal["32-true", "bf16-mixed", "fp4-true"]]  # noqa: UP045 (as Lightning writes it)
    monkeypatch.setitem(Trainer.__init__.__annotations__, "precision", declared)
    checks = fresh_checks()
    assert checks["lightning_precisions"]() == ("native", "32-true", "bf16-mixed", "fp4-true")
    checks["check_config"](compose_config(["trainer.precision=fp4-true"]))
    assert refusal(checks, "trainer.precision=16-mixed") == (
        "trainer.precision='16-mixed': expected one of native, 32-true, bf16-mixed, fp4-true, or null"
    )
