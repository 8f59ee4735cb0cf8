"""Evaluation: metrics against hand arithmetic and an independent brute-force ranking; files; configs."""

import functools
import json
import math
import os
from collections import Counter
from pathlib import Path

import ir_measures
import numpy as np
import pytest
import scipy.sparse as sp
from hydra.utils import instantiate
from omegaconf import OmegaConf
from rich.console import Console

from vtlab.core.atomic import write_json
from vtlab.core.errors import VtlabError
from vtlab.data.collections import Collection
from vtlab.evaluation import (
    RetrievalEvaluation,
    compute_metrics,
    evaluate,
    results_table,
    sparsity_stats,
    write_trec_run,
)
from vtlab.index import InvertedIndex, to_run

CONF_EVAL = Path(__file__).resolve().parents[2] / "conf" / "eval"


# ------------------------------------------------------------------------------------------------ compute_metrics


def test_compute_metrics_hand_example():
    qrels = {
        "q1": {"d1": 1, "d3": 1, "d6": 1},
        "q2": {"d2": 2, "d4": 1, "d5": 0},
        "q3": {"d1": 1},  # no run entry: counts as 0
    }
    run = {
        "q1": {"d2": 4.0, "d1": 3.0, "d4": 2.0, "d3": 1.0},  # relevant at ranks 2 and 4; d6 never retrieved
        "q2": {"d5": 2.0, "d4": 3.0, "d2": 1.0},  # dict order is irrelevant: ranks d4, d5, d2
        "q9": {"d1": 1.0},  # no qrels: ignored
    }
    # q1: DCG@10 = 1/log2(3) + 1/log2(5); IDCG = 1 + 1/log2(3) + 1/log2(4); RR = 1/2; R@100 = 2/3
    q1_ndcg = (1 / math.log2(3) + 1 / math.log2(5)) / (1 + 1 / math.log2(3) + 1 / math.log2(4))
    # q2 (gain = grade): DCG = 1/log2(2) + 0 + 2/log2(4) = 2; IDCG = 2 + 1/log2(3); RR = 1; R@100 = 2/2
    q2_ndcg = 2 / (2 + 1 / math.log2(3))
    m = compute_metrics(run, qrels)
    assert set(m) == {"nDCG@10", "RR@10", "R@100"}
    assert m["nDCG@10"] == pytest.approx((q1_ndcg + q2_ndcg + 0) / 3)  # 0.4195...
    assert m["RR@10"] == pytest.approx((1 / 2 + 1 + 0) / 3)
    assert m["R@100"] == pytest.approx((2 / 3 + 1 + 0) / 3)
    # cut-offs bite: only q2 has a relevant doc at rank 1
    m1 = compute_metrics(run, qrels, ["P@1", "ndcg_cut.10"])
    assert m1["P@1"] == pytest.approx(1 / 3)
    assert m1["ndcg_cut.10"] == pytest.approx(m["nDCG@10"])  # trec_eval names work too
    # an empty ranking is the same as a missing one
    assert compute_metrics({**run, "q3": {}}, qrels) == m


def test_compute_metrics_rejects_unknown_measure_and_empty_qrels():
    with pytest.raises(VtlabError, match="nDGC@10"):
        compute_metrics({"q": {"d": 1.0}}, {"q": {"d": 1}}, ["nDGC@10"])
    with pytest.raises(VtlabError, match="qrels"):
        compute_metrics({"q": {"d": 1.0}}, {})


def brute_force_run(q: sp.csr_matrix, d: sp.csr_matrix, qids, dids, k: int) -> dict[str, dict[str, float]]:
    dense = q.toarray().astype(np.float64) @ d.toarray().astype(np.float64).T
    run = {}
    for qid, row in zip(qids, dense):
        order = np.lexsort((np.arange(len(row)), -row))[:k]
        run[qid] = {dids[i]: float(row[i]) for i in order if row[i] != 0}
    return run


