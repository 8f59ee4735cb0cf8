"""One `stage=export` of vector files from the real SPLADE-tiny on a BoolQ subset, shared by the engine tests
(test_anserini.py, test_qdrant.py): the run's directory plus vtlab's own float encodings of the same texts."""

from pathlib import Path

import scipy.sparse as sp
from helpers import compose_config
from hydra.utils import instantiate

from vtlab.stages.pipeline import run


def export_vectors(tmp: Path, n_queries: int, n_docs: int, *overrides: str):
    """(vectors dir, encoder, collection, query matrix, doc matrix) after `stage=export ... queries=true` with
    `overrides` (the formats); the matrices are vtlab's own encodings (encoded once: the CPU is the cost).
    The caller sets VTLAB_CACHE (the `shared_cache` fixture)."""
    cfg = compose_config(
        [
            "stage=export",
            "backbone=splade-tiny",
            "vocab=native",
            "export.sentence_transformers=false",
            f"paths.run_dir={tmp / 'run'}",
            "export.vectors.queries=true",
            # the same vectors on every CPU: auto would encode in int8 or bf16 by the CPU's kind, and the engine
            # tests' margins (e.g. how far a wrong scale moves nDCG@10) are about the export, not the precision
            "model.encoder.precision=fp32",
            f"+eval.collection.max_queries={n_queries}",
            f"+eval.collection.max_docs={n_docs}",
            *overrides,
        ]
    )
    state = run(cfg)
    coll = instantiate(cfg.eval).collection
    encoder = state["encoder"]
    q = sp.csr_matrix(encoder.encode(list(coll.queries.values()), side="query", show_progress=False))
    d = sp.csr_matrix(encoder.encode(list(coll.corpus.values()), side="doc", show_progress=False))
    return tmp / "run" / "vectors", encoder, coll, q, d
