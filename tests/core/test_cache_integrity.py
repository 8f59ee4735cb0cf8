"""Cache entries are used only when complete and unchanged (a sha256 of every file, recorded when built): a truncated
or edited entry is rebuilt with one warning naming its path; the trained vocabulary is the same bytes every build."""

from __future__ import annotations

import hashlib
import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT

from vtlab.backbones import Backbone
from vtlab.core import integrity
from vtlab.vocab.init import Mean
from vtlab.vocab.targets import SPECIALS, CorpusWordPiece, PretrainedVocab
from vtlab.vocab.transfer import cached_transfer

pytestmark = pytest.mark.usefixtures("empty_cache")  # every test builds, damages and rebuilds its own entries


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _digests(directory: Path) -> dict[str, str]:
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


# ---- the marker itself -----------------------------------------------------------------------------------------


def test_seal_and_problem(tmp_path: Path) -> None:
    entry = tmp_path / "entry"
    (entry / "sub").mkdir(parents=True)
    (entry / "a.bin").write_bytes(b"weights" * 100)
    (entry / "sub" / "b.json").write_text("{}")
    assert integrity.problem(entry).startswith("no completion marker vtlab_complete.json")
    integrity.seal(entry)
    recorded = json.loads((entry / integrity.MARKER).read_text())["files"]
    assert recorded == {
        "a.bin": hashlib.sha256(b"weights" * 100).hexdigest(),
        "sub/b.json": hashlib.sha256(b"{}").hexdigest(),
    }
    assert integrity.problem(entry) is None
    _truncate(entry / "a.bin")
    assert integrity.problem(entry) == (
        "a.bin differs from the sha256 recorded when it was built (truncated or changed)"
    )
    (entry / "a.bin").unlink()
    assert integrity.problem(entry) == "a.bin is missing"
    (entry / integrity.MARKER).write_text("{not json")
    assert integrity.problem(entry) == (
        "unreadable completion marker vtlab_complete.json "
        "(invalid JSON (Expecting property name enclosed in double quotes at column 2))"
    )


def test_a_sealed_entry_holds_exactly_what_it_recorded(tmp_path: Path) -> None:
    entry = tmp_path / "entry"
    (entry / "sub").mkdir(parents=True)
    (entry / "model.bin").write_bytes(b"weights")
    integrity.seal(entry)
    assert integrity.problem(entry) is None
    # files a loader would read if they were there (the tokenizer's added tokens): not the entry that was built
    (entry / "added_tokens.json").write_text('{"x": 99999}')
    (entry / "sub" / "special_tokens_map.json").write_text("{}")
    assert integrity.problem(entry) == "added_tokens.json was not there when it was built (2 file(s) added)"
    (entry / "added_tokens.json").unlink()
    (entry / "sub" / "special_tokens_map.json").unlink()
    assert integrity.problem(entry) is None
    # a link, to a file or a folder, whatever it points at
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (entry / "vocab.txt").symlink_to(elsewhere / "vocab.txt")
    assert integrity.problem(entry) == "vocab.txt is a link (1 in all): a sealed entry holds only the files it recorded"
    (entry / "vocab.txt").unlink()
    (entry / "sub" / "more").symlink_to(elsewhere, target_is_directory=True)
    assert integrity.problem(entry).startswith("sub/more is a link")
    (entry / "sub" / "more").unlink()
    assert integrity.problem(entry) is None


# ---- the caches ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("damage", ["truncated", "added"])
def test_damaged_transfer_cache_is_rebuilt_with_one_warning(caplog, damage: str) -> None:
    vocab = PretrainedVocab(name="bert-uncased", tokenizer="asset:minilm", embedding_model="asset:splade-tiny")
    out = cached_transfer(Backbone("asset:splade-tiny"), vocab, Mean())
    built = _digests(out)
    if damage == "truncated":
        _truncate(out / "model.safetensors")
        why = "model.safetensors differs from the sha256 recorded when it was built (truncated or changed)"
    else:  # the round-three case: extra tokenizer files made the loader index past the embedding table
        (out / "added_tokens.json").write_text(json.dumps({"[NEW]": 40000}))
        (out / "special_tokens_map.json").write_text(json.dumps({"additional_special_tokens": ["[NEW]"]}))
        why = "added_tokens.json was not there when it was built (2 file(s) added)"
    with caplog.at_level(logging.WARNING, logger="vtlab"):
        again = cached_transfer(Backbone("asset:splade-tiny"), vocab, Mean())
    assert again == out
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [f"vocabulary transfer cache {out} is not usable ({why}): rebuilding it"]
    timed = ("transfer_report.json", integrity.MARKER)  # the report holds the build's seconds
    assert {k: v for k, v in _digests(out).items() if k not in timed} == {
        k: v for k, v in built.items() if k not in timed
    }  # deterministic
    assert integrity.problem(out) is None
    assert Backbone(str(out)).load_model().get_input_embeddings().weight.shape[0] == 30522
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]  # no temp dir left behind


