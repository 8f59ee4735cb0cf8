"""Documents' sparse vectors in the formats search engines ingest, written while encoding (streaming).

- Anserini `JsonVectorCollection` (impact indexes, `-impact -pretokenized`): one JSON object per line,
  `{"id": ..., "contents": ..., "vector": {token: int}}`, weights quantized as floor(w * scale + 0.5), zeros dropped.
- OpenSearch `_bulk` (NDJSON): an action line `{"index": {"_id": ...}}` then the source
  `{text_field: text, field: {feature: weight}}` for a `rank_features` field (`mapping.json` beside it). Feature
  names cannot contain "." (it would name a sub-object), so dots are escaped: `percent` ("%" → "%25", "." → "%2E",
  reversible, never collides) or a replacement string (e.g. "__", Elasticsearch's choice; a collision between two
  vocabulary tokens is an error). Queries sent to that field must name their tokens the same way (`escape_feature`).
- Elasticsearch `_bulk` for a `sparse_vector` field: the same shape (Elasticsearch's `sparse_vector` is a copy of
  `rank_features`), only the mapping's field type differs.
- Qdrant sparse vectors: one point per line, `{"id": uuid5(doc id), "vector": {name: {"indices": [...],
  "values": [...]}}, "payload": {"doc_id": ..., "text": ...}}` (vocabulary ids as indices, float weights, zeros
  dropped) plus `collection.json`, the body that creates the collection. Point ids must be integers or UUIDs, so the
  document id is a UUID (name-based, the same on every export) and travels in the payload.

Query vectors (`export.vectors.queries=true`) are written beside the documents by the formats that have an engine-side
query form (`VectorFormat.queries`): Anserini's pretokenized TSV (`qid<TAB>token token …`, each token repeated its
quantized weight times: Anserini counts repeats as the query-side weight) and Qdrant's `{"query_id", "using",
"query": {"indices", "values"}}` (the body of `POST /collections/<name>/points/query` plus the query id).

Documents are encoded `chunk_size` at a time and each chunk is written before the next is encoded, so memory does not
grow with the corpus. With `index` (export.vectors.index: stage=encode's index directory) nothing is encoded: the
vectors are read from its docs.npz, or from its complete shards one at a time (vtlab.index.shards.iter_index), and the
texts from `docs`, which must list the index's documents in its order. Every file is written through a temp file
renamed into place at the end (all or nothing).
"""

from __future__ import annotations

import itertools
import json
import math
import uuid
from collections.abc import Iterable, Sequence, Sized
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import scipy.sparse as sp
from hydra.utils import instantiate
from omegaconf import DictConfig

from vtlab.core.atomic import atomic_write, write_json
from vtlab.core.errors import VtlabError
from vtlab.core.progress import SIDES, progress
from vtlab.index.shards import iter_index
from vtlab.models.idf import id_to_token


def escape_feature(token: str, dot: str = "percent") -> str:
    """A `rank_features` feature name for `token`: no "." (see the module docstring for the two schemes)."""
    if dot == "percent":
        return token.replace("%", "%25").replace(".", "%2E")
    return token.replace(".", dot)


def unescape_feature(name: str) -> str:
    """Inverse of escape_feature(…, "percent")."""
    return name.replace("%2E", ".").replace("%25", "%")


def token_strings(tokenizer: Any, vocab_size: int) -> list[str]:
    """The string of each output id; ids the tokenizer does not name (a padded MLM head) become "[ID<n>]"."""
    tokens = id_to_token(tokenizer)[:vocab_size]
    tokens += [""] * (vocab_size - len(tokens))
    return [t if t else f"[ID{i}]" for i, t in enumerate(tokens)]


