"""IDF tables for inference-free SPLADE's query side, computed under the run's own tokenizer.

idf(t) = log(1 + (N − df(t) + 0.5) / (df(t) + 0.5)) over N documents (the authors' get_idf.py, BM25's idf).
After vocabulary transfer a table computed for the old tokenizer is meaningless (its ids name other strings), so
tables are derived from a corpus under the tokenizer the model runs with, cached per (tokenizer, corpus, options),
and saved as `idf.json` ({token: weight}, the format OpenSearch and sentence-transformers load).
"""

from __future__ import annotations

import logging
import zipfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vtlab.core.assets import cache_dir
from vtlab.core.atomic import atomic_write_bytes, stable_hash, write_json
from vtlab.core.cache_keys import settings_key, tokenizer_key
from vtlab.core.errors import DataError
from vtlab.core.json_files import read_json

log = logging.getLogger("vtlab")

VERSION = 1  # bump when a table is computed differently from the same settings


def idf_from_df(df: np.ndarray, n_docs: int) -> np.ndarray:
    """The BM25 idf of each document frequency; always > 0 (a term in every document gets log(1 + 0.5/(N+0.5)))."""
    df = np.asarray(df, dtype=np.float64)
    return np.log1p((n_docs - df + 0.5) / (df + 0.5))


def document_frequencies(
    tokenizer: Any,
    texts: Iterable[str],
    lowercase: bool = False,
    preprocess: Callable[[str], str] | None = None,
    batch_size: int = 1024,
) -> tuple[np.ndarray, int]:
    """(df over the tokenizer's ids, number of documents). Specials are not added; each document counts a token once."""
    vocab_size = len(tokenizer)
    df = np.zeros(vocab_size, dtype=np.int64)
    n_docs = 0
    batch: list[str] = []

    def flush() -> None:
        enc = tokenizer(batch, add_special_tokens=False, truncation=False, verbose=False)["input_ids"]
        uniq = [np.unique(np.asarray(ids, dtype=np.int64)) for ids in enc]
        if uniq:
            df[:] += np.bincount(np.concatenate(uniq), minlength=vocab_size)[:vocab_size]
        batch.clear()

    for text in texts:
        if preprocess is not None:
            text = preprocess(text)
        batch.append(text.lower() if lowercase else text)
        n_docs += 1
        if len(batch) >= batch_size:
            flush()
    if batch:
        flush()
    return df, n_docs