@pytest.mark.train
def test_damaged_mlm_cache_is_retrained(caplog) -> None:
    from omegaconf import OmegaConf

    from vtlab.backbones import TinyModernBert
    from vtlab.models.mlm import train_cached

    recipe = OmegaConf.create(
        {
            "steps": 2,
            "batch_size": 4,
            "max_length": 32,
            "mlm_probability": 0.3,
            "lr": 1e-4,
            "weight_decay": 0.0,
            "scheduler": None,
            "warmup_steps": 0,
            "corpus": {"_target_": "vtlab.data.corpora.boolq_passages", "_partial_": True, "max_docs": 50},
        }
    )
    out, _ = train_cached(TinyModernBert(), recipe, seed=0)
    (out / "tokenizer.json").unlink()
    with caplog.at_level(logging.WARNING, logger="vtlab"):
        again, report = train_cached(TinyModernBert(), recipe, seed=0)
    assert again == out and report["steps"] == 2 and integrity.problem(out) is None
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        f"mlm cache {out} is not usable (tokenizer.json is missing): retraining it"
    ]


def test_damaged_vocabulary_cache_is_retrained(caplog) -> None:
    from vtlab.data.corpora import boolq_passages

    vocab = CorpusWordPiece("corpus-wordpiece", vocab_size=1000, corpus=list(boolq_passages()[:500]))
    path = vocab.materialize()
    _truncate(path / "tokenizer.json")
    with caplog.at_level(logging.WARNING, logger="vtlab.vocab.targets"):
        tok = vocab.load_tokenizer()
    assert tok.convert_ids_to_tokens([0, 1, 2, 3, 4]) == list(SPECIALS)
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        f"vocab=corpus-wordpiece: cached tokenizer {path} is not usable (tokenizer.json differs from the sha256 "
        "recorded when it was built (truncated or changed)): retraining it"
    ]


def test_truncated_weights_in_a_model_directory_name_the_file(tmp_path: Path) -> None:
    from vtlab.core.errors import AssetError

    model_dir = Backbone("asset:splade-tiny")._source(tokenizer=False)[0]
    copy = tmp_path / "model"
    copy.mkdir()
    for f in Path(model_dir).iterdir():
        if f.is_file():
            (copy / f.name).write_bytes(f.read_bytes())
    _truncate(copy / "model.safetensors")
    with pytest.raises(AssetError) as ei:
        Backbone(str(copy)).load_model()
    assert str(ei.value).startswith(f"{copy / 'model.safetensors'}: cannot read the weights (")
    assert str(ei.value).endswith(
        "); the file is truncated or damaged (config key: backbone.name_or_path): rebuild or re-download it"
    )


def _flip_last_data_byte(path: Path) -> None:
    """Changes one byte of the last member's data in a zip (an .npz): sizes and structure stay valid."""
    import zipfile

    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as z:
        last = z.infolist()[-1]
    at = last.header_offset + 30 + len(last.filename.encode()) + len(last.extra) + last.compress_size - 1
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


IDF_CORPUS = ["the cat sat on the mat", "a dog barked", "the cat and the dog", "birds sing at dawn"]


