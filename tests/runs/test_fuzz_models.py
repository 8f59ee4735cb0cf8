"""Model directories that could run code when loaded: an `auto_map` in config.json or tokenizer_config.json naming
modules beside it (whatever the model_type: a known one loads without importing them, but names code all the same),
or pickle weights only (pytorch_model.bin, whose unpickling can call anything). For each reader of a model directory
(the model, the tokenizer): nothing of it runs (a marker file its code or pickle would create never appears), and
the read is refused with one `vtlab: error:` line naming the config key (issue 50 item 5)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from fuzz import call_bounded, one_line, user_error


class _Runs:
    """Unpickling this runs a shell command (what a crafted pytorch_model.bin does to whoever unpickles it)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _tiny(dest: Path) -> Path:
    from vtlab.backbones import Backbone

    src = Path(Backbone("asset:splade-tiny")._source(tokenizer=False)[0])
    dest.mkdir(parents=True)
    for f in src.iterdir():
        if f.is_file():
            shutil.copy(f, dest / f.name)
    return dest


def _code(model: Path, module: str, marker: Path) -> None:
    (model / f"{module}.py").write_text(f"open({str(marker)!r}, 'w').close()\n")


def _edit(path: Path, **changes) -> None:
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def _make(case: str, model: Path, marker: Path) -> None:
    _tiny(model)
    if case.startswith("config_auto_map"):
        model_type = "bert" if case.endswith("known_type") else "vtlab-own"
        _edit(
            model / "config.json",
            model_type=model_type,
            auto_map={"AutoConfig": "configuration_own.OwnConfig", "AutoModelForMaskedLM": "modeling_own.OwnModel"},
        )
        _code(model, "configuration_own", marker)
        _code(model, "modeling_own", marker)
    elif case == "tokenizer_auto_map":
        _edit(model / "tokenizer_config.json", auto_map={"AutoTokenizer": ["tokenization_own.OwnTokenizer", None]})
        _code(model, "tokenization_own", marker)
    elif case == "pickle_weights_only":
        (model / "model.safetensors").unlink()
        torch.save(
            {"bert.embeddings.word_embeddings.weight": torch.zeros(2, 2), "x": _Runs(marker)},
            model / "pytorch_model.bin",
        )
    else:
        raise ValueError(case)


# (what the directory holds, which read): a tokenizer reads no weights, so pickle weights are the model's read only
CASES = [
    (case, read)
    for case in ("config_auto_map_known_type", "config_auto_map_own_type", "tokenizer_auto_map", "pickle_weights_only")
    for read in ("load_model", "load_tokenizer")
    if (case, read) != ("pickle_weights_only", "load_tokenizer")
]


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict:
    """(case, read) → (the exception, whether the marker appeared): each model directory built and read once."""
    from vtlab.backbones import Backbone

    root = tmp_path_factory.mktemp("models")
    out = {}
    for case, read in CASES:
        marker = root / f"{case}-{read}.ran"
        model = root / f"{case}-{read}"
        _make(case, model, marker)
        got = call_bounded(lambda: getattr(Backbone(str(model)), read)(), 120)
        assert not got.extra.get("hung"), (case, read)
        out[case, read] = (got.error, marker.exists())
    return out


@pytest.mark.parametrize("case,read", CASES)
def test_nothing_in_a_model_directory_runs_when_it_is_read(outcomes, case: str, read: str) -> None:
    error, ran = outcomes[case, read]
    assert not ran, f"{read} of a model directory with {case} ran its code"


@pytest.mark.parametrize("case,read", CASES)
def test_a_model_directory_that_names_code_or_holds_pickles_only_is_refused_in_one_line(
    outcomes, case: str, read: str
) -> None:
    error, ran = outcomes[case, read]
    assert error is not None, f"{read} accepted a model directory with {case}"
    shown = user_error(error)
    assert shown is not None, f"{read} of {case}: {type(error).__name__} would be a traceback: {error!r}"[:1500]
    line = one_line(shown)
    assert "\n" not in line and "backbone.name_or_path" in line, line