class VectorFormat:
    """One output file: `lines(...)` gives the text written for one document.

    FILE, QUERIES_FILE: the file names of the documents and (with `queries`) the queries, in export.vectors.dir/<the
    format's name>/.
    """

    FILE: str = ""
    QUERIES_FILE: str | None = None

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def prepare(self, tokens: Sequence[str]) -> None:
        self.tokens = tokens

    def lines(self, doc_id: str, text: str, ids: np.ndarray, weights: np.ndarray) -> str:
        raise NotImplementedError

    def finish(self) -> None:
        """Side files (written after the main file is complete)."""

    def queries(self, path: str | Path) -> VectorFormat | None:
        """The writer of this engine's query vectors (encoded with side="query"), or None where vtlab writes none."""
        return None


def _check_scale(scale: float, key: str) -> float:
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale <= 0:
        raise VtlabError(f"{key} must be a positive number, got {scale!r}")
    return float(scale)


def quantize(weights: np.ndarray, scale: float) -> np.ndarray:
    """floor(w * scale + 0.5) as int64: round half up, so 0.005 × 100 → 1 (no banker's rounding)."""
    return np.floor(np.asarray(weights, dtype=np.float64) * scale + 0.5).astype(np.int64)


class AnseriniJsonVectors(VectorFormat):
    """Anserini JsonVectorCollection: {"id", "contents", "vector": {token: int}} per line."""

    FILE, QUERIES_FILE = "docs.jsonl", "queries.tsv"

    def __init__(self, path: str | Path, scale: float = 100.0, contents: bool = True) -> None:
        super().__init__(path)
        self.scale = _check_scale(scale, "export.vectors.anserini.scale")
        self.contents = bool(contents)

    def lines(self, doc_id: str, text: str, ids: np.ndarray, weights: np.ndarray) -> str:
        q = quantize(weights, self.scale)
        vector = {self.tokens[i]: int(w) for i, w in zip(ids.tolist(), q.tolist()) if w > 0}
        return (
            json.dumps({"id": doc_id, "contents": text if self.contents else "", "vector": vector}, ensure_ascii=False)
            + "\n"
        )

    def queries(self, path: str | Path) -> VectorFormat:
        return AnseriniQueries(path, scale=self.scale)


class AnseriniQueries(VectorFormat):
    """Anserini pretokenized TSV topics (`-topicreader TsvString -impact -pretokenized`): each token repeated its
    quantized weight times, so the engine's query-term counts are the integer weights (same scale as the documents)."""

    def __init__(self, path: str | Path, scale: float = 100.0) -> None:
        super().__init__(path)
        self.scale = _check_scale(scale, "export.vectors.anserini.scale")

    def prepare(self, tokens: Sequence[str]) -> None:
        # the whitespace analyzer would split a token holding a space (or a tab, the TSV separator) into others
        bad = next((t for t in tokens if not t or any(c.isspace() for c in t)), None)
        if bad is not None:
            raise VtlabError(
                f"export.vectors.anserini: vocabulary token {bad!r} is empty or holds whitespace; "
                "Anserini's pretokenized queries cannot name it"
            )
        super().prepare(tokens)

    def lines(self, doc_id: str, text: str, ids: np.ndarray, weights: np.ndarray) -> str:
        if any(c in doc_id for c in "\t\r\n"):
            raise VtlabError(f"export.vectors.anserini: query id {doc_id!r} holds a tab or newline (TSV topics)")
        q = quantize(weights, self.scale)
        words = [" ".join([self.tokens[i]] * w) for i, w in zip(ids.tolist(), q.tolist()) if w > 0]
        return f"{doc_id}\t{' '.join(words)}\n"


