"""vtlab.core.hub is the one way to the Hugging Face hub: one offline check, read as huggingface_hub reads its flags,
and one loader for hub datasets and dataset files. Every loader path answers offline under every spelling of the flags
(using only the local cache: nothing may reach the network) and online when no flag is set."""

from __future__ import annotations

import re
from pathlib import Path

import datasets.config
import huggingface_hub
import huggingface_hub.constants
import pytest
from helpers import ROOT

from vtlab.backbones.pretrained import Backbone
from vtlab.core import hub
from vtlab.core.errors import AssetError
from vtlab.data import collections, corpora, hf
from vtlab.export import hub as export_hub

FLAGS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")
OFFLINE_ENVS = [
    ("HF_HUB_OFFLINE", "1"),
    ("HF_HUB_OFFLINE", "true"),
    ("HF_HUB_OFFLINE", "TRUE"),
    ("HF_HUB_OFFLINE", "yes"),
    ("HF_DATASETS_OFFLINE", "1"),
]

# Each hub dataset path, with the words its error uses when offline and when online.
DATASET_PATHS = {
    "beir": (
        lambda: collections.load_hf_beir("scifact"),
        "HF offline mode is on and it is not cached",
        "needs network access to the Hugging Face hub or a cached copy",
    ),
    "mteb": (
        lambda: collections.load_mteb("scifact"),
        "HF offline mode is on and it is not cached",
        "needs network access to the Hugging Face hub or a cached copy",
    ),
    "st-file": (
        lambda: hf.st_msmarco_hard_negatives(),
        "HF offline mode is on and it is not cached",
        "needs the Hugging Face hub or a cached copy",
    ),
    "opensearch": (
        lambda: hf.opensearch_msmarco_hard_negatives(),
        "HF offline mode is on and it is not cached",
        "needs the Hugging Face hub or a cached copy",
    ),
    "wikipedia": (
        lambda: corpora.wikipedia(max_docs=1),
        "the Hugging Face hub is unreachable (offline)",
        "loading failed",
    ),
    "bookcorpus": (
        lambda: corpora.bookcorpus(max_docs=1),
        "the Hugging Face hub is unreachable (offline)",
        "loading failed",
    ),
}


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool]]:
    """No flag set, the hub reachable, and both underlying hub calls replaced by fakes that record whether they were
    made in cache-only mode ((what, offline)) and then fail as an uncached dataset does."""
    for name in FLAGS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hub, "reachable", lambda: True)
    made: list[tuple[str, bool]] = []

    def load_dataset(repo, config=None, split=None, streaming=False):
        cache_only = huggingface_hub.constants.HF_HUB_OFFLINE and datasets.config.HF_HUB_OFFLINE
        made.append((f"load_dataset {repo}", cache_only))
        raise FileNotFoundError(f"{repo} is not cached")

    def hf_hub_download(repo_id, filename, repo_type=None, local_files_only=False):
        made.append((f"hf_hub_download {repo_id}/{filename}", local_files_only))
        raise FileNotFoundError(f"{filename} is not cached")

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", hf_hub_download)
    return made


@pytest.mark.parametrize("value", ["1", "true", "TRUE", "True", "yes", "YES", "on", "On"])
def test_a_flag_is_on_as_huggingface_hub_reads_it(value: str) -> None:
    assert hub.TRUE_VALUES == huggingface_hub.constants.ENV_VARS_TRUE_VALUES
    assert hub.is_true(value)
    for off in (None, "", "0", "false", "no", "off", "2"):
        assert not hub.is_true(off)


@pytest.mark.parametrize("var,value", OFFLINE_ENVS)
@pytest.mark.parametrize("path", sorted(DATASET_PATHS))
def test_every_dataset_path_answers_offline_under_every_flag(path, var, value, calls, monkeypatch):
    load, offline_words, _ = DATASET_PATHS[path]
    monkeypatch.setenv(var, value)
    monkeypatch.setattr(hub, "reachable", lambda: pytest.fail("an offline flag is set: no probe of the hub"))
    with pytest.raises(AssetError) as err:
        load()
    assert offline_words in str(err.value) and "\n" not in str(err.value)
    assert calls and all(offline for _, offline in calls), calls  # cache only: nothing reached for the network


@pytest.mark.parametrize("path", sorted(DATASET_PATHS))
def test_every_dataset_path_goes_online_without_a_flag(path, calls):
    load, offline_words, online_words = DATASET_PATHS[path]
    with pytest.raises(AssetError) as err:
        load()
    assert online_words in str(err.value) and offline_words not in str(err.value)
    assert calls and not any(offline for _, offline in calls), calls


@pytest.mark.parametrize("path", sorted(DATASET_PATHS))
def test_an_unreachable_hub_without_a_flag_uses_the_cache_only(path, calls, monkeypatch):
    load, _, _ = DATASET_PATHS[path]
    monkeypatch.setattr(hub, "reachable", lambda: False)
    with pytest.raises(AssetError):
        load()
    assert calls and all(offline for _, offline in calls), calls


@pytest.mark.parametrize("var,value", [*OFFLINE_ENVS, ("TRANSFORMERS_OFFLINE", "1"), (None, None)])
def test_model_paths_share_the_offline_check(var, value, calls, monkeypatch):
    """Backbones load with local_files_only under the same flags (HF_DATASETS_OFFLINE names datasets only), and the
    export's push check says why there is no hub."""
    if var is not None:
        monkeypatch.setenv(var, value)
    expect_offline = var not in (None, "HF_DATASETS_OFFLINE")
    seen = []

    def loader(source, revision=None, local_files_only=False):
        seen.append(local_files_only)
        return "loaded"

    assert Backbone("org/model")._load_from(loader, "org/model", "backbone.name_or_path") == "loaded"
    assert seen == [expect_offline]
    assert hub.offline() is expect_offline and hub.offline(datasets=True) is (var is not None)
    assert export_hub._offline_reason() == (f"{var}={value}" if expect_offline else None)


def test_no_module_but_vtlab_hub_loads_hub_datasets_or_reads_the_offline_flags() -> None:
    """The one loader and the one check stay one: datasets.load_dataset, a dataset hf_hub_download and a read of the
    offline flags appear in vtlab/core/hub.py only."""
    pattern = re.compile(
        r"datasets\.load_dataset\(|from datasets import[^\n]*load_dataset|repo_type=\"dataset\""
        r"|environ(?:\.get)?[(\[]\s*[\"'](?:HF_HUB_OFFLINE|HF_DATASETS_OFFLINE|TRANSFORMERS_OFFLINE)"
    )
    found = [
        f"{p.relative_to(ROOT)}:{m.group(0)}"
        for p in sorted(Path(ROOT, "vtlab").rglob("*.py"))
        if p != Path(ROOT, "vtlab", "core", "hub.py")
        for m in pattern.finditer(p.read_text(encoding="utf-8"))
    ]
    assert found == []
