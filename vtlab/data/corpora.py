"""Plain-text corpora for MLM adaptation: zero-argument callables (Hydra `_partial_: true`) yielding documents.

Offline: BoolQ passages (≈10k Wikipedia paragraphs, ≈1M words); vocab=corpus-wordpiece's default corpus (`TextCorpus`)
is their clean training part less the dev split. Online: the authors' recipe, English Wikipedia (`wikimedia/wikipedia`
20231101.en) + BookCorpus, from the Hugging Face hub.
Without the hub (offline flags set or the endpoint unreachable) the hub corpora raise AssetError naming the dataset at
once, unless a cached copy exists.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable, Iterator
from functools import lru_cache
from typing import Any, ClassVar

from vtlab.core import hub
from vtlab.core.errors import AssetError, DataError, VtlabError
from vtlab.data.boolq import train_pairs, validation_pairs
from vtlab.data.clean import DEV_RULE, dev_holdout, training_passages
from vtlab.data.text_files import iter_texts, text_files

WIKIPEDIA = "wikimedia/wikipedia"
WIKIPEDIA_CONFIG = "20231101.en"
BOOKCORPUS = "bookcorpus"  # the id the authors' prepare_mlm_data.py loads (the hub redirects to bookcorpus/bookcorpus)
log = logging.getLogger(__name__)


def _check_max_docs(max_docs: int | None, key: str) -> None:
    if max_docs is not None and (isinstance(max_docs, bool) or not isinstance(max_docs, int) or max_docs < 1):
        raise VtlabError(f"{key}={max_docs!r} must be a positive integer or null")


_BOOLQ_SPLITS = {
    "all": lambda: (*train_pairs(), *validation_pairs()),
    "train": train_pairs,
    "validation": validation_pairs,
}


@lru_cache(maxsize=len(_BOOLQ_SPLITS))
def _distinct_passages(split: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(p for _, p in _BOOLQ_SPLITS[split]()))


def boolq_passages(max_docs: int | None = None, split: str = "all") -> tuple[str, ...]:
    """Distinct BoolQ passages (train, then validation: 10,144), in file order: the offline MLM corpus, and (called
    without arguments) the default corpus of CorpusWordPiece. `max_docs` keeps the first N.

    split: all | train | validation. Pretraining from scratch uses `train`, so the evaluation passages stay unseen.
    A tokenizer takes `all` on purpose: it is unsupervised, like a BM25 vocabulary."""
    _check_max_docs(max_docs, "mlm.corpus.max_docs")
    if split not in _BOOLQ_SPLITS:
        raise VtlabError(f"mlm.corpus.split={split!r}: expected one of {sorted(_BOOLQ_SPLITS)}")
    texts = _distinct_passages(split)
    return texts if max_docs is None else texts[:max_docs]


class TextCorpus:
    """A corpus for a tokenizer (vocab=corpus-wordpiece) as a zero-argument callable: the user's texts at `path` (a
    .txt file, one text per line; a .jsonl file, text in `field`; a BEIR directory or its corpus.jsonl; a directory of
    .txt/.jsonl files), or, when `path` is None, BoolQ's clean training passages less the gold passages of the dev
    split (`dev_size` questions drawn by `dev_seed`, data.dev's) and their near-copies (`DEFAULT`,
    vtlab.data.clean.training_passages): no passage of an evaluation corpus or of dev, so a quickstart tokenizer never
    learns from the texts it is selected or evaluated on. `key` names the config key in errors and logs."""

    DEFAULT = staticmethod(training_passages)
    # DEFAULT's name in vocabulary cache keys (vtlab.vocab.targets reads `CACHE_ID`): a fixed string, not DEFAULT's
    # module path, so moving or renaming the function keeps the vocabularies trained on it; the dev split and the
    # rule that leaves it out (DEV_RULE) follow it. Change it only to retrain them on purpose.
    DEFAULT_ID: ClassVar[str] = "vtlab.data.clean.training_passages"

    def __init__(
        self,
        path: str | None = None,
        field: str = "text",
        max_docs: int | None = None,
        key: str = "vocab.corpus",
        dev_size: int = 300,
        dev_seed: int = 0,
    ) -> None:
        _check_max_docs(max_docs, f"{key}.max_docs")
        self.path = None if path in (None, "") else str(path)
        self.field = str(field)
        self.max_docs = max_docs
        self.key = key
        self.dev_size, self.dev_seed = int(dev_size), int(dev_seed)
        self.CACHE_ID = f"{self.DEFAULT_ID}:dev{self.dev_size}-s{self.dev_seed}-{DEV_RULE}"
        if self.path is not None:
            self.files = text_files(self.path, f"{key}.path")  # a missing or unreadable kind of path fails here

    def __call__(self) -> Iterator[str]:
        if self.path is None:
            texts = self.DEFAULT(self.dev_size, self.dev_seed)
            texts = texts if self.max_docs is None else texts[: self.max_docs]
            held_out = dev_holdout(self.dev_size, self.dev_seed).describe_passages()
            log.info("%s: %d BoolQ clean training passages (%s)", self.key, len(texts), held_out)
            return iter(texts)
        texts = iter_texts(self.path, self.field, f"{self.key}.path")
        return itertools.islice(texts, self.max_docs) if self.max_docs is not None else texts

    @property
    def fixed_id(self) -> str | None:
        """Its name in vocabulary cache keys when it is the default corpus (CACHE_ID); None for a user's texts, which
        are known by their hash (vtlab.vocab.targets)."""
        return self.CACHE_ID if self.path is None and self.max_docs is None else None

    def count(self) -> int:
        """How many texts it yields (reads a user's files once); DataError when a user's files hold none."""
        n = sum(1 for _ in self())
        if n == 0:
            raise DataError(f"{self.key}.path={self.path!r}: no text in it (every line is blank)")
        return n

    def describe(self) -> str:
        if self.path is None:
            return (
                "BoolQ clean training passages (none of an evaluation corpus), less the gold passages of the dev split "
                f"(dev_size={self.dev_size}, seed={self.dev_seed}) and their near-copies"
                + (f", first {self.max_docs}" if self.max_docs else "")
            )
        files = ", ".join(str(f) for f in self.files[:3]) + (
            f" and {len(self.files) - 3} more" if len(self.files) > 3 else ""
        )
        return f"{files} (field {self.field!r})" + (f", first {self.max_docs}" if self.max_docs else "")

    def __repr__(self) -> str:
        dev = f", dev_size={self.dev_size!r}, dev_seed={self.dev_seed!r}" if self.path is None else ""
        return f"TextCorpus(path={self.path!r}, field={self.field!r}, max_docs={self.max_docs!r}{dev})"


def hub_dataset(repo: str, config: str | None = None, split: str = "train", streaming: bool = False) -> Any:
    """The hub dataset `repo` (config, split) through vtlab.core.hub.load_dataset, or AssetError naming the dataset when
    it cannot be had."""
    try:
        return hub.load_dataset(repo, config, split=split, streaming=streaming)
    except hub.HubUnavailable as e:
        why = "the Hugging Face hub is unreachable (offline) and it is not cached" if e.offline else "loading failed"
        raise AssetError(
            f"MLM corpus: cannot load dataset '{repo}' (config={config!r}, split={split!r}): {why}: "
            f"{e.reason}. Use mlm=default (offline BoolQ passages) or run with network."
        ) from None


def _texts(rows: Iterable[dict[str, Any]], field: str = "text") -> Iterator[str]:
    return (t for r in rows if isinstance(t := r.get(field), str) and t.strip())


def wikipedia(max_docs: int | None = None, config: str = WIKIPEDIA_CONFIG, streaming: bool = False) -> Iterator[str]:
    """English Wikipedia articles (one document each). `streaming` avoids the full ≈20 GB download when capped."""
    _check_max_docs(max_docs, "mlm.corpus.max_docs")
    ds = hub_dataset(WIKIPEDIA, config, streaming=streaming)
    return itertools.islice(_texts(ds), max_docs)


def bookcorpus(max_docs: int | None = None, sentences_per_doc: int = 64, streaming: bool = False) -> Iterator[str]:
    """BookCorpus: one sentence per row, consecutive within a book; grouped into pseudo-documents of
    `sentences_per_doc` sentences so packing does not put a separator after every sentence."""
    _check_max_docs(max_docs, "mlm.corpus.max_docs")
    if sentences_per_doc < 1:
        raise VtlabError(f"mlm.corpus.sentences_per_doc={sentences_per_doc!r} must be >= 1")
    ds = hub_dataset(BOOKCORPUS, None, streaming=streaming)
    sentences = _texts(ds)
    docs = (" ".join(chunk) for chunk in iter(lambda: list(itertools.islice(sentences, sentences_per_doc)), []))
    return itertools.islice(docs, max_docs)


def wikibook(max_docs: int | None = None, streaming: bool = False, sentences_per_doc: int = 64) -> Iterator[str]:
    """The authors' MLM corpus (prepare_mlm_data.py): Wikipedia 20231101.en followed by BookCorpus.
    `max_docs` caps each of the two. Both datasets are opened up front, so a missing one fails before any work."""
    wiki = wikipedia(max_docs, streaming=streaming)
    books = bookcorpus(max_docs, sentences_per_doc=sentences_per_doc, streaming=streaming)
    return itertools.chain(wiki, books)