def test_index_run_metrics_equal_brute_force_run_metrics():
    rng = np.random.default_rng(3)
    q = sp.random(60, 400, density=0.03, format="csr", dtype=np.float32, random_state=rng)
    d = sp.random(700, 400, density=0.05, format="csr", dtype=np.float32, random_state=rng)
    qids, dids = [f"q{i}" for i in range(60)], [f"d{i}" for i in range(700)]
    # each query: 1-4 judged docs with grades 0-2, some among its top hits so metrics are non-trivial
    dense = q.toarray() @ d.toarray().T
    qrels = {}
    for i, qid in enumerate(qids):
        picks = set(rng.choice(700, size=2, replace=False).tolist()) | set(np.argsort(-dense[i])[: rng.integers(0, 3)])
        qrels[qid] = {dids[j]: int(rng.integers(0, 3)) for j in picks}
    measures = ["nDCG@10", "RR@10", "R@100", "AP@100"]
    scores, idx = InvertedIndex(d, dids).search(q, 100)
    got = compute_metrics(to_run(scores, idx, qids, dids), qrels, measures)
    # a query graded only 0 can score nothing: it is not measured (ir_measures would average in its zeros)
    positive = {qid: rels for qid, rels in qrels.items() if max(rels.values()) > 0}
    assert 0 < len(positive) < len(qrels)
    ref = ir_measures.calc_aggregate(
        [ir_measures.parse_measure(m) for m in measures], positive, brute_force_run(q, d, qids, dids, 100)
    )
    assert got["nDCG@10"] > 0.05  # not a trivially-zero comparison
    for m in measures:
        assert got[m] == pytest.approx(ref[ir_measures.parse_measure(m)], rel=1e-6), m


# ------------------------------------------------------------------------------------------------ sparsity


def test_sparsity_stats_hand_example():
    q = sp.csr_matrix(np.array([[1, 0, 2, 0], [0, 0, 3, 0]], dtype=np.float32))
    d = sp.csr_matrix(np.array([[1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 7]], dtype=np.float32))
    d.data[d.data == 7] = 0  # stored explicit zero: not an active dim
    # q dims (2 + 1)/2 = 1.5; d dims (2 + 1 + 0)/3 = 1
    # p_q = [1/2, 0, 1, 0], p_d = [1/3, 1/3, 1/3, 0] -> flops = 1/2*1/3 + 1*1/3 = 1/2
    st = sparsity_stats(q, d)
    assert st == pytest.approx({"query_active_dims": 1.5, "doc_active_dims": 1.0, "flops": 0.5})


def test_flops_is_mean_overlap_over_all_pairs():
    rng = np.random.default_rng(0)
    q = sp.random(30, 50, density=0.2, format="csr", random_state=rng)
    d = sp.random(40, 50, density=0.3, format="csr", random_state=rng)
    qb, db = (q.toarray() != 0).astype(int), (d.toarray() != 0).astype(int)
    overlap = (qb @ db.T).mean()  # multiplications per query-doc pair, counted directly
    assert sparsity_stats(q, d)["flops"] == pytest.approx(overlap)


# ------------------------------------------------------------------------------------------------ evaluate


class BagOfWords:
    """A legitimate (if naive) sparse encoder: term counts over a fixed vocabulary, both sides."""

    def __init__(self, vocab: list[str]):
        self.vocab = {w: i for i, w in enumerate(vocab)}
        self.vocab_size = len(vocab)
        self.calls: list[tuple[str, int]] = []

    def encode(self, texts, side, batch_size=64, show_progress=True):
        self.calls.append((side, len(texts)))
        rows, cols, vals = [], [], []
        for r, text in enumerate(texts):
            for w, c in Counter(text.lower().split()).items():
                if w in self.vocab:
                    rows.append(r), cols.append(self.vocab[w]), vals.append(float(c))
        return sp.csr_matrix((vals, (rows, cols)), shape=(len(texts), self.vocab_size), dtype=np.float32)


VOCAB = ["cat", "dog", "fish", "bird", "sat", "mat", "swims", "sings", "the", "sea"]
TOY = Collection(
    name="toy",
    corpus={
        "d1": "the cat sat on the mat",
        "d2": "the dog sat",
        "d3": "fish swims in the sea fish",
        "d4": "bird sings",
    },
    queries={"q1": "cat mat", "q2": "fish sea", "q3": "dog sings"},
    qrels={"q1": {"d1": 1}, "q2": {"d3": 2, "d1": 1}, "q3": {"d4": 1}},
)


