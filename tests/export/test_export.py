"""Interop: vtlab encoders round-trip through sentence-transformers' own SparseEncoder (same vectors as vtlab's, to
1e-5, on BoolQ), document vectors for Anserini / OpenSearch (hand-checked, streaming, atomic), evaluation of a saved
inference-free directory with its idf.json, and idf.json from a hub repo (offline: cached, known-absent, one-line
error)."""

import copy
import json
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from helpers import compose_config, need_module
from hydra.utils import instantiate
from omegaconf import OmegaConf

from vtlab.backbones import Backbone, TinyRoberta
from vtlab.core.errors import VtlabError
from vtlab.data.boolq import boolq_collection
from vtlab.data.collections import iter_corpus_jsonl
from vtlab.export.sentence_transformers import export_sentence_transformers
from vtlab.export.vectors import AnseriniJsonVectors, OpenSearchBulk, escape_feature, unescape_feature, write_vectors
from vtlab.models.encoder import SpladeEncoder
from vtlab.models.inference_free import InferenceFreeEncoder
from vtlab.stages.pipeline import run, run_or_exit
from vtlab.vocab.targets import Normalizer

pytestmark = pytest.mark.usefixtures("shared_cache")

TOL = 1e-5
# sentence-transformers computes in fp32: vtlab's side is pinned to fp32 too, or precision=auto would pick bf16 on a CPU
# with native bf16 and the comparison would measure bf16 rounding (~0.06), not the export
REF = "fp32"
# edge cases next to the BoolQ sample: specials written in the text, repeats, a query longer than query_max_length
EXTRA_QUERIES = ["is [SEP] the the [MASK] same same same", " ".join(["why"] * 20 + [f"w{i}" for i in range(70)]), ""]


@pytest.fixture(scope="module")
def boolq():
    coll = boolq_collection("validation")
    return list(coll.queries.values())[:32], list(coll.corpus.values())[:32], coll


@pytest.fixture(scope="module")
def st():
    """sentence-transformers (a dev dependency): only the round-trip tests need it."""
    return need_module("sentence_transformers")


@pytest.fixture(scope="module")
def splade_tiny():
    """(model, tokenizer) of SPLADE-tiny, loaded once; tests that change weights take a copy."""
    b = Backbone("asset:splade-tiny")
    return b.load_model(), b.load_tokenizer()


def dense(x) -> np.ndarray:
    return x.to_dense().cpu().numpy() if isinstance(x, torch.Tensor) else x.toarray()


def max_diff(model, encoder, texts, side: str) -> float:
    """Largest |ST − vtlab| weight over all texts and vocabulary entries."""
    encode = model.encode_query if side == "query" else model.encode_document
    ours = encoder.encode(texts, side=side, show_progress=False)
    theirs = dense(encode(texts, convert_to_sparse_tensor=False))
    assert theirs.shape == ours.shape
    diff = float(np.abs(theirs - ours.toarray()).max())
    print(f"\n{type(encoder).__name__} {side}: max |ST - vtlab| = {diff:.3g} over {len(texts)} texts")
    return diff


# ---- sentence-transformers round trip ----------------------------------------------------------------------------
@pytest.mark.slow
def test_siamese_splade_tiny_round_trips_through_sentence_transformers(st, boolq, splade_tiny, tmp_path):
    queries, docs, _ = boolq
    enc = SpladeEncoder(copy.deepcopy(splade_tiny[0]), splade_tiny[1], precision=REF)
    with torch.no_grad():  # an APC-like per-term bias shift: it must travel with the export
        gen = torch.Generator().manual_seed(0)
        enc.output_bias().add_(0.5 * torch.randn(enc.vocab_size, generator=gen))
    out = export_sentence_transformers(enc, tmp_path / "st")
    model = st.SparseEncoder(str(out), device="cpu")
    assert [type(m).__name__ for m in model] == ["Transformer", "SpladePooling"]
    assert model[1].activation_function == "relu" and model[1].pooling_strategy == "max"
    assert max_diff(model, enc, queries + EXTRA_QUERIES, "query") < TOL
    assert max_diff(model, enc, docs, "doc") < TOL
    # a plain encode() (no task) is the document side, truncated at doc_max_length like vtlab's
    assert (
        np.abs(
            dense(model.encode(docs[:4], convert_to_sparse_tensor=False))
            - enc.encode(docs[:4], side="doc", show_progress=False).toarray()
        ).max()
        < TOL
    )
    # exporting again into a non-empty directory needs overwrite
    with pytest.raises(VtlabError, match="export.overwrite=true"):
        export_sentence_transformers(enc, out)
    export_sentence_transformers(enc, out, overwrite=True)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".st")]  # no temp/old directories left


