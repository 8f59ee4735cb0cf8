"""The documents to diagnose: BoolQ passages (default), a user's .txt / .jsonl file, or the `data` config's docs."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from vtlab.core.errors import DataError, VtlabError
from vtlab.data.corpora import boolq_passages
from vtlab.data.text_files import read_texts


def read_file(path: str | Path, field: str = "text") -> list[str]:
    """Documents of a .txt (one per line) or .jsonl (`field`) file, a BEIR directory or a directory of such files."""
    return read_texts(path, field, key="diagnose.corpus.path")


def data_documents(data_cfg: DictConfig) -> list[str]:
    """Distinct positives and negatives of the `data` config's training triplets (what APC and training see)."""
    from hydra.utils import instantiate

    datamodule = instantiate(data_cfg)
    datamodule.setup("fit")
    return list(dict.fromkeys(d for ex in datamodule.train_examples for d in (ex.positive, *ex.negatives)))


def sample(texts: list[str], max_docs: int | None, seed: int) -> list[str]:
    """A seeded random subset of at most `max_docs` documents, kept in corpus order (stable across runs)."""
    if max_docs is None or max_docs >= len(texts):
        return list(texts)
    keep = sorted(random.Random(f"diagnose-{seed}").sample(range(len(texts)), max_docs))
    return [texts[i] for i in keep]


def load_corpus(corpus: DictConfig | dict[str, Any], data_cfg: DictConfig | None = None) -> list[str]:
    """The documents `diagnose.corpus` names, distinct, capped at `max_docs` (a seeded sample)."""
    path, from_data = corpus.get("path"), bool(corpus.get("from_data", False))
    max_docs = corpus.get("max_docs")
    if max_docs is not None and int(max_docs) <= 0:
        raise VtlabError(f"diagnose.corpus.max_docs={max_docs} must be > 0 (or null for all documents)")
    if path and from_data:
        raise VtlabError("diagnose.corpus.path and diagnose.corpus.from_data=true both name a corpus; keep one")
    if path:
        texts = read_file(path, corpus.get("field", "text"))
    elif from_data:
        if data_cfg is None:
            raise VtlabError("diagnose.corpus.from_data=true needs a `data` config")
        texts = data_documents(data_cfg)
    else:
        texts = list(boolq_passages())
    texts = list(dict.fromkeys(texts))
    if not texts:
        raise DataError(f"diagnose.corpus: no documents in {path or 'the corpus'}")
    return sample(texts, None if max_docs is None else int(max_docs), int(corpus.get("seed", 0)))


def corpus_name(corpus: DictConfig | dict[str, Any]) -> str:
    """One line naming the corpus, for the report."""
    if corpus.get("path"):
        return str(corpus["path"])
    if corpus.get("from_data"):
        return "the `data` config's training documents"
    return "BoolQ passages (train + validation)"
