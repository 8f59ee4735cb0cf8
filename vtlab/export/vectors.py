"""Documents' sparse vectors in the formats search engines ingest, written while encoding (streaming).

- Anserini `JsonVectorCollection` (impact indexes, `-impact -pretokenized`): one JSON object per line,
  `{"id": ..., "contents": ..., "vector": {token: int}}`, weights quantized as floor(w * scale + 0.5), zeros dropped.
- OpenSearch `_bulk` (NDJSON): an action line `{"index": {"_id": ...}}` then the source
  `{text_field: text, field: {feature: weight}}` for a `rank_features` field (`mapping.json` beside it). Feature
  names cannot contain "." (it would name a sub-object), so dots are escaped: `percent` ("%" → "%25", "." → "%2E",
  reversible, never collides) or a replacement string (e.g. "__", Elasticsearch's choice; a collision between two
  vocabulary tokens is an error). Queries sent to that field must name their tokens the same way (`escape_feature`).

Documents are encoded `chunk_size` at a time and each chunk is written before the next is encoded, so memory does not
grow with the corpus. Every file is written through a temp file renamed into place at the end (all or nothing).
"""
from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import scipy.sparse as sp
from tqdm.auto import tqdm

from vtlab.atomic import atomic_write
from vtlab.errors import VtlabError
from vtlab.evaluation import write_json

FORMATS = ("anserini", "opensearch")


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
    from vtlab.models.idf import id_to_token

    tokens = id_to_token(tokenizer)[:vocab_size]
    tokens += [""] * (vocab_size - len(tokens))
    return [t if t else f"[ID{i}]" for i, t in enumerate(tokens)]


class VectorFormat:
    """One output file: `lines(...)` gives the text written for one document."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def prepare(self, tokens: Sequence[str]) -> None:
        self.tokens = tokens

    def lines(self, doc_id: str, text: str, ids: np.ndarray, weights: np.ndarray) -> str:
        raise NotImplementedError

    def finish(self) -> None:
        """Side files (written after the main file is complete)."""


def _check_scale(scale: float, key: str) -> float:
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale <= 0:
        raise VtlabError(f"{key} must be a positive number, got {scale!r}")
    return float(scale)


def quantize(weights: np.ndarray, scale: float) -> np.ndarray:
    """floor(w * scale + 0.5) as int64: round half up, so 0.005 × 100 → 1 (no banker's rounding)."""
    return np.floor(np.asarray(weights, dtype=np.float64) * scale + 0.5).astype(np.int64)


class AnseriniJsonVectors(VectorFormat):
    """Anserini JsonVectorCollection: {"id", "contents", "vector": {token: int}} per line."""

    def __init__(self, path: str | Path, scale: float = 100.0, contents: bool = True) -> None:
        super().__init__(path)
        self.scale = _check_scale(scale, "export.vectors.anserini.scale")
        self.contents = bool(contents)

    def lines(self, doc_id: str, text: str, ids: np.ndarray, weights: np.ndarray) -> str:
        q = quantize(weights, self.scale)
        vector = {self.tokens[i]: int(w) for i, w in zip(ids.tolist(), q.tolist()) if w > 0}
        return json.dumps({"id": doc_id, "contents": text if self.contents else "", "vector": vector},
                          ensure_ascii=False) + "\n"


class OpenSearchBulk(VectorFormat):
    """OpenSearch `_bulk` body for a `rank_features` field, plus `mapping.json` for the index."""

    def __init__(self, path: str | Path, index: str | None = None, field: str = "sparse_embedding",
                 text_field: str | None = "text", dot: str = "percent", decimals: int = 5,
                 scale: float | None = None) -> None:
        super().__init__(path)
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
                    raise VtlabError(f"export.vectors.opensearch.dot={self.dot!r}: tokens {seen[name]!r} and "
                                     f"{token!r} both become feature {name!r}; use dot=percent")
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
        return (json.dumps({"index": action}, ensure_ascii=False) + "\n"
                + json.dumps(source, ensure_ascii=False) + "\n")

    def finish(self) -> None:
        props: dict[str, Any] = {self.field: {"type": "rank_features"}}
        if self.text_field is not None:
            props[self.text_field] = {"type": "text"}
        write_json(self.path.with_name("mapping.json"), {"mappings": {"properties": props}})


def _write_all(paths: Sequence[Path], body: Any) -> None:
    """Open every path atomically (nested temp files) and call body(list of file objects)."""
    def nest(i: int, files: list[TextIO]) -> None:
        if i == len(paths):
            body(files)
        else:
            atomic_write(paths[i], lambda f: nest(i + 1, [*files, f]))
    nest(0, [])


def write_vectors(
    encoder: Any,
    docs: Iterable[tuple[str, str]],
    formats: Sequence[VectorFormat],
    chunk_size: int = 256,
    batch_size: int = 64,
    show_progress: bool = True,
) -> int:
    """Encode `docs` (doc id, text) chunk by chunk and write each chunk to every format. Returns the document count."""
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

    def body(files: list[TextIO]) -> None:
        nonlocal count
        it = iter(docs)
        bar = tqdm(desc="export vectors", unit="doc", disable=not show_progress, leave=False)
        while chunk := list(itertools.islice(it, chunk_size)):
            ids = [str(d) for d, _ in chunk]
            texts = [t for _, t in chunk]
            matrix = encoder.encode(texts, side="doc", batch_size=batch_size, show_progress=False)
            if not sp.issparse(matrix) or matrix.shape != (len(texts), encoder.vocab_size):
                raise VtlabError(f"export.vectors: encode returned {type(matrix).__name__} of shape "
                                 f"{getattr(matrix, 'shape', None)}, expected ({len(texts)}, {encoder.vocab_size})")
            matrix = sp.csr_matrix(matrix)
            matrix.sort_indices()
            for row, (doc_id, text) in enumerate(zip(ids, texts)):
                lo, hi = matrix.indptr[row], matrix.indptr[row + 1]
                for fmt, f in zip(formats, files):
                    f.write(fmt.lines(doc_id, text, matrix.indices[lo:hi], matrix.data[lo:hi]))
            count += len(chunk)
            bar.update(len(chunk))
        bar.close()

    _write_all(paths, body)
    for fmt in formats:
        fmt.finish()
    return count