class OpenSearchBulk(VectorFormat):
    """OpenSearch `_bulk` body for a `rank_features` field, plus `mapping.json` for the index."""

    FILE = "bulk.ndjson"
    FIELD_TYPES = ("rank_features", "sparse_vector")

    def __init__(
        self,
        path: str | Path,
        index: str | None = None,
        field: str = "sparse_embedding",
        text_field: str | None = "text",
        dot: str = "percent",
        decimals: int = 5,
        scale: float | None = None,
        field_type: str = "rank_features",
    ) -> None:
        super().__init__(path)
        if field_type not in self.FIELD_TYPES:
            raise VtlabError(
                f"export.vectors.(opensearch|elasticsearch).field_type={field_type!r}: expected one of "
                f"{', '.join(self.FIELD_TYPES)}"
            )
        self.field_type = field_type
        if not field or "." in field:
            raise VtlabError(f"export.vectors.opensearch.field={field!r}: must be a non-empty name without '.'")
        if text_field == field:
            raise VtlabError("export.vectors.opensearch.text_field must differ from export.vectors.opensearch.field")
        if not dot or "." in dot:
            raise VtlabError(f"export.vectors.opensearch.dot={dot!r}: use 'percent' or a replacement without '.'")
        if isinstance(decimals, bool) or not isinstance(decimals, int) or not 0 <= decimals <= 9:
            raise VtlabError(f"export.vectors.opensearch.decimals must be an integer 0..9, got {decimals!r}")
        self.index, self.field, self.text_field, self.dot, self.decimals = index, field, text_field, dot, decimals
        self.scale = None if scale is None else _check_scale(scale, "export.vectors.opensearch.scale")

    def prepare(self, tokens: Sequence[str]) -> None:
        names = [escape_feature(t, self.dot) for t in tokens]
        if self.dot != "percent":
            seen: dict[str, str] = {}
            for token, name in zip(tokens, names):
                if seen.setdefault(name, token) != token:
                    raise VtlabError(
                        f"export.vectors.opensearch.dot={self.dot!r}: tokens {seen[name]!r} and "
                        f"{token!r} both become feature {name!r}; use dot=percent"
                    )
        super().prepare(names)

    def lines(self, doc_id: str, text: str, ids: np.ndarray, weights: np.ndarray) -> str:
        if self.scale is not None:
            values = [int(w) for w in quantize(weights, self.scale).tolist()]
        else:
            values = [round(float(w), self.decimals) for w in weights.tolist()]
        # rank_features values must be positive: drop what quantizing/rounding took to 0
        features = {self.tokens[i]: w for i, w in zip(ids.tolist(), values) if w > 0}
        action = {"_id": doc_id} if self.index is None else {"_index": self.index, "_id": doc_id}
        source: dict[str, Any] = {} if self.text_field is None else {self.text_field: text}
        source[self.field] = features
        return json.dumps({"index": action}, ensure_ascii=False) + "\n" + json.dumps(source, ensure_ascii=False) + "\n"

    def finish(self) -> None:
        props: dict[str, Any] = {self.field: {"type": self.field_type}}
        if self.text_field is not None:
            props[self.text_field] = {"type": "text"}
        write_json(self.path.with_name("mapping.json"), {"mappings": {"properties": props}})


# A fixed namespace: a document keeps its point id across exports (re-upserting replaces, never duplicates).
QDRANT_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://github.com/vtlab/export/qdrant")


def qdrant_point_id(doc_id: str) -> str:
    """The Qdrant point id of a document: a name-based UUID of its id (Qdrant accepts only integers and UUIDs)."""
    return str(uuid.uuid5(QDRANT_NAMESPACE, doc_id))


def _sparse(ids: np.ndarray, weights: np.ndarray) -> dict[str, list[Any]]:
    keep = np.asarray(weights) > 0
    return {"indices": [int(i) for i in ids[keep].tolist()], "values": [float(w) for w in weights[keep].tolist()]}