@dataclass
class IdfTable:
    """One weight per token id of `tokens` (special tokens weigh 0); `df` is None for a table loaded from json."""

    tokens: list[str]
    weights: np.ndarray
    n_docs: int | None = None
    df: np.ndarray | None = None
    source: str = ""

    @classmethod
    def from_corpus(
        cls,
        tokenizer: Any,
        texts: Sequence[str],
        lowercase: bool = False,
        preprocess: Callable[[str], str] | None = None,
        cache: bool = True,
    ) -> IdfTable:
        """Compute (or load from the cache) the table of `texts` under `tokenizer`."""
        texts = list(texts)
        if not texts:
            raise DataError("idf: the corpus is empty; the IDF table needs at least one document")
        key = _cache_key(tokenizer, texts, lowercase, preprocess)
        path = cache_dir("idf") / f"{key}.npz"
        cached = _load_cached(path, len(tokenizer), len(texts)) if cache and path.exists() else None
        if cached is not None:
            df, n_docs = cached
        else:
            df, n_docs = document_frequencies(tokenizer, texts, lowercase=lowercase, preprocess=preprocess)
            if cache:  # atomic: a concurrent run never reads half a table; a full disk is one line naming the path
                atomic_write_bytes(path, lambda f: np.savez(f, df=df, n_docs=n_docs))
        weights = idf_from_df(df, n_docs).astype(np.float32)
        weights[_special_ids(tokenizer)] = 0.0
        return cls(
            tokens=id_to_token(tokenizer),
            weights=weights,
            n_docs=n_docs,
            df=df,
            source=f"{n_docs} documents{' (lowercased)' if lowercase else ''}, cache key {key}",
        )

    @classmethod
    def from_json(cls, path: str | Path, tokenizer: Any) -> IdfTable:
        """Load {token: weight}; tokens absent from the file weigh 0, tokens unknown to `tokenizer` are an error."""
        path = Path(path)
        if not path.exists():
            raise DataError(f"{path}: no such IDF file (expected a JSON object token -> weight)")
        table = read_json(path, dict, "token -> weight", DataError)
        vocab = tokenizer.get_vocab()
        weights = np.zeros(len(tokenizer), dtype=np.float32)
        for token, w in table.items():
            if token not in vocab:
                raise DataError(
                    f"{path}: token {token!r} is not in the model's vocabulary (an IDF table from "
                    f"another tokenizer? recompute it under this one)"
                )
            if not isinstance(w, (int, float)) or isinstance(w, bool) or not np.isfinite(w):
                raise DataError(f"{path}: token {token!r} has weight {w!r}, expected a finite number")
            weights[vocab[token]] = w
        weights[_special_ids(tokenizer)] = 0.0
        return cls(tokens=id_to_token(tokenizer), weights=weights, source=str(path))

    def to_json(self, path: str | Path, weights: np.ndarray | None = None) -> Path:
        """Write {token: weight} (`weights` overrides the table's, e.g. trained values); zero weights are left out."""
        w = self.weights if weights is None else np.asarray(weights, dtype=np.float32)
        return write_json(path, {t: float(x) for t, x in zip(self.tokens, w) if x != 0.0})

    def report(self) -> dict[str, Any]:
        """Coverage: how many vocabulary entries never occur in the corpus (df = 0: they get the maximal idf)."""
        out: dict[str, Any] = {"vocab_size": len(self.tokens), "source": self.source}
        nz = self.weights[self.weights > 0]
        out.update(
            nonzero_weights=int(nz.size),
            min_weight=float(nz.min()) if nz.size else 0.0,
            max_weight=float(nz.max()) if nz.size else 0.0,
        )
        if self.df is not None:
            unseen = (self.df == 0) & (self.weights > 0)  # special tokens (weight 0) are never counted
            out.update(n_docs=self.n_docs, zero_df=int(unseen.sum()), zero_df_share=float(unseen.mean()))
        return out


def _load_cached(path: Path, vocab_size: int, n_texts: int) -> tuple[np.ndarray, int] | None:
    """(df, n_docs) of a cache entry; None, with one warning naming the file, for a damaged one (then rebuilt). An .npz
    is a zip whose members carry a CRC-32 that reading them checks: a truncated or changed file fails here, and the
    shapes and counts must be those of this tokenizer and corpus."""
    try:
        with np.load(path) as z:
            df, n_docs = np.asarray(z["df"]), int(z["n_docs"])
        if (
            df.shape != (vocab_size,)
            or df.dtype.kind not in "iu"
            or n_docs != n_texts
            or (df < 0).any()
            or (df > n_docs).any()
        ):
            raise ValueError(f"df of shape {df.shape}, {n_docs} documents; expected ({vocab_size},), {n_texts}")
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
        log.warning("idf cache %s is damaged (%s: %s): recomputing it", path, type(e).__name__, first)
        return None
    return df, n_docs


def _special_ids(tokenizer: Any) -> list[int]:
    return sorted({int(i) for i in tokenizer.all_special_ids if i is not None and 0 <= i < len(tokenizer)})


def id_to_token(tokenizer: Any) -> list[str]:
    """The token string of each id (len(tokenizer) entries, added tokens included)."""
    tokens = [""] * len(tokenizer)
    for token, i in tokenizer.get_vocab().items():
        if 0 <= i < len(tokens):
            tokens[i] = token
    return tokens


def _cache_key(tokenizer: Any, texts: Sequence[str], lowercase: bool, preprocess: Callable | None) -> str:
    """The table's key: the tokenizer, the options and the corpus (every text NUL-terminated, hashed as it streams)."""
    corpus = stable_hash((t.encode("utf-8", "surrogatepass") + b"\0" for t in texts), 40)
    return settings_key(
        "idf",
        VERSION,
        tokenizer=tokenizer_key(tokenizer),
        lowercase=lowercase,
        preprocess=preprocess,
        texts=corpus,
        documents=len(texts),
    )