def reference_run(collection: Collection) -> dict[str, dict[str, float]]:
    """Score by plain-Python word-count dot products: no sparse matrices, no index."""

    def bow(t):
        return Counter(w for w in t.lower().split() if w in VOCAB)

    run = {}
    for qid, qt in collection.queries.items():
        qb = bow(qt)
        scores = {did: float(sum(c * bow(dt)[w] for w, c in qb.items())) for did, dt in collection.corpus.items()}
        run[qid] = {did: s for did, s in scores.items() if s > 0}
    return run


def test_evaluate_end_to_end(tmp_path):
    enc = BagOfWords(VOCAB)
    built = []

    def factory(docs, doc_ids):
        built.append(docs.shape)
        return InvertedIndex(docs, doc_ids)

    m = evaluate(enc, TOY, out_dir=tmp_path / "eval", top_k=3, index=factory, show_progress=False)
    assert enc.calls == [("query", 3), ("doc", 4)] and built == [(4, len(VOCAB))]
    assert set(m) == {
        "nDCG@10",
        "RR@10",
        "R@100",
        "query_active_dims",
        "doc_active_dims",
        "flops",
        "choose_precision_s",
        "encode_query_s",
        "encode_query_ms_per_query",
        "encode_doc_s",
        "index_build_s",
        "search_ms_per_query",
        "total_s",
    }
    ref_run = reference_run(TOY)
    # hand check of the reference: q2 "fish sea" only hits d3 (2*fish + 1*sea); q3 "dog sings" hits d2 and d4
    assert ref_run["q2"] == {"d3": 3.0} and ref_run["q3"] == {"d2": 1.0, "d4": 1.0}
    ref = ir_measures.calc_aggregate(
        [ir_measures.parse_measure(x) for x in ("nDCG@10", "RR@10", "R@100")], TOY.qrels, ref_run
    )
    assert m["nDCG@10"] == pytest.approx(ref[ir_measures.parse_measure("nDCG@10")])
    assert m["RR@10"] == pytest.approx(ref[ir_measures.parse_measure("RR@10")])
    assert m["R@100"] == pytest.approx(ref[ir_measures.parse_measure("R@100")]) == pytest.approx((1 + 0.5 + 1) / 3)
    # q: {cat, mat}, {fish, sea}, {dog, sings} -> 2 dims; docs {the cat sat mat}, {the dog sat},
    # {fish swims the sea}, {bird sings} -> (4 + 3 + 4 + 2) / 4 = 3.25
    assert m["query_active_dims"] == 2.0 and m["doc_active_dims"] == 3.25

    # run.trec: parseable, ranks from 1, same ranking as the reference
    lines = (tmp_path / "eval" / "run.trec").read_text().splitlines()
    assert all(len(line.split()) == 6 and line.split()[1] == "Q0" and line.endswith(" vtlab") for line in lines)
    parsed = list(ir_measures.read_trec_run(str(tmp_path / "eval" / "run.trec")))
    got: dict[str, dict[str, float]] = {}
    for sd in parsed:
        got.setdefault(sd.query_id, {})[sd.doc_id] = sd.score
    assert got == ref_run
    ranks = [int(line.split()[3]) for line in lines if line.startswith("q3 ")]
    assert ranks == list(range(1, len(ranks) + 1))

    report = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert report["collection"] == {"name": "toy", "n_docs": 4, "n_queries": 3, "n_judged_queries": 3}
    assert report["metrics"] == pytest.approx(m)
    assert report["index"]["postings"] == 13

    console = Console(record=True, width=100)
    console.print(results_table(m, "toy"))
    out = console.export_text()
    assert "nDCG@10" in out and "FLOPS" in out and "ms/query" in out


def test_write_trec_run_sorts_by_score(tmp_path):
    path = write_trec_run(tmp_path / "r.trec", {"q": {"a": 1.0, "b": 3.0, "c": 2.0}}, tag="t")
    assert path.read_text().splitlines() == ["q Q0 b 1 3.0 t", "q Q0 c 2 2.0 t", "q Q0 a 3 1.0 t"]


