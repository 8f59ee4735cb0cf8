"""vtlab's Qdrant export read by qdrant-client's embedded local mode (no server): `stage=export` writes the points
(named sparse vector: vocabulary ids, float weights), `collection.json` and the query bodies of 100 BoolQ questions over
300 passages with the real SPLADE-tiny; Qdrant's top-10 must be vtlab's exact index's for every query (same documents
in the same order; a swap only between scores equal to 1e-5, i.e. float summation order). A point file whose
indices are shifted by one (a wrong id → token map) fails the same comparison.
"""

import json
import uuid
from pathlib import Path

import numpy as np
import pytest
from exported_vectors import export_vectors
from helpers import need_module

from vtlab.core.errors import VtlabError
from vtlab.export.vectors import QdrantPoints, qdrant_point_id
from vtlab.index import InvertedIndex

qdrant_client = need_module("qdrant_client")  # a dev dependency (pip install -e .[dev])
models = qdrant_client.models

N_QUERIES, N_DOCS, K, TIE = 100, 300, 10, 1e-5

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def exported(tmp_path_factory, shared_cache):
    """(qdrant dir, collection, vtlab's top-10 scores and doc indices) after `stage=export formats=[qdrant]
    queries=true`; vtlab's ranking comes from its own encodings and InvertedIndex, not from the files."""
    vectors, _, coll, q, d = export_vectors(
        tmp_path_factory.mktemp("qdrant"), N_QUERIES, N_DOCS, "export.vectors.formats=[qdrant,elasticsearch]"
    )
    scores, indices = InvertedIndex(d, list(coll.corpus)).search(q, k=K)
    return vectors, coll, scores, indices


def load(points: Path, collection_json: Path) -> "qdrant_client.QdrantClient":
    client = qdrant_client.QdrantClient(":memory:")
    body = json.loads(collection_json.read_text())
    client.create_collection(
        "vtlab",
        sparse_vectors_config={
            name: models.SparseVectorParams(**params) for name, params in body["sparse_vectors"].items()
        },
    )
    batch = []
    for line in points.read_text().splitlines():
        p = json.loads(line)
        batch.append(
            models.PointStruct(
                id=p["id"],
                payload=p["payload"],
                vector={name: models.SparseVector(**v) for name, v in p["vector"].items()},
            )
        )
    client.upsert("vtlab", points=batch)
    return client


def tied(a: float, b: float) -> bool:
    return abs(a - b) <= TIE * max(1.0, abs(b))


def same_slot(got: tuple[str, float], want: tuple[str, float], ranked: list[tuple[str, float]]) -> bool:
    """Same score; a different document only if vtlab ranks it with a tied score (or it ties vtlab's 10th)."""
    (gd, gs), (wd, ws) = got, want
    return tied(gs, ws) and (gd == wd or any(d == gd and tied(s, gs) for d, s in ranked) or tied(gs, ranked[-1][1]))


def mismatches(client, queries: Path, coll, scores: np.ndarray, indices: np.ndarray) -> list[str]:
    """Query ids whose Qdrant top-10 is not vtlab's (a position may differ only between scores tied to TIE)."""
    doc_ids = list(coll.corpus)
    bad = []
    for i, line in enumerate(queries.read_text().splitlines()):
        body = json.loads(line)
        assert body["query_id"] == list(coll.queries)[i]
        hits = client.query_points(
            "vtlab", query=models.SparseVector(**body["query"]), using=body["using"], limit=K, with_payload=True
        ).points
        want = [(doc_ids[j], float(s)) for j, s in zip(indices[i], scores[i]) if s > 0]
        got = [(h.payload["doc_id"], float(h.score)) for h in hits]
        same = len(got) == len(want) and all(same_slot(g, w, want) for g, w in zip(got, want))
        if not same:
            bad.append(body["query_id"])
    return bad


@pytest.mark.train
def test_qdrant_local_top10_equals_vtlab_index(exported):
    vectors, coll, scores, indices = exported
    base = vectors / "qdrant"
    first = json.loads((base / "points.jsonl").read_text().splitlines()[0])
    doc0 = next(iter(coll.corpus))
    assert first["id"] == qdrant_point_id(doc0) and first["payload"] == {"doc_id": doc0, "text": coll.corpus[doc0]}
    client = load(base / "points.jsonl", base / "collection.json")
    assert client.count("vtlab").count == len(coll.corpus)
    assert mismatches(client, base / "queries.jsonl", coll, scores, indices) == []
    # Elasticsearch: the OpenSearch shape with a sparse_vector mapping
    mapping = json.loads((vectors / "elasticsearch" / "mapping.json").read_text())
    assert mapping["mappings"]["properties"]["sparse_embedding"] == {"type": "sparse_vector"}
    assert len((vectors / "elasticsearch" / "bulk.ndjson").read_text().splitlines()) == 2 * len(coll.corpus)


@pytest.mark.train
def test_shifted_indices_break_the_top10(exported, tmp_path):
    """Every document index + 1 (an off-by-one id → token map): most queries' top-10 no longer match."""
    vectors, coll, scores, indices = exported
    base = vectors / "qdrant"
    shifted = tmp_path / "points.jsonl"
    lines = []
    for line in (base / "points.jsonl").read_text().splitlines():
        p = json.loads(line)
        for v in p["vector"].values():
            v["indices"] = [i + 1 for i in v["indices"]]
        lines.append(json.dumps(p))
    shifted.write_text("\n".join(lines) + "\n")
    bad = mismatches(load(shifted, base / "collection.json"), base / "queries.jsonl", coll, scores, indices)
    assert len(bad) > N_QUERIES // 2


def test_point_ids_are_stable_uuids_and_bad_options_are_one_line(tmp_path):
    a, b = qdrant_point_id("doc-1"), qdrant_point_id("doc-1")
    assert a == b != qdrant_point_id("doc-2") and uuid.UUID(a).version == 5
    with pytest.raises(VtlabError, match="export.vectors.qdrant.vector"):
        QdrantPoints(tmp_path / "p.jsonl", vector="")
