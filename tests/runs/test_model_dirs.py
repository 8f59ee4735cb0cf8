"""What docs/reliability.md promises about model directories holds for every reader, and an override no stage reads is
said, not ignored silently.

- A local model directory is admitted by one function (vtlab.backbones.model_dir.admit_model_dir) before transformers
  reads it, whoever reads it (a backbone, its tokenizer, vocab.tokenizer, a run's model/ that stage=export loads):
  pickle weights only (`pytorch_model.bin`: unpickling a crafted file runs code) and a `config.json` or
  `tokenizer_config.json` that names code (`auto_map`) are each one line naming the directory or file, exit 2; nothing
  of such a directory reaches an export.
- An override of a key the chosen stage does not read (`stage=export mlm.steps=5`) is one warning naming it and the
  stage (vtlab.runs.reads: each stage declares what it reads; the run goes on).

In-process calls check each rule; one `python -m vtlab` per refusal checks what a user sees."""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path

import pytest
from helpers import compose_config, hydra_conf, one_error_line, run_vtlab
from transformers import AutoConfig

from vtlab.backbones import Backbone
from vtlab.backbones.model_dir import admit_model_dir
from vtlab.core.errors import AssetError
from vtlab.runs.reads import unread_overrides

pytestmark = pytest.mark.usefixtures("shared_cache")
CODE_MAP = {"AutoConfig": "configuration_x.XConfig", "AutoModelForMaskedLM": "modeling_x.XForMaskedLM"}


def splade_tiny_copy(root: Path, skip: tuple[str, ...] = (), edits: dict[str, dict] | None = None) -> Path:
    """A copy of the SPLADE-tiny directory at `root`, without `skip`, each JSON file named in `edits`
    ({"config.json": {...}}) updated."""
    src = Path(Backbone("asset:splade-tiny")._source(tokenizer=False)[0])
    root.mkdir(parents=True)
    for f in src.iterdir():
        if f.is_file() and f.name not in skip and f.name not in (edits or {}):
            shutil.copyfile(f, root / f.name)
    for name, edit in (edits or {}).items():
        (root / name).write_text(json.dumps({**json.loads((src / name).read_text()), **edit}))
    return root


class RunsCode:
    """Unpickled, it runs os.system: what a crafted pytorch_model.bin holds."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def pickle_only(root: Path, marker: Path) -> Path:
    """SPLADE-tiny's config and tokenizer with crafted pickle weights and no safetensors."""
    model = splade_tiny_copy(root, skip=("model.safetensors",))
    (model / "pytorch_model.bin").write_bytes(pickle.dumps({"weights": RunsCode(marker)}))
    return model