def _saved_run(tmp_path: Path, encoder, overrides: list[str]) -> Path:
    """A run directory as fine-tuning leaves it: model/ (+ idf.json) and .hydra/config.yaml."""
    run_dir = tmp_path / "run"
    encoder.save_pretrained(run_dir / "model")
    (run_dir / ".hydra").mkdir(parents=True)
    OmegaConf.save(compose_config(overrides), run_dir / ".hydra" / "config.yaml")
    return run_dir


@pytest.mark.train
def test_inference_free_run_dir_exports_idf_query_router(st, boolq, splade_tiny, tmp_path):
    """`stage=export run_dir=...` on a saved inference-free run: IDF queries (SparseStaticEmbedding), SPLADE docs."""
    queries, docs, coll = boolq
    enc = InferenceFreeEncoder(*splade_tiny, precision=REF)
    enc.fit_idf(list(coll.corpus.values())[:300])
    run_dir = _saved_run(tmp_path, enc, ["model=inference-free", "backbone=splade-tiny", "vocab=native"])
    cfg = compose_config(["stage=export", f"run_dir={run_dir}", f"paths.run_dir={tmp_path / 'export-run'}"])
    state = run(cfg)
    assert state["export_dir"] == (run_dir / "sparse-encoder").absolute()
    model = st.SparseEncoder(str(run_dir / "sparse-encoder"), device="cpu")
    router = model[0]
    assert type(router).__name__ == "Router"
    assert [type(m).__name__ for m in router.sub_modules["query"]] == ["SparseStaticEmbedding"]
    assert [type(m).__name__ for m in router.sub_modules["document"]] == ["Transformer", "SpladePooling"]
    # compared with the encoder in memory, not the one rebuilt from the run: the idf.json round trip is covered too
    assert max_diff(model, enc, queries + EXTRA_QUERIES, "query") < TOL
    assert max_diff(model, enc, docs, "doc") < TOL
    manifest = json.loads((run_dir / "sparse-encoder" / "vtlab_export.json").read_text())
    assert manifest["encoder"]["kind"] == "inference-free"
    assert manifest["source"] == {"run_dir": "..", "model_dir": "../model"}  # relative: no machine path


@pytest.mark.slow
def test_two_tower_double_log_and_input_normalizer_on_a_cased_bpe(st, tmp_path):
    """Separate query network (Router), double_log → log1p_relu, lowercase + blank prefix on a byte-level BPE
    (where both change the tokens). Python's str.lower and the Lowercase normalizer differ on Greek final sigma
    only, so no such text here."""
    enc = SpladeEncoder.from_backbone(
        TinyRoberta(),
        shared=False,
        double_log=True,
        preprocess=Normalizer(True, True),
        query_max_length=16,
        doc_max_length=32,
        precision=REF,
    )
    with torch.no_grad():
        for p in enc.query_model.parameters():
            p.add_(0.01)
    texts = ["Is Paris the CAPITAL of France?", "The Quick brown Fox", "Straße İstanbul", "HELLO"]
    model = st.SparseEncoder(str(export_sentence_transformers(enc, tmp_path / "st")), device="cpu")
    assert model[0].sub_modules["query"][1].activation_function == "log1p_relu"
    assert max_diff(model, enc, texts, "query") < TOL
    assert max_diff(model, enc, texts, "doc") < TOL
    # the normalizer matters here: without it the vectors differ
    raw = SpladeEncoder(
        enc.model, enc.tokenizer, query_model=enc.query_model, query_max_length=16, doc_max_length=32, double_log=True
    )
    assert (
        np.abs(
            raw.encode(texts, show_progress=False).toarray() - enc.encode(texts, show_progress=False).toarray()
        ).max()
        > 0.01
    )


def test_unexportable_settings_fail_with_one_line_naming_the_key(st, boolq, splade_tiny, tmp_path):
    enc = InferenceFreeEncoder(*splade_tiny, count_repeats=True)
    enc.fit_idf(boolq[1])
    with pytest.raises(VtlabError, match="count_repeats"):
        export_sentence_transformers(enc, tmp_path / "a")
    enc = SpladeEncoder(*splade_tiny, preprocess=str.strip)
    with pytest.raises(VtlabError, match="vocab.preprocess"):
        export_sentence_transformers(enc, tmp_path / "b")
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing written, no temp directory left