def test_atomic_writes_leave_previous_file_intact(tmp_path, monkeypatch):
    path = tmp_path / "metrics.json"
    write_json(path, {"nDCG@10": 0.5, "n": np.int64(3)})
    before = path.read_text()
    assert json.loads(before) == {"nDCG@10": 0.5, "n": 3}
    # unencodable value: json.dump fails after part of the object was written to the temp file
    with pytest.raises(TypeError):
        write_json(path, {"nDCG@10": 0.9, "bad": object()})
    assert path.read_text() == before and os.listdir(tmp_path) == ["metrics.json"]
    # failure at the rename itself
    monkeypatch.setattr(os, "replace", lambda *a: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(OSError):
        write_json(path, {"nDCG@10": 0.9})
    assert path.read_text() == before and os.listdir(tmp_path) == ["metrics.json"]
    monkeypatch.undo()
    # same for the run file: second query's score breaks the sort mid-write
    run_path = write_trec_run(tmp_path / "run.trec", {"q1": {"d": 1.0}})
    before_run = run_path.read_text()
    with pytest.raises(TypeError):
        write_trec_run(run_path, {"q1": {"d": 2.0}, "q2": {"d": 1.0, "e": "x"}})
    assert run_path.read_text() == before_run and sorted(os.listdir(tmp_path)) == ["metrics.json", "run.trec"]


# ------------------------------------------------------------------------------------------------ config object


def test_retrieval_evaluation_loads_lazily_once(tmp_path):
    calls = []

    def loader(split="test"):
        calls.append(split)
        return TOY

    ev = RetrievalEvaluation(functools.partial(loader, split="dev"), measures=["nDCG@10"], top_k=10)
    assert "name=None" in repr(ev) and calls == []  # nothing loaded yet: repr does not load
    m1 = ev(BagOfWords(VOCAB), show_progress=False)
    m2 = ev(BagOfWords(VOCAB), out_dir=tmp_path, show_progress=False)
    assert calls == ["dev"] and ev.name == "toy" and m1["nDCG@10"] == m2["nDCG@10"]
    assert (tmp_path / "metrics.json").exists()
    with pytest.raises(VtlabError, match="nDGC"):
        RetrievalEvaluation(TOY, measures=["nDGC@10"])


def test_name_and_path_go_to_loaders_that_take_them():
    seen = {}

    def hub_loader(name, split="test"):
        seen["hub"] = (name, split)
        return TOY

    def fixed_loader(split="validation"):  # like boolq_collection: no name parameter
        seen["fixed"] = split
        return TOY

    assert RetrievalEvaluation(functools.partial(hub_loader, split="test"), ["RR@10"], name="scifact").collection
    assert RetrievalEvaluation(functools.partial(fixed_loader), ["RR@10"], name="boolq").collection
    assert seen == {"hub": ("scifact", "test"), "fixed": "validation"}


def write_beir(root: Path) -> None:
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": k, "title": "", "text": v}) + "\n" for k, v in TOY.corpus.items())
    )
    (root / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": k, "text": v}) + "\n" for k, v in TOY.queries.items())
    )
    (root / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n"
        + "".join(f"{q}\t{d}\t{r}\n" for q, rels in TOY.qrels.items() for d, r in rels.items())
    )


def test_eval_configs_build(tmp_path):
    assert {p.stem for p in CONF_EVAL.glob("*.yaml")} >= {"boolq", "beir", "hf-beir", "mteb", "none"}
    assert OmegaConf.load(CONF_EVAL / "none.yaml") == {"eval": None}
    boolq = instantiate(OmegaConf.load(CONF_EVAL / "boolq.yaml"))
    assert isinstance(boolq, RetrievalEvaluation) and boolq.name == "boolq" and boolq._collection is None  # lazy
    assert boolq.measures == ["nDCG@10", "RR@10", "R@100"] and boolq.top_k == 100
    for name, key in (("beir", "path"), ("hf-beir", "name"), ("mteb", "name")):
        cfg = OmegaConf.load(CONF_EVAL / f"{name}.yaml")
        assert OmegaConf.missing_keys(cfg) == {key}, name
    # eval=beir eval.path=DIR evaluates a BEIR directory end to end
    write_beir(tmp_path / "toy")
    cfg = OmegaConf.load(CONF_EVAL / "beir.yaml")
    cfg.path = str(tmp_path / "toy")
    m = instantiate(cfg)(BagOfWords(VOCAB), show_progress=False)
    assert m["R@100"] == pytest.approx((1 + 0.5 + 1) / 3)