class QdrantPoints(VectorFormat):
    """Qdrant points with one named sparse vector (vocabulary ids, float weights), plus `collection.json`."""

    FILE, QUERIES_FILE = "points.jsonl", "queries.jsonl"

    def __init__(self, path: str | Path, vector: str = "sparse", text_field: str | None = "text") -> None:
        super().__init__(path)
        if not vector:
            raise VtlabError("export.vectors.qdrant.vector must be a non-empty name")
        if text_field == "doc_id":
            raise VtlabError("export.vectors.qdrant.text_field must not be 'doc_id' (the payload key of the id)")
        self.vector, self.text_field = vector, text_field

    def lines(self, doc_id: str, text: str, ids: np.ndarray, weights: np.ndarray) -> str:
        payload: dict[str, Any] = {"doc_id": doc_id}
        if self.text_field is not None:
            payload[self.text_field] = text
        point = {"id": qdrant_point_id(doc_id), "vector": {self.vector: _sparse(ids, weights)}, "payload": payload}
        return json.dumps(point, ensure_ascii=False) + "\n"

    def finish(self) -> None:
        write_json(self.path.with_name("collection.json"), {"sparse_vectors": {self.vector: {}}})

    def queries(self, path: str | Path) -> VectorFormat:
        return QdrantQueries(path, vector=self.vector)


class QdrantQueries(VectorFormat):
    """Qdrant query bodies: `{"query_id", "using", "query": {"indices", "values"}}` per line."""

    def __init__(self, path: str | Path, vector: str = "sparse") -> None:
        super().__init__(path)
        self.vector = vector

    def lines(self, doc_id: str, text: str, ids: np.ndarray, weights: np.ndarray) -> str:
        return (
            json.dumps({"query_id": doc_id, "using": self.vector, "query": _sparse(ids, weights)}, ensure_ascii=False)
            + "\n"
        )


def format_names(vectors: DictConfig) -> list[str]:
    """The export.vectors.formats choices: the nodes of export.vectors with a `_target_` (a VectorFormat class, its
    options beside it: conf/stage/export.yaml)."""
    return [str(k) for k, node in vectors.items() if isinstance(node, DictConfig) and "_target_" in node]


def vector_formats(cfg: DictConfig, out_dir: Path) -> tuple[list[VectorFormat], list[VectorFormat]]:
    """(document writers, query writers) of export.vectors.formats; query writers only with export.vectors.queries.
    Format `name` is export.vectors.<name> instantiated, writing into out_dir/<name>/."""
    v = cfg.export.vectors
    names = [str(n) for n in (v.formats or [])]
    choices = format_names(v)
    formats: list[VectorFormat] = []
    queries: list[VectorFormat] = []
    for name in dict.fromkeys(names):
        if name not in choices:
            raise VtlabError(f"export.vectors.formats: unknown format {name!r} (choose from {', '.join(choices)})")
        writer = instantiate(v[name], _partial_=True)  # functools.partial(<VectorFormat class>, **options)
        if not (isinstance(writer.func, type) and issubclass(writer.func, VectorFormat)):
            raise VtlabError(
                f"export.vectors.{name}._target_={v[name]._target_!r}: not a vtlab.export.vectors VectorFormat"
            )
        fmt = writer(out_dir / name / writer.func.FILE)
        formats.append(fmt)
        if v.get("queries") and writer.func.QUERIES_FILE is not None:
            queries.append(fmt.queries(out_dir / name / writer.func.QUERIES_FILE))
    if not cfg.export.overwrite:
        for fmt in formats + queries:
            if fmt.path.exists():
                raise VtlabError(f"export.vectors.dir: {fmt.path} exists (set export.overwrite=true to replace it)")
    return formats, queries


def _write_all(paths: Sequence[Path], body: Any) -> None:
    """Open every path atomically (nested temp files) and call body(list of file objects)."""

    def nest(i: int, files: list[TextIO]) -> None:
        if i == len(paths):
            body(files)
        else:
            atomic_write(paths[i], lambda f: nest(i + 1, [*files, f]))

    nest(0, [])


def _write_rows(
    files: Sequence[TextIO], formats: Sequence[VectorFormat], ids: list[str], texts: list[str], matrix: sp.csr_matrix
) -> None:
    for row, (doc_id, text) in enumerate(zip(ids, texts)):
        lo, hi = matrix.indptr[row], matrix.indptr[row + 1]
        for fmt, f in zip(formats, files):
            f.write(fmt.lines(doc_id, text, matrix.indices[lo:hi], matrix.data[lo:hi]))