@pytest.mark.train
def test_cli_bad_export_format_is_one_line(tmp_path, capsys):
    cfg = compose_config(
        ["stage=export", "vocab=native", f"paths.run_dir={tmp_path}", "export.vectors.formats=[anserini,parquet]"]
    )
    with pytest.raises(SystemExit) as exc:
        run_or_exit(cfg)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "vtlab: error: export.vectors.formats: unknown format 'parquet' (choose from anserini, opensearch, "
        "elasticsearch, qdrant)"
    ]


def test_export_formats_are_target_nodes_of_the_config(tmp_path):
    """export.vectors.formats=[name] instantiates the node export.vectors.<name> (its `_target_` and options), writing
    into <dir>/<name>/: no name → class table in the code, and a config may add a format by adding a node."""
    from vtlab.export.vectors import QdrantPoints, format_names, vector_formats

    cfg = compose_config(
        [
            "stage=export",
            "export.vectors.formats=[anserini,opensearch,elasticsearch,qdrant]",
            "export.vectors.queries=true",
            "export.vectors.anserini.scale=7",
            "+export.vectors.mine={_target_: vtlab.export.vectors.QdrantPoints, vector: v2}",
        ]
    )
    assert format_names(cfg.export.vectors) == ["anserini", "opensearch", "elasticsearch", "qdrant", "mine"]
    docs, queries = vector_formats(cfg, tmp_path)
    assert [(type(f).__name__, f.path.relative_to(tmp_path).as_posix()) for f in docs + queries] == [
        ("AnseriniJsonVectors", "anserini/docs.jsonl"),
        ("OpenSearchBulk", "opensearch/bulk.ndjson"),
        ("OpenSearchBulk", "elasticsearch/bulk.ndjson"),
        ("QdrantPoints", "qdrant/points.jsonl"),
        ("AnseriniQueries", "anserini/queries.tsv"),
        ("QdrantQueries", "qdrant/queries.jsonl"),
    ]
    assert docs[0].scale == 7 and docs[1].field_type == "rank_features" and docs[2].field_type == "sparse_vector"
    cfg.export.vectors.formats = ["mine"]
    (mine,), _ = vector_formats(cfg, tmp_path)
    assert isinstance(mine, QdrantPoints) and mine.vector == "v2" and mine.path == tmp_path / "mine" / "points.jsonl"
    cfg.export.vectors.formats = ["dir"]  # a key of export.vectors, but no format
    with pytest.raises(
        VtlabError,
        match=r"unknown format 'dir' \(choose from anserini, opensearch, elasticsearch, "
        r"qdrant, mine\)",
    ):
        vector_formats(cfg, tmp_path)


# ---- document vectors for engines --------------------------------------------------------------------------------
class _Tok:
    def __init__(self, tokens):
        self.vocab = {t: i for i, t in enumerate(tokens)}

    def get_vocab(self):
        return dict(self.vocab)

    def __len__(self):
        return len(self.vocab)


class _StubEncoder:
    """Fixed vectors per text; records the size of each encode call and how many documents were pulled by then."""

    def __init__(self, tokens, rows, fail_on_call=None):
        self.tokenizer, self.vocab_size, self.rows = _Tok(tokens), len(tokens), rows
        self.calls, self.fail_on_call, self.pulled = [], fail_on_call, 0

    def encode(self, texts, side, batch_size=64, show_progress=True):
        assert side == "doc"
        self.calls.append((len(texts), self.pulled))
        if self.fail_on_call == len(self.calls):
            raise RuntimeError("boom")
        m = np.zeros((len(texts), self.vocab_size), dtype=np.float32)
        for r, t in enumerate(texts):
            for i, w in self.rows[t].items():
                m[r, i] = w
        return sp.csr_matrix(m)


TOKENS = ["[PAD]", "a", "u.s.", "50%", "b"]
ROWS = {
    "first doc": {1: 1.234375, 2: 0.5, 3: 0.125, 4: 0.00390625},  # all exact in float32
    "second": {4: 2.0},
    "third": {},
    "fourth": {2: 0.75},
    "fifth": {1: 0.01},
}


def _docs(enc):
    for i, text in enumerate(ROWS):
        enc.pulled += 1
        yield f"d{i}", text