# ---- 1. pickle weights ------------------------------------------------------------------------------------------
def test_pickle_weights_are_refused_naming_the_file_and_what_is_expected(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    model = pickle_only(tmp_path / "m", marker)
    with pytest.raises(AssetError) as ei:
        Backbone(str(model)).load_model()
    assert str(ei.value).startswith(f"{model / 'pytorch_model.bin'}: pickle weights, which vtlab does not load")
    assert "expected model.safetensors" in str(ei.value) and "(config key: backbone.name_or_path)" in str(ei.value)
    assert not marker.exists()


@pytest.mark.cli
def test_a_pickle_only_backbone_is_one_line_through_the_cli(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    model = pickle_only(tmp_path / "m", marker)
    res = run_vtlab(
        "stage=export",
        f"backbone.name_or_path={model}",
        "vocab=native",
        "logger=none",
        f"hydra.run.dir={tmp_path / 'run'}",
        timeout=600,
    )
    assert res.returncode == 2, res.stderr[-3000:]
    one_error_line(res.stderr, [f"{model / 'pytorch_model.bin'}: pickle weights", "expected model.safetensors"])
    assert not marker.exists() and not (tmp_path / "run" / "sparse-encoder").exists()


# ---- 2. a directory that names code -----------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["config.json", "tokenizer_config.json"])
def test_a_known_architecture_that_names_code_is_refused_by_every_reader(tmp_path: Path, where: str) -> None:
    """model_type bert has a class in transformers, so transformers itself loads it and never says no."""
    model = splade_tiny_copy(tmp_path / "m", edits={where: {"auto_map": CODE_MAP}})
    readers = {
        "load_model": lambda: Backbone(str(model)).load_model(),
        "load_tokenizer": lambda: Backbone(str(model)).load_tokenizer(),
        "vocab.tokenizer": lambda: Backbone(str(model))._load(
            AutoConfig.from_pretrained, str(model), "vocab.tokenizer"
        ),
    }
    for reader, read in readers.items():
        with pytest.raises(AssetError) as ei:
            read()
        field = "vocab.tokenizer" if reader == "vocab.tokenizer" else "backbone.name_or_path"
        assert str(ei.value).startswith(f"{field}={str(model)!r} contains its own Python code (configuration_x"), reader


def test_the_opt_in_still_admits_a_model_that_names_code(tmp_path: Path) -> None:
    model = splade_tiny_copy(tmp_path / "m", edits={"config.json": {"auto_map": CODE_MAP}})
    admit_model_dir(str(model), "backbone.name_or_path", code_allowed=True, weights=True, tokenizer=True)


@pytest.mark.cli
def test_an_export_of_a_run_whose_model_names_code_is_refused_and_copies_nothing(tmp_path: Path) -> None:
    run = tmp_path / "run"
    splade_tiny_copy(run / "model", edits={"config.json": {"auto_map": CODE_MAP}})
    res = run_vtlab("stage=export", f"run_dir={run}", "logger=none", timeout=600)
    assert res.returncode == 2, res.stderr[-3000:]
    one_error_line(res.stderr, [f"{run / 'model'}' contains its own Python code (configuration_x.XConfig"])
    assert not (run / "sparse-encoder").exists()


# ---- 3. overrides the stage does not read -----------------------------------------------------------------------
def unread(*overrides: str) -> list[str]:
    cfg = compose_config(overrides)
    with hydra_conf():  # the groups an override chose are read from an initialized Hydra
        return unread_overrides(cfg, list(overrides))


def test_an_override_the_stage_does_not_read_is_named() -> None:
    assert unread("stage=export", "mlm.steps=5", "export.onnx=true") == ["mlm.steps=5"]
    assert unread("stage=evaluate", "trainer.max_steps=3", "loss.temperature=0.1", "+data.x=1") == [
        "trainer.max_steps=3",
        "loss.temperature=0.1",
        "+data.x=1",
    ]
    assert unread("stage=finetune", "eval=beir", "diagnose.fit.top_words=5") == [
        "eval=beir",
        "diagnose.fit.top_words=5",
    ]
    assert unread("stage=evaluate", "teacher=splade-tiny") == ["teacher=splade-tiny"]  # it fills data.teacher


def test_what_a_stage_reads_through_an_interpolation_or_a_group_counts_as_read() -> None:
    # model.encoder.doc_max_length is ${data.doc_max_length}; model=... chooses the group model.encoder is in
    assert unread("stage=evaluate", "data.doc_max_length=128", "model=inference-free", "vocab=native") == []
    assert unread("stage=all", "mlm.steps=5", "trainer.max_steps=3", "teacher=splade-tiny", "loss=margin-mse") == []
    # keys every run reads, whatever its stage: where it writes, its name, how it resumes, Hydra's own
    assert unread("stage=export", "name=x", "group=g", "resume=false", "hydra.run.dir=/tmp/x", "logger=none") == []


def test_the_admission_warns_once_and_goes_on(tmp_path: Path, caplog) -> None:
    """The run's admission (vtlab.stages.admission) under the Hydra config `python -m vtlab` runs with: one warning
    naming the unread overrides and the stage, and the run admitted."""
    import logging

    from hydra import compose
    from hydra.core.hydra_config import HydraConfig

    from vtlab.stages.admission import admit

    overrides = ["stage=evaluate", "eval=none", "logger=none", "vocab=native", "mlm.steps=5", "trainer.max_steps=3"]
    with hydra_conf():
        cfg = compose("config", overrides=[*overrides, f"paths.run_dir={tmp_path / 'run'}"], return_hydra_config=True)
        HydraConfig.instance().set_config(cfg)
        try:
            with caplog.at_level(logging.WARNING, logger="vtlab"), admit(cfg) as admitted:
                assert admitted.run_dir == tmp_path / "run" and admitted.start.resume_from is None
        finally:
            HydraConfig.instance().cfg = None
    lines = [r.getMessage() for r in caplog.records if "does not read" in r.getMessage()]
    assert len(lines) == 1, caplog.text
    assert lines[0].startswith("stage=evaluate does not read mlm.steps=5, trainer.max_steps=3: ignored"), lines[0]