@pytest.mark.parametrize("damage", ["truncated", "one byte changed", "another corpus's table"])
def test_damaged_idf_cache_is_recomputed_with_one_warning(tmp_path: Path, caplog, damage: str) -> None:
    import numpy as np
    from transformers import AutoTokenizer

    from vtlab.core.assets import asset_path, cache_dir
    from vtlab.models.idf import IdfTable, document_frequencies

    tok = AutoTokenizer.from_pretrained(str(asset_path("minilm")))
    first = IdfTable.from_corpus(tok, IDF_CORPUS)
    [path] = list(cache_dir("idf").glob("*.npz"))
    built = path.read_bytes()
    if damage == "truncated":
        _truncate(path)
    elif damage == "one byte changed":
        _flip_last_data_byte(path)  # n_docs, the last member
    else:  # a valid table of the wrong size and count (a colleague's file copied under this key)
        np.savez(path, df=np.ones(10, dtype=np.int64), n_docs=np.int64(99))
    with caplog.at_level(logging.WARNING, logger="vtlab"):
        again = IdfTable.from_corpus(tok, IDF_CORPUS)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and warnings[0].startswith(f"idf cache {path} is damaged (")
    assert warnings[0].endswith("): recomputing it")
    df, n_docs = document_frequencies(tok, IDF_CORPUS)  # the uncached computation
    assert n_docs == 4 and np.array_equal(again.df, df) and np.array_equal(again.weights, first.weights)
    assert path.read_bytes() == built  # rewritten whole
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp file
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="vtlab"):
        IdfTable.from_corpus(tok, IDF_CORPUS)
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]  # now used as it is


def test_damaged_baseline_eval_cache_is_evaluated_again(caplog) -> None:
    from vtlab.core.assets import cache_dir
    from vtlab.evaluation.baseline import baseline_metrics

    calls = []

    def evaluation(encoder):
        calls.append(encoder)
        return {"nDCG@10": 0.5, "R@10": 0.75, "n_queries": 3}

    def cached(dataset: str) -> dict[str, float]:
        config = {"_target_": "vtlab.evaluation.retrieval.RetrievalEvaluation", "k": 10}
        encoder = {"backbone": {"name": "splade-tiny"}, "max_length": 32}
        return baseline_metrics(
            evaluation, object, backbone_key="tiny", eval_config=config, encoder_config=encoder, dataset=dataset
        )

    assert cached("boolq") == {"nDCG@10": 0.5, "R@10": 0.75, "n_queries": 3}
    [path] = list(cache_dir("evals").glob("*.json"))
    assert cached("boolq")["R@10"] == 0.75 and len(calls) == 1  # cached
    for damaged in (path.read_text()[:20], '{"nDCG@10": "0.5"}', "[]"):
        path.write_text(damaged)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="vtlab"):
            assert cached("boolq") == {"nDCG@10": 0.5, "R@10": 0.75, "n_queries": 3}
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and warnings[0].startswith(f"baseline cache {path} is damaged ("), damaged
        assert warnings[0].endswith("): evaluating the baseline again")
        assert json.loads(path.read_text()) == {"nDCG@10": 0.5, "R@10": 0.75, "n_queries": 3}
    assert len(calls) == 4


# ---- determinism ---------------------------------------------------------------------------------------------------

_BUILD = """
import sys
from vtlab.data.corpora import boolq_passages
from vtlab.vocab.targets import CorpusWordPiece
CorpusWordPiece("corpus-wordpiece", vocab_size=5000, corpus=list(boolq_passages()[:3000]))._train().save_pretrained(
    sys.argv[1])
"""


@pytest.mark.cli
def test_corpus_wordpiece_builds_the_same_bytes_every_time(tmp_path: Path) -> None:
    """Two builds in two processes (each with its own hash-map seeds, which made the trainer number tokens and break
    ties differently: 3 tokens and 4,918 ids differed on the full BoolQ corpus) give the same files, byte for byte."""
    builds = []
    for name in ("first", "second"):
        subprocess.run([sys.executable, "-c", _BUILD, str(tmp_path / name)], cwd=ROOT, check=True, timeout=300)
        builds.append(_digests(tmp_path / name))
    assert builds[0] == builds[1] and "tokenizer.json" in builds[0]
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast.from_pretrained(str(tmp_path / "first"))
    assert len(tok) == 5000 and tok.convert_ids_to_tokens([0, 1, 2, 3, 4]) == list(SPECIALS)
    assert set(tok.all_special_tokens) == set(SPECIALS)  # the "##c" pinned while training are plain tokens again
    assert tok.tokenize("a ##ing b") == ["a", "#", "#", "in", "##g", "b"]