def test_anserini_and_opensearch_lines_hand_checked_streaming(tmp_path):
    enc = _StubEncoder(TOKENS, ROWS)
    ans = AnseriniJsonVectors(tmp_path / "anserini" / "docs.jsonl", scale=100)
    osb = OpenSearchBulk(tmp_path / "os" / "bulk.ndjson", index="idx", decimals=5)
    assert write_vectors(enc, _docs(enc), [ans, osb], chunk_size=2, show_progress=False) == 5
    # streaming: chunks of 2, each encoded once its own documents were pulled (never the whole corpus first)
    assert enc.calls == [(2, 2), (2, 4), (1, 5)]
    lines = [json.loads(x) for x in ans.path.read_text().splitlines()]
    # floor(w*100 + 0.5): 123.4375 → 123, 12.5 → 13 (half up), 0.390625 → 0 dropped, 1.0 → 1
    assert lines[0] == {"id": "d0", "contents": "first doc", "vector": {"a": 123, "u.s.": 50, "50%": 13}}
    assert [x["vector"] for x in lines[1:]] == [{"b": 200}, {}, {"u.s.": 75}, {"a": 1}]
    assert all(isinstance(v, int) for x in lines for v in x["vector"].values())
    os_lines = [json.loads(x) for x in osb.path.read_text().splitlines()]
    assert len(os_lines) == 10
    assert os_lines[0] == {"index": {"_index": "idx", "_id": "d0"}}
    assert os_lines[1] == {
        "text": "first doc",
        "sparse_embedding": {"a": 1.23438, "u%2Es%2E": 0.5, "50%25": 0.125, "b": 0.00391},
    }
    assert os_lines[5] == {"text": "third", "sparse_embedding": {}}
    assert json.loads((tmp_path / "os" / "mapping.json").read_text()) == {
        "mappings": {"properties": {"sparse_embedding": {"type": "rank_features"}, "text": {"type": "text"}}}
    }
    # integer weights for OpenSearch too, and no index name in the action line
    osq = OpenSearchBulk(tmp_path / "os2" / "bulk.ndjson", scale=100, text_field=None)
    write_vectors(_StubEncoder(TOKENS, ROWS), ((f"d{i}", t) for i, t in enumerate(ROWS)), [osq], show_progress=False)
    first = [json.loads(x) for x in osq.path.read_text().splitlines()[:2]]
    assert first == [{"index": {"_id": "d0"}}, {"sparse_embedding": {"a": 123, "u%2Es%2E": 50, "50%25": 13}}]


def test_feature_name_escaping_is_reversible_and_collisions_are_refused(splade_tiny, tmp_path):
    vocab = list(splade_tiny[1].get_vocab())
    assert any("." in t for t in vocab)  # ".", "...", "u.s" exist in bert-base-uncased
    names = [escape_feature(t) for t in vocab]
    assert not any("." in n for n in names) and len(set(names)) == len(vocab)
    assert [unescape_feature(n) for n in names] == vocab
    for tricky in ["%2E", "%.", "a%25.b", "%%..", "."]:
        assert unescape_feature(escape_feature(tricky)) == tricky
    clash = _StubEncoder(["[PAD]", "a.", "a__"], {"x": {1: 1.0}})
    with pytest.raises(VtlabError, match="'a.' and 'a__'"):
        write_vectors(clash, [("d", "x")], [OpenSearchBulk(tmp_path / "b.ndjson", dot="__")], show_progress=False)
    with pytest.raises(VtlabError, match="opensearch.field"):
        OpenSearchBulk(tmp_path / "b.ndjson", field="my.vec")


