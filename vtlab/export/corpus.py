"""What export encodes: export.vectors.corpus (the eval collection, or a BEIR corpus.jsonl streamed) and the eval
collection's queries, with the one line that tells the user which collection, from which config, how many."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from omegaconf import DictConfig

from vtlab.core.errors import VtlabError
from vtlab.data.collections import iter_corpus_jsonl
from vtlab.export.run_config import EvalSource

IDF_FIX = "export.vectors.corpus=<corpus.jsonl> (or model.encoder.idf_path)"
QUERIES_FIX = "eval=<one collection> or export.vectors.queries=false"


def corpus_path(cfg: DictConfig) -> Path | None:
    """export.vectors.corpus as a file (None: `eval`, the eval collection's documents)."""
    source = str(cfg.export.vectors.corpus)
    if source == "eval":
        return None
    path = Path(source)
    if path.is_dir():
        path = path / "corpus.jsonl"
    if not path.is_file():
        raise VtlabError(f"export.vectors.corpus={source}: no such file (expected 'eval' or a BEIR corpus.jsonl)")
    return path


def corpus_docs(path: Path | None, source: EvalSource) -> Iterable[tuple[str, str]]:
    """(doc id, text) pairs of export.vectors.corpus: the eval collection (`path` None), or a BEIR corpus.jsonl
    streamed."""
    if path is None:
        return source.collection("export.vectors.corpus=eval", IDF_FIX).corpus.items()
    return iter_corpus_jsonl(path)


def encoding_line(path: Path | None, source: EvalSource, queries: bool) -> str:
    """What the vectors are made of, in one line: the collection, whose config names it, its counts."""
    if path is None:
        coll = source.collection("export.vectors.corpus=eval", IDF_FIX)
        counts = f"{len(coll.corpus):,} documents" + (f", {len(coll.queries):,} queries" if queries else "")
        return f"export: encoding {source.name} from {source.origin}: {counts}"
    line = f"export: encoding the documents of {path} (export.vectors.corpus)"
    if queries:
        coll = source.collection("export.vectors.queries=true: the queries", QUERIES_FIX)
        line += f" and the queries of {source.name} from {source.origin}: {len(coll.queries):,} queries"
    return line
