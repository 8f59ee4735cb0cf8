"""Caches derived from a local model or tokenizer (vocabulary transfers, MLM-adapted models, baseline evaluations) are
keyed by what the directory holds, not where it is (vtlab.core.integrity.content_key via vtlab.core.assets.source_key):
a model retrained into the same directory is not served what was derived from the old one, and vtlab's own sealed cache
entries keep their keys when the cache moves or is copied."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch

from vtlab.backbones import Backbone
from vtlab.core import integrity
from vtlab.core.assets import source_key
from vtlab.vocab.init import Mean
from vtlab.vocab.targets import PretrainedVocab
from vtlab.vocab.transfer import cached_transfer


def _model_dir(root: Path) -> Path:
    d = root / "my-model"
    (d / ".git").mkdir(parents=True)
    (d / "config.json").write_text('{"model_type": "bert"}')
    (d / "model.safetensors").write_bytes(b"\1" * 1000)
    (d / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    return d


def _later(path: Path, seconds: int = 5) -> None:
    """A rewrite as it happens in practice, some time after the first write (a file rewritten within one tick of the
    filesystem's clock keeps its mtime: a limit of keying by stat, not met by a model retrained in place)."""
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + seconds * 10**9))


def test_a_local_directory_is_keyed_by_its_files_not_its_path(tmp_path: Path) -> None:
    d = _model_dir(tmp_path)
    key = integrity.content_key(d)
    assert key.startswith("stat:") and str(tmp_path) not in key
    copy = tmp_path / "elsewhere" / "same-model"
    shutil.copytree(d, copy)  # copy2: sizes and modification times kept
    assert integrity.content_key(copy) == key
    (d / ".git" / "HEAD").write_text("ref: refs/heads/other\n")  # dot-named metadata is not the model
    assert integrity.content_key(d) == key
    (d / "model.safetensors").write_bytes(b"\2" * 1000)  # retrained in place: same size
    _later(d / "model.safetensors")
    assert integrity.content_key(d) != key
    (d / "model.safetensors").write_bytes(b"\2" * 999)  # and a different size
    assert integrity.content_key(d) not in (key, integrity.content_key(copy))


def test_a_sealed_entry_is_keyed_by_its_recorded_hashes_wherever_it_is(tmp_path: Path) -> None:
    d = _model_dir(tmp_path)
    integrity.seal(d)
    key = integrity.content_key(d)
    assert key.startswith("sealed:")
    moved = tmp_path / "new-cache" / "entry"
    shutil.copytree(d, moved, copy_function=shutil.copy)  # new modification times: still the same bytes
    assert integrity.content_key(moved) == key
    (moved / "model.safetensors").write_bytes(b"\3" * 1000)
    integrity.seal(moved)
    assert integrity.content_key(moved) != key


def test_source_keys_of_names_paths_and_backbones(tmp_path: Path, monkeypatch) -> None:
    d = _model_dir(tmp_path)
    tok = tmp_path / "tokenizer.json"
    tok.write_text("{}")
    assert source_key("bert-base-uncased") == "bert-base-uncased"  # a hub id (no such local path)
    assert source_key("asset:minilm") == "asset:minilm"
    assert source_key(None) is None
    assert source_key(str(d)) == f"local:{integrity.content_key(d)}"
    assert source_key(str(tok)).startswith("local:stat:") and str(tmp_path) not in source_key(str(tok))
    monkeypatch.setenv("HOME", str(tmp_path))
    assert source_key("~/my-model") == source_key(str(d))
    b = Backbone(str(d), tokenizer=str(d))
    assert b.cache_key() == f"{source_key(str(d))}|{source_key(str(d))}|None" and str(tmp_path) not in b.cache_key()
    assert source_key(b) == b.cache_key()
    assert Backbone("bert-base-uncased").cache_key() == "bert-base-uncased|None|None"  # hub ids: as before


@pytest.mark.usefixtures("empty_cache")
def test_a_model_retrained_in_place_gets_a_new_transfer_and_a_moved_cache_keeps_its_keys(
    tmp_path: Path, monkeypatch
) -> None:
    """The real thing: a user's model directory (SPLADE-tiny copied), transferred; the same directory rewritten with
    other weights is transferred again instead of being served the first transfer; and the transferred model's key
    (what the MLM stage's cache is keyed by) survives moving the whole cache."""
    src = Path(Backbone("asset:splade-tiny")._source(tokenizer=False)[0])
    mine = tmp_path / "my-splade"
    shutil.copytree(src, mine)
    vocab = PretrainedVocab(name="bert-uncased", tokenizer="asset:minilm", embedding_model="asset:splade-tiny")
    first = cached_transfer(Backbone(str(mine)), vocab, Mean())
    assert cached_transfer(Backbone(str(mine)), vocab, Mean()) == first  # unchanged: the cache serves it

    model = Backbone(str(mine)).load_model()
    name = "bert.encoder.layer.0.attention.self.query.weight"  # the body, which a transfer carries over as it is
    with torch.no_grad():
        model.get_parameter(name).mul_(2.0)  # "retrained"
    model.save_pretrained(mine)
    _later(mine / "model.safetensors")
    second = cached_transfer(Backbone(str(mine)), vocab, Mean())
    assert second != first
    w1 = Backbone(str(first)).load_model().get_parameter(name)
    w2 = Backbone(str(second)).load_model().get_parameter(name)
    assert torch.equal(w2, 2 * w1)  # the retrained weights, not the first transfer's

    key = Backbone(str(first)).cache_key()
    cache = Path(os.environ["VTLAB_CACHE"])
    moved = tmp_path / "moved-cache"
    shutil.copytree(cache, moved, copy_function=shutil.copy, symlinks=True)
    monkeypatch.setenv("VTLAB_CACHE", str(moved))
    again = moved / first.relative_to(cache)
    assert Backbone(str(again)).cache_key() == key and str(cache) not in key