def test_vector_files_are_all_or_nothing(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_text("old\n")
    enc = _StubEncoder(TOKENS, ROWS, fail_on_call=2)
    with pytest.raises(RuntimeError, match="boom"):
        write_vectors(
            enc,
            _docs(enc),
            [AnseriniJsonVectors(path), OpenSearchBulk(tmp_path / "bulk.ndjson")],
            chunk_size=2,
            show_progress=False,
        )
    assert path.read_text() == "old\n"  # the previous file is untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["docs.jsonl"]  # no temp files, no partial bulk file


def test_beir_corpus_is_streamed_with_titles(tmp_path):
    f = tmp_path / "corpus.jsonl"
    f.write_text('{"_id": "1", "title": "T", "text": "body"}\n\n{"_id": 2, "text": "x"}\n{"_id": "3"}\n')
    it = iter_corpus_jsonl(f)
    assert next(it) == ("1", "T body") and next(it) == ("2", "x")
    with pytest.raises(VtlabError, match=r"corpus.jsonl:4: missing field 'text'"):
        next(it)


@pytest.mark.train
def test_stage_export_from_backbone_writes_model_and_engine_files(st, tmp_path):
    """`stage=export backbone=splade-tiny vocab=native export.out=DIR` + both vector formats, on 20 BoolQ passages;
    the Anserini integers are the sentence-transformers model's own document weights × 100, rounded."""
    out = tmp_path / "st"
    cfg = compose_config(
        [
            "stage=export",
            "backbone=splade-tiny",
            "vocab=native",
            f"export.out={out}",
            f"paths.run_dir={tmp_path / 'run'}",
            "export.vectors.formats=[anserini,opensearch]",
            "export.vectors.chunk_size=8",
            "+eval.collection.max_docs=20",
            "+eval.collection.max_queries=5",
            "model.encoder.precision=fp32",
        ]
    )  # compared with ST's fp32 below, also on native-bf16 CPUs
    state = run(cfg)
    corpus = instantiate(cfg.eval).collection.corpus
    assert len(corpus) == 20
    vectors = tmp_path / "run" / "vectors"
    lines = [json.loads(x) for x in (vectors / "anserini" / "docs.jsonl").read_text().splitlines()]
    assert [x["id"] for x in lines] == list(corpus) and [x["contents"] for x in lines] == list(corpus.values())
    bulk = (vectors / "opensearch" / "bulk.ndjson").read_text().splitlines()
    assert len(bulk) == 40 and not any("." in k for x in bulk[1::2] for k in json.loads(x)["sparse_embedding"])
    model = st.SparseEncoder(str(out), device="cpu")
    theirs = dense(model.encode_document(list(corpus.values()), convert_to_sparse_tensor=False))
    vocab = model.tokenizer.get_vocab()
    for row, x in zip(theirs, lines):
        got = np.zeros_like(row)
        for token, w in x["vector"].items():
            got[vocab[token]] = w
        assert np.abs(got - row * 100).max() <= 0.5 + 1e-3  # every weight within rounding of ST's, none missing
    assert state["vector_files"][0] == vectors / "anserini" / "docs.jsonl"


# ---- evaluating external checkpoints ------------------------------------------------------------------------------
@pytest.mark.train
def test_evaluate_saved_inference_free_directory_uses_its_idf_json(boolq, splade_tiny, tmp_path):
    """`model=inference-free backbone.name_or_path=<dir> stage=evaluate`: the table comes from <dir>/idf.json, not
    from the evaluation corpus (the file keeps only half of the vocabulary, so the query vectors tell them apart)."""
    _, _, coll = boolq
    enc = InferenceFreeEncoder(*splade_tiny)
    table = enc.fit_idf(list(coll.corpus.values())[:300])
    table.weights[::2] = 0.0  # a table no corpus gives
    enc.set_idf(table)
    saved = enc.save_pretrained(tmp_path / "external")
    assert (saved / "idf.json").is_file()
    cfg = compose_config(
        [
            "model=inference-free",
            f"backbone.name_or_path={saved}",
            "stage=evaluate",
            "vocab=native",
            "logger=none",
            "baseline=false",
            f"paths.run_dir={tmp_path / 'run'}",
            "+eval.collection.max_queries=40",
            "+eval.collection.max_docs=150",
        ]
    )
    metrics = run(cfg)["metrics"]
    queries = list(instantiate(cfg.eval).collection.queries.values())
    loaded = instantiate(cfg.model.encoder)  # the encoder this config builds
    assert loaded.idf_table.source == str(saved / "idf.json")
    q = loaded.encode(queries, side="query", show_progress=False)
    assert metrics["query_active_dims"] == pytest.approx(q.getnnz(axis=1).mean())
    fitted = InferenceFreeEncoder(loaded.model, loaded.tokenizer)  # what evaluation does without a file
    fitted.fit_corpus(list(instantiate(cfg.eval).collection.corpus.values()))
    assert (
        fitted.encode(queries, side="query", show_progress=False).getnnz(axis=1).mean() > 1.5 * q.getnnz(axis=1).mean()
    )
    assert 0.0 < metrics["nDCG@10"] <= 1.0


@pytest.fixture()
def hub_cache(tmp_path, monkeypatch, splade_tiny):
    """An empty hub cache, the hub offline, and a hub id whose model 'loads' (splade-tiny stands in)."""
    import huggingface_hub.constants as c

    monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model, tok = splade_tiny
    monkeypatch.setattr(Backbone, "load_model", lambda self: model)
    monkeypatch.setattr(Backbone, "load_tokenizer", lambda self: tok)
    return tmp_path / "hub" / "models--vtlab-test--splade-if", tok


def _cache_entry(repo: Path, folder: str, content: str | None) -> Path:
    commit = "0123456789abcdef0123456789abcdef01234567"
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    path = repo / folder / commit / "idf.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content or "")
    return path


def test_hub_idf_json_offline_cached_absent_or_one_line_error(hub_cache):
    repo, tok = hub_cache
    with pytest.raises(
        VtlabError,
        match=r"backbone.name_or_path='vtlab-test/splade-if': cannot check the hub for "
        r"its idf.json \(offline\)",
    ):
        InferenceFreeEncoder.from_backbone(Backbone("vtlab-test/splade-if"))
    # use_idf=false never asks
    assert not InferenceFreeEncoder.from_backbone(Backbone("vtlab-test/splade-if"), use_idf=False).needs_idf
    # a file the hub said does not exist (cached as such): no table, computed later from a corpus
    marker = _cache_entry(repo, ".no_exist", None)
    assert InferenceFreeEncoder.from_backbone(Backbone("vtlab-test/splade-if")).needs_idf
    marker.unlink()
    path = _cache_entry(repo, "snapshots", json.dumps({"apple": 2.5, "banana": 1.0}))
    enc = InferenceFreeEncoder.from_backbone(Backbone("vtlab-test/splade-if"))
    assert enc.idf_table.source == str(path)
    q = enc.encode(["apple banana cherry"], side="query", show_progress=False).toarray()[0]
    v = tok.get_vocab()
    assert {i: round(float(q[i]), 6) for i in q.nonzero()[0]} == {v["apple"]: 2.5, v["banana"]: 1.0}


def test_export_stage_config_composes_and_resolves(tmp_path):
    cfg = compose_config(["stage=export", f"paths.run_dir={tmp_path}"])
    OmegaConf.to_container(cfg, resolve=True)
    assert cfg.run_dir is None and list(cfg.export.vectors.formats) == []
    assert cfg.stage.steps[0]._target_ == "vtlab.stages.export.run"


# ---- model card ---------------------------------------------------------------------------------------------------
@pytest.mark.train
def test_exported_model_carries_a_card_with_command_metrics_and_loading(st, splade_tiny, tmp_path):
    """README.md in the SparseEncoder directory: the training command (the run's .hydra/overrides.yaml), the run's
    eval/<collection>/metrics.json values, and how to load it (SparseEncoder) and feed an engine."""
    enc = SpladeEncoder(*splade_tiny)
    train = ["backbone=splade-tiny", "vocab=native", "loss=margin-mse"]
    run_dir = _saved_run(tmp_path, enc, ["backbone=splade-tiny", "vocab=native"])
    (run_dir / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in train))
    for coll, value in (("boolq", 0.61234), ("scifact", 0.25)):
        (run_dir / "eval" / coll).mkdir(parents=True)
        (run_dir / "eval" / coll / "metrics.json").write_text(json.dumps({"metrics": {"nDCG@10": value, "R@100": 0.9}}))
    cfg = compose_config(["stage=export", f"run_dir={run_dir}", f"paths.run_dir={tmp_path / 'export-run'}"])
    run(cfg)
    card = (run_dir / "sparse-encoder" / "README.md").read_text()
    assert "python -m vtlab backbone=splade-tiny vocab=native loss=margin-mse" in card
    assert "| boolq | nDCG@10 | 0.6123 |" in card and "| scifact | nDCG@10 | 0.2500 |" in card
    assert "| boolq | R@100 | 0.9000 |" in card
    assert "SparseEncoder(" in card and "JsonVectorCollection" in card and "rank_features" in card
    assert "siamese" in card and "30522" in card  # what it is: kind and vocabulary size
    assert "## ONNX" not in card  # export.onnx=false: no ONNX section, no onnx/ directory
    assert not (run_dir / "sparse-encoder" / "onnx").exists()
    st.SparseEncoder(str(run_dir / "sparse-encoder"), device="cpu")  # the card does not break loading


@pytest.mark.train
def test_model_card_false_leaves_sentence_transformers_own_readme(st, splade_tiny, tmp_path):
    run_dir = _saved_run(tmp_path, SpladeEncoder(*splade_tiny), ["backbone=splade-tiny", "vocab=native"])
    cfg = compose_config(
        ["stage=export", f"run_dir={run_dir}", f"paths.run_dir={tmp_path / 'export-run'}", "export.model_card=false"]
    )
    run(cfg)
    readme = run_dir / "sparse-encoder" / "README.md"
    assert not readme.exists() or "## Search engines" not in readme.read_text()