def test_eval_index_option_selects_the_backend(tmp_path):
    """eval.index=exact|scipy|seismic → the factory handed to evaluate(); all agree on this toy collection."""
    from vtlab.evaluation import RetrievalEvaluation

    results = {}
    for name in ("exact", "scipy", "seismic"):
        ev = RetrievalEvaluation(TOY, index=name, index_options={"n_postings": 100} if name == "seismic" else None)
        assert repr(ev).endswith(f"index={name!r})")
        results[name] = ev(BagOfWords(VOCAB), out_dir=tmp_path / name, show_progress=False)
        report = json.loads((tmp_path / name / "metrics.json").read_text())
        assert report["index"]["backend"] in ({"exact": ("native", "scipy")}.get(name) or (name,))
    for name in ("scipy", "seismic"):
        assert results[name]["nDCG@10"] == pytest.approx(results["exact"]["nDCG@10"])
    with pytest.raises(VtlabError, match="eval.index"):
        RetrievalEvaluation(TOY, index="faiss")


# ------------------------------------------------------------------------------------------------ budgets, per query


class RandomSparse:
    """A synthetic encoder: each text gets its own random non-negative weights (no ties) on 2-12 random terms."""

    vocab_size = 40

    def encode(self, texts, side, batch_size=64, show_progress=True):
        rows = []
        for text in texts:
            rng = np.random.default_rng(list(f"{side}:{text}".encode()))  # every byte seeds it
            row = np.zeros(self.vocab_size, dtype=np.float32)
            terms = rng.choice(self.vocab_size, size=int(rng.integers(2, 13)), replace=False)
            row[terms] = rng.uniform(0.1, 3.0, size=terms.size)
            rows.append(row)
        return sp.csr_matrix(np.stack(rows))


def random_collection(n_queries: int = 25, n_docs: int = 80) -> Collection:
    """Each query judges 3 random docs and RandomSparse's 2nd-best doc for it (so the metrics are not near 0)."""
    rng = np.random.default_rng(11)
    queries = {f"q{i}": f"query {i}" for i in range(n_queries)}
    corpus = {f"d{i}": f"doc {i}" for i in range(n_docs)}
    enc = RandomSparse()
    scores = (enc.encode(list(queries.values()), "query") @ enc.encode(list(corpus.values()), "doc").T).toarray()
    qrels = {
        q: {f"d{j}": int(rng.integers(1, 3)) for j in [*rng.choice(n_docs, size=3), np.argsort(-row)[1]]}
        for q, row in zip(queries, scores)
    }
    return Collection(name="synthetic", corpus=corpus, queries=queries, qrels=qrels)


def dense_top_k(x: np.ndarray, k: int | None) -> np.ndarray:
    """numpy reference: zero every weight of a row but its k largest."""
    if k is None:
        return x
    out = np.zeros_like(x)
    for i, row in enumerate(x):
        keep = np.argsort(-row, kind="stable")[:k]
        out[i, keep] = row[keep]
    return out


def test_budgets_and_per_query_equal_a_dense_brute_force(tmp_path):
    coll, enc = random_collection(), RandomSparse()
    qids, dids = list(coll.queries), list(coll.corpus)
    measures = ["nDCG@10", "RR@10", "R@100"]
    budgets = [{"query": 3, "doc": 5}, {"query": None, "doc": 2}]
    m = evaluate(enc, coll, out_dir=tmp_path, measures=measures, top_k=100, budgets=budgets, show_progress=False)
    per_query = json.loads((tmp_path / "per_query.json").read_text())
    q_dense = enc.encode([coll.queries[i] for i in qids], "query").toarray().astype(np.float64)
    d_dense = enc.encode([coll.corpus[i] for i in dids], "doc").toarray().astype(np.float64)
    parsed = [ir_measures.parse_measure(x) for x in measures]
    for suffix, kq, kd in (("", None, None), ("@q3-d5", 3, 5), ("@qall-d2", None, 2)):
        qp, dp = dense_top_k(q_dense, kq), dense_top_k(d_dense, kd)
        run = brute_force_run(sp.csr_matrix(qp), sp.csr_matrix(dp), qids, dids, 100)
        ref = ir_measures.calc_aggregate(parsed, coll.qrels, run)
        ref_per_query = {(str(r.measure), r.query_id): r.value for r in ir_measures.iter_calc(parsed, coll.qrels, run)}
        for name, measure in zip(measures, parsed):
            assert m[name + suffix] == pytest.approx(ref[measure]), name + suffix
            assert set(per_query[name + suffix]) == set(qids)
            for qid in qids:  # a query absent from the reference run scores 0
                assert per_query[name + suffix][qid] == pytest.approx(ref_per_query.get((str(measure), qid), 0.0))
        assert m["query_active_dims" + suffix] == pytest.approx((qp != 0).sum(1).mean())
        assert m["doc_active_dims" + suffix] == pytest.approx((dp != 0).sum(1).mean())
        assert m["flops" + suffix] == pytest.approx(((qp != 0).astype(float) @ (dp != 0).T.astype(float)).mean())
    assert m["nDCG@10"] > 0.1 and m["nDCG@10@q3-d5"] != pytest.approx(m["nDCG@10"])  # not trivial; budgets bite
    assert m["doc_active_dims@q3-d5"] <= 5 < m["doc_active_dims"]
    report = json.loads((tmp_path / "metrics.json").read_text())
    assert report["budgets"] == [{"query": 3, "doc": 5}, {"query": None, "doc": 2}]
    assert report["metrics"] == pytest.approx(m)


