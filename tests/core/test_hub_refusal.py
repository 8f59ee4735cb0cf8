"""Offline, a run whose config names a hub model missing from the local Hugging Face cache is refused with the loaders'
one line before any data is prepared (vtlab.core.hub.refuse_missing_hub_models, checked by the run's admission before
its data preflight: vtlab.stages.admission)."""

from __future__ import annotations

from pathlib import Path

import huggingface_hub.constants
import pytest
from helpers import compose_config

import vtlab.data.clean
from vtlab.core.errors import AssetError
from vtlab.core.hub import refuse_missing_hub_models
from vtlab.stages.admission import admit

MODERNBERT = "answerdotai/ModernBERT-base"  # conf/backbone/modernbert.yaml
EXPECTED = (
    f"backbone.name_or_path={MODERNBERT!r} must be downloaded from the Hugging Face hub, which is unreachable "
    "(offline). Run once with network or point backbone.name_or_path at a local directory."
)


class DataBuilt(Exception):
    pass


@pytest.fixture
def offline_empty_cache(tmp_path, monkeypatch) -> Path:
    """HF_HUB_OFFLINE=1 and an empty hub cache (whatever this machine has cached)."""
    cache = tmp_path / "hf-cache"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    return cache


@pytest.fixture
def no_data_building(monkeypatch) -> None:
    def built(*args, **kwargs):
        raise DataBuilt("BoolQ-clean was built")

    for name in ("boolq_clean_collection", "boolq_clean_triplets", "training_passages"):
        monkeypatch.setattr(vtlab.data.clean, name, built)


def _cached_snapshot(cache: Path, repo: str) -> None:
    """The hub cache's layout of one snapshot (huggingface_hub: models--org--name/refs/main → snapshots/<commit>)."""
    root = cache / f"models--{repo.replace('/', '--')}"
    (root / "refs").mkdir(parents=True)
    (root / "refs" / "main").write_text("0" * 40)
    (root / "snapshots" / ("0" * 40)).mkdir(parents=True)
    (root / "snapshots" / ("0" * 40) / "config.json").write_text("{}")


def test_an_uncached_hub_backbone_is_refused_before_any_data_is_built(tmp_path, offline_empty_cache, no_data_building):
    cfg = compose_config(["backbone=modernbert", "vocab=bert-uncased", f"paths.run_dir={tmp_path / 'run'}"])
    with pytest.raises(AssetError) as err, admit(cfg):
        pass
    assert str(err.value) == EXPECTED
    assert not any((tmp_path / "run").iterdir())  # locked while admitted, nothing written


def test_the_data_builder_is_what_runs_without_a_hub_model(tmp_path, offline_empty_cache, no_data_building):
    """The same admission on the offline quickstart's backbone reaches the data (so the test above can fail)."""
    cfg = compose_config(["vocab=bert-uncased", f"paths.run_dir={tmp_path / 'run'}"])
    with pytest.raises(DataBuilt), admit(cfg):
        pass


@pytest.mark.parametrize(
    "overrides,field,repo",
    [
        (["vocab=klue"], "vocab.tokenizer", "klue/roberta-base"),
        (["experiment=paper/main/modernbert-vt"], "backbone.name_or_path", MODERNBERT),
        (["+backbone.tokenizer=bert-base-uncased"], "backbone.tokenizer", "bert-base-uncased"),
    ],
)
def test_every_model_key_is_checked(tmp_path, offline_empty_cache, overrides, field, repo):
    cfg = compose_config([*overrides, f"paths.run_dir={tmp_path}"])
    with pytest.raises(AssetError, match=f"^{field}='{repo}' must be downloaded"):
        refuse_missing_hub_models(cfg)


@pytest.mark.parametrize("overrides", [[], ["backbone=splade-tiny", "vocab=native"], ["backbone=minilm"]])
def test_offline_assets_pass(tmp_path, offline_empty_cache, overrides):
    refuse_missing_hub_models(compose_config([*overrides, f"paths.run_dir={tmp_path}"]))


def test_a_cached_hub_model_passes_and_a_local_directory_is_not_a_hub_id(tmp_path, offline_empty_cache):
    _cached_snapshot(offline_empty_cache, MODERNBERT)
    refuse_missing_hub_models(compose_config(["backbone=modernbert", f"paths.run_dir={tmp_path}"]))
    local = tmp_path / "my-model"
    local.mkdir()
    refuse_missing_hub_models(compose_config([f"backbone.name_or_path={local}", f"paths.run_dir={tmp_path}"]))


def test_online_nothing_is_refused(tmp_path, offline_empty_cache, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr("vtlab.core.hub.reachable", lambda: True)
    refuse_missing_hub_models(compose_config(["backbone=modernbert", f"paths.run_dir={tmp_path}"]))