def _index_chunks(
    index: Path, docs: Iterable[tuple[str, str]], vocab_size: int
) -> Iterable[tuple[list[str], list[str], sp.csr_matrix]]:
    """(ids, texts, rows) of an encoded index, part by part, each id checked against `docs` (same documents, order)."""
    it = iter(docs)
    at = 0
    for ids, matrix in iter_index(index):
        if matrix.shape[1] != vocab_size:
            raise VtlabError(
                f"export.vectors.index={index}: its vectors have {matrix.shape[1]} dimensions, the model "
                f"{vocab_size}: it was encoded with another model"
            )
        chunk = list(itertools.islice(it, len(ids)))
        for k, (doc_id, (want, _)) in enumerate(zip(ids, chunk)):
            if str(doc_id) != str(want):
                raise VtlabError(
                    f"export.vectors.index={index}: document {at + k} is {doc_id!r} there, {want!r} in the "
                    "corpus exported: it encodes another corpus (export.vectors.corpus, eval)"
                )
        if len(chunk) < len(ids):
            raise VtlabError(f"export.vectors.index={index}: holds more documents than the corpus exported")
        at += len(ids)
        matrix = sp.csr_matrix(matrix)
        matrix.sort_indices()
        yield [str(d) for d in ids], [t for _, t in chunk], matrix
    if next(it, None) is not None:
        raise VtlabError(f"export.vectors.index={index}: holds {at} documents, fewer than the corpus exported")


def write_vectors(
    encoder: Any,
    docs: Iterable[tuple[str, str]],
    formats: Sequence[VectorFormat],
    chunk_size: int = 256,
    batch_size: int = 64,
    show_progress: bool = True,
    side: str = "doc",
    index: str | Path | None = None,
) -> int:
    """Encode `docs` (doc id, text) chunk by chunk as `side` ("doc", or "query" for query writers) and write each chunk
    to every format; with `index`, read the vectors from that encoded index instead (the module docstring). Returns
    the document count."""
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise VtlabError(f"export.vectors.chunk_size must be a positive integer, got {chunk_size!r}")
    if not formats:
        return 0
    paths = [f.path for f in formats]
    if len(set(paths)) != len(paths):
        raise VtlabError(f"export.vectors: two formats write the same file ({paths})")
    tokens = token_strings(encoder.tokenizer, encoder.vocab_size)
    for fmt in formats:
        fmt.prepare(tokens)
    count = 0  # ids are written as given (no duplicate check: that set would grow with the corpus)
    total = len(docs) if isinstance(docs, Sized) else None  # a streamed corpus.jsonl: unknown

    def body(files: list[TextIO]) -> None:
        nonlocal count
        it = iter(docs)
        bar = progress(total, SIDES.get(side, ("", "texts"))[1], f"exporting {side} vectors", show_progress)
        if index is not None:
            for ids, texts, matrix in _index_chunks(Path(index), it, encoder.vocab_size):
                _write_rows(files, formats, ids, texts, matrix)
                count += len(ids)
                bar.update(len(ids))
        while index is None and (chunk := list(itertools.islice(it, chunk_size))):
            ids = [str(d) for d, _ in chunk]
            texts = [t for _, t in chunk]
            matrix = encoder.encode(texts, side=side, batch_size=batch_size, show_progress=False)
            if not sp.issparse(matrix) or matrix.shape != (len(texts), encoder.vocab_size):
                raise VtlabError(
                    f"export.vectors: encode returned {type(matrix).__name__} of shape "
                    f"{getattr(matrix, 'shape', None)}, expected ({len(texts)}, {encoder.vocab_size})"
                )
            matrix = sp.csr_matrix(matrix)
            matrix.sort_indices()
            _write_rows(files, formats, ids, texts, matrix)
            count += len(chunk)
            bar.update(len(chunk))
        bar.close()

    _write_all(paths, body)
    for fmt in formats:
        fmt.finish()
    return count