def test_prune_top_k_hand_example():
    from vtlab.evaluation import prune_top_k

    x = sp.csr_matrix(np.array([[0.5, 2.0, 0.0, 2.0, 1.0], [0.0, 0.0, 0.0, 0.0, 3.0]], dtype=np.float32))
    # row 0: 2.0 at terms 1 and 3 tie (the lower term id wins for k=1); row 1 has fewer than k terms
    assert prune_top_k(x, 1).toarray().tolist() == [[0, 2.0, 0, 0, 0], [0, 0, 0, 0, 3.0]]
    assert prune_top_k(x, 3).toarray().tolist() == [[0, 2.0, 0, 2.0, 1.0], [0, 0, 0, 0, 3.0]]
    assert (prune_top_k(x, None) != x).nnz == 0


def test_budget_config_errors_and_keys():
    from vtlab.evaluation import split_budget_key

    with pytest.raises(VtlabError, match=r"eval\.budgets\[1\]\.doc: expected a positive int or null, got 0"):
        RetrievalEvaluation(TOY, budgets=[{"query": 2, "doc": 4}, {"query": 2, "doc": 0}])
    with pytest.raises(VtlabError, match=r"eval\.budgets\[0\]: expected \{query: K, doc: K\}"):
        RetrievalEvaluation(TOY, budgets=[{"q": 2}])
    with pytest.raises(VtlabError, match="listed twice"):
        RetrievalEvaluation(TOY, budgets=[{"query": 2, "doc": 4}, {"query": 2, "doc": 4}])
    assert split_budget_key("nDCG@10@q16-d64") == ("nDCG@10", "q16-d64")
    assert split_budget_key("nDCG@10@qall-d8") == ("nDCG@10", "qall-d8")
    assert split_budget_key("nDCG@10") == ("nDCG@10", None)


def test_eval_config_budgets_reach_evaluate_and_the_suite(tmp_path):
    cfg = OmegaConf.load(CONF_EVAL / "boolq.yaml")
    assert cfg.budgets == []
    cfg.budgets = [{"query": 3, "doc": 5}]
    cfg.collection = {"_target_": f"{__name__}.random_collection", "_partial_": True}  # this module, as imported
    ev = instantiate(cfg)
    assert repr(ev).endswith("budgets=['q3-d5'])")
    m = ev(RandomSparse(), show_progress=False)
    assert {"nDCG@10@q3-d5", "flops@q3-d5"} <= set(m)
    suite_cfg = OmegaConf.load(CONF_EVAL / "beir13.yaml")
    assert suite_cfg.budgets == []
    from vtlab.evaluation import EvaluationSuite

    suite = EvaluationSuite(
        {"a": RetrievalEvaluation(random_collection()), "b": RetrievalEvaluation(TOY)}, budgets=[{"query": 1, "doc": 2}]
    )
    results = suite(RandomSparse(), out_dir=tmp_path, show_progress=False)
    assert all("nDCG@10@q1-d2" in r for r in results.values())
    assert "nDCG@10@q1-d2" in json.loads((tmp_path / "a" / "per_query.json").read_text())
