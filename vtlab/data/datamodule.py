"""Lightning DataModule: SPLADE training batches (query, positive + sampled negatives, teacher scores) and
validation loaders over a dev Collection."""

from __future__ import annotations

import functools
import itertools
import logging
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from vtlab.core.errors import ConfigError, DataError, VtlabError
from vtlab.data.collections import Collection, load_beir
from vtlab.data.examples import TripletExample
from vtlab.data.overlap import check_disjoint, split_labels

log = logging.getLogger("vtlab")


def _source_name(obj: Any) -> str:
    """Human-readable name of a data source for error messages (function, partial or literal list)."""
    if isinstance(obj, functools.partial):
        args = ", ".join(f"{k}={v!r}" for k, v in obj.keywords.items())
        return f"{_source_name(obj.func)}({args})"
    if callable(obj):
        return f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', repr(obj))}".lstrip(".")
    return f"{type(obj).__name__} of training examples"


def _check_int(key: str, value: Any, low: int) -> None:
    """Config values that size batches and sequences: integers >= low (3 tokens: CLS, one token, SEP)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ConfigError(f"{key}={value!r} must be an integer >= {low}")


def _beir_dev(path: str, split: str) -> Callable[[], Collection]:
    """The loader of a BEIR-layout dev set given as data.dev_path (checked now: a typo fails before any model loads)."""
    if not Path(path).expanduser().is_dir():
        raise ConfigError(
            f"data.dev_path={path!r}: no such directory (expected a BEIR directory: corpus.jsonl, "
            f"queries.jsonl, qrels/{split}.tsv)"
        )
    return functools.partial(load_beir, str(Path(path).expanduser()), split=split)


class EpochSampler(Sampler[tuple[int, int]]):
    """Seeded per-epoch shuffle yielding (example index, epoch).

    Lightning calls set_epoch() before each epoch. Passing the epoch along with the index keeps negative
    sampling reproducible even in worker processes, which hold their own copy of the dataset.
    `skip_next(k)` makes the next pass start at position k of the epoch's order (resuming mid-epoch).
    """

    def __init__(self, n: int, seed: int = 0, shuffle: bool = True, epoch: int = 0) -> None:
        self.n, self.seed, self.shuffle, self.epoch = n, seed, shuffle, epoch
        self._skip = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def skip_next(self, items: int) -> None:
        self._skip = int(items)

    def __len__(self) -> int:
        return self.n  # the full epoch, also when resuming: Lightning counts batches against it

    def __iter__(self) -> Iterator[tuple[int, int]]:
        order = np.random.default_rng([self.seed, self.epoch, 0]).permutation(self.n) if self.shuffle else range(self.n)
        epoch, start, self._skip = self.epoch, self._skip, 0
        return iter([(int(i), epoch) for i in order[start:]])


class ResumableDataLoader(DataLoader):
    """A training DataLoader whose place inside an epoch survives a kill and restart.

    Lightning stores `state_dict()` in every checkpoint (the fit loop's loader state) and gives it back through
    `load_state_dict()` before it iterates again. The state is (epoch, batches served in the current pass): Lightning
    does not prefetch from loaders that have a length, so every batch served when a checkpoint is written has been
    trained on. The next pass then skips exactly those batches — at the sampler when it is an EpochSampler (nothing
    is loaded or tokenized), else by drawing and dropping them — and yields the remaining batches of the same order
    with the same sampled negatives, as the uninterrupted run would have.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._served = 0
        self._resume_at = 0  # batches to skip at the start of the next pass

    def state_dict(self) -> dict[str, int]:
        return {"epoch": int(getattr(self.sampler, "epoch", 0)), "batches": self._served}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        epoch, batches = int(state.get("epoch", 0)), int(state.get("batches", 0))
        if batches >= len(self):  # saved after an epoch's last batch: the next pass is the next epoch, from its start
            epoch, batches = epoch + 1, 0
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)
        self._resume_at = batches

    def __iter__(self) -> Iterator[Any]:
        skip, self._resume_at = self._resume_at, 0
        drop = skip
        if skip and isinstance(self.sampler, EpochSampler) and self.batch_sampler is not None:
            self.sampler.skip_next(skip * self.batch_size)  # whole batches: the batch sampler regroups from there
            drop = 0
        self._served = skip
        return self._counted(super().__iter__(), drop)

    def _counted(self, batches: Iterator[Any], drop: int) -> Iterator[Any]:
        for _ in itertools.islice(batches, drop):
            pass
        for batch in batches:
            self._served += 1
            yield batch


class TripletDataset(Dataset):
    """Indexed by (i, epoch): returns (query, [positive] + n sampled negatives, aligned scores or None)."""

    def __init__(self, examples: Sequence[TripletExample], num_negatives: int, seed: int = 0) -> None:
        self.examples, self.n, self.seed = examples, num_negatives, seed

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, key: tuple[int, int] | int) -> tuple[str, list[str], list[float] | None]:
        i, epoch = key if isinstance(key, tuple) else (key, 0)
        ex = self.examples[i]
        # One generator per (seed, epoch, example): independent of batch order and worker count.
        docs, scores = ex.draw(self.n, np.random.default_rng([self.seed, epoch, i, 1]))
        return ex.query, docs, scores


class _TextDataset(Dataset):
    def __init__(self, items: list[tuple[str, str]]) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> tuple[str, str]:
        return self.items[i]


class TripletDataModule(pl.LightningDataModule):
    """Training triplets + optional dev Collection, tokenized with dynamic padding per batch.

    train batch: {"query": {input_ids, attention_mask} [B,Lq], "docs": {input_ids, attention_mask} [B*(1+n),Ld],
    "teacher_scores": [B,1+n] (only when the examples carry scores)}; docs rows b*(1+n) .. b*(1+n)+n are
    query b's positive then its n negatives.
    val: [queries_loader, docs_loader], batches {"ids": list[str], "input_ids", "attention_mask"}.
    setup() refuses a dev set that shares a question with the training examples, or a relevant passage with their
    positives (vtlab.data.overlap: what is refused, what is warned).
    """

    def __init__(
        self,
        train: Any,
        dev: Any = None,
        tokenizer: Any = None,
        batch_size: int = 16,
        num_negatives: int = 1,
        query_max_length: int = 64,
        doc_max_length: int = 256,
        eval_batch_size: int = 64,
        num_workers: int = 0,
        seed: int = 0,
        preprocess: Callable[[str], str] | None = None,
        dev_path: str | None = None,
        dev_split: str = "dev",
        teacher: Callable[[Sequence[TripletExample]], Sequence[TripletExample]] | None = None,
    ) -> None:
        super().__init__()
        for key, value, low in (
            ("batch_size", batch_size, 1),
            ("eval_batch_size", eval_batch_size, 1),
            ("num_negatives", num_negatives, 0),
            ("query_max_length", query_max_length, 3),
            ("doc_max_length", doc_max_length, 3),
            ("num_workers", num_workers, 0),
        ):
            _check_int(f"data.{key}", value, low)
        self._train_src, self._dev_src = train, dev
        self._said_no_dev = False
        self._teacher = teacher  # scores the training examples for distillation (vtlab.data.teacher.teacher_scored)
        self._dev_path = str(dev_path) if dev_path else None
        if dev_path:  # the scalar way to give your own dev set; it replaces any `dev` node of the data config
            self._dev_src = _beir_dev(str(dev_path), str(dev_split))
        self.tokenizer = tokenizer
        self.batch_size, self.eval_batch_size = int(batch_size), int(eval_batch_size)
        self.num_negatives = int(num_negatives)
        self.query_max_length, self.doc_max_length = int(query_max_length), int(doc_max_length)
        self.num_workers, self.seed = int(num_workers), int(seed)
        self.preprocess = preprocess
        self.train_examples: list[TripletExample] | None = None
        self._train_source: dict[str, Any] = {}  # the settings the examples were built from (Triplets.source)
        self.dev_collection: Collection | None = None
        self.has_teacher_scores = False
        self._epoch = 0
        self._train_sampler: EpochSampler | None = None

    # ---- setup -----------------------------------------------------------------------------------------

    def train_documents(self) -> list[str]:
        """The distinct positives and negatives of the training examples, in first-seen order (APC's probe, IDF)."""
        if self.train_examples is None:
            self.setup("fit")
        return list(dict.fromkeys(d for ex in self.train_examples for d in (ex.positive, *ex.negatives)))

    def set_tokenizer(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    def set_epoch(self, epoch: int) -> None:
        """For use outside Lightning (which calls the sampler's set_epoch itself)."""
        self._epoch = int(epoch)
        if self._train_sampler is not None:
            self._train_sampler.set_epoch(epoch)

    def setup(self, stage: str | None = None) -> None:
        if self.train_examples is None:
            self.train_examples = self._load_train()
        if self.dev_collection is None and self._dev_src is not None:
            dev = self._dev_src() if callable(self._dev_src) else self._dev_src
            if not isinstance(dev, Collection):
                raise DataError(f"{_source_name(self._dev_src)}: dev must be a Collection, got {type(dev).__name__}")
            if not dev.queries or not dev.corpus:
                raise DataError(f"{dev.name}: dev collection has {len(dev.queries)} queries and {len(dev.corpus)} docs")
            # before any training step: a dev set that overlaps training would choose checkpoints on memorisation
            check_disjoint(dev, self.train_examples, *split_labels(dev.source, self._train_source, self._dev_path))
            self.dev_collection = dev
            log.info(
                "dev set %s: %d queries over %d documents (checkpoint selection)",
                dev.name,
                len(dev.queries),
                len(dev.corpus),
            )
        elif self._dev_src is None and not self._said_no_dev:
            self._said_no_dev = True
            log.warning(
                "no dev set (data.dev_path is not set and the data config has no dev): no checkpoint is chosen on "
                "dev; the weights after the last training step are the ones kept and evaluated"
            )

    def _load_train(self) -> list[TripletExample]:
        src = self._train_src
        name = _source_name(src)
        examples = src() if callable(src) else src
        self._train_source = dict(getattr(examples, "source", None) or {})
        examples = list(examples) if examples is not None else []
        if not examples:
            raise DataError(f"{name}: the training set is empty")
        if self._teacher is not None:
            examples = list(self._teacher(examples))
        with_scores = 0
        for i, ex in enumerate(examples):
            if not isinstance(ex, TripletExample):
                raise DataError(f"{name}: example {i} is a {type(ex).__name__}, expected TripletExample")
            if len(ex.negatives) < self.num_negatives:
                raise DataError(
                    f"{name}: example {i} (query {ex.query[:60]!r}) has {len(ex.negatives)} negatives, "
                    f"but data.num_negatives={self.num_negatives}"
                )
            with_scores += ex.scores is not None
        if 0 < with_scores < len(examples):
            first = next(i for i, ex in enumerate(examples) if ex.scores is None)
            raise DataError(
                f"{name}: {with_scores}/{len(examples)} examples have teacher 'scores' "
                f"(example {first} has none); give all or none"
            )
        self.has_teacher_scores = with_scores == len(examples)
        log.info(
            "training set: %d examples%s%s",
            len(examples),
            f" from {name}" if callable(src) else "",
            " with teacher scores" if self.has_teacher_scores else "",
        )
        return examples

    # ---- tokenization ----------------------------------------------------------------------------------

    def _tok(self, texts: list[str], max_length: int) -> dict[str, torch.Tensor]:
        if self.tokenizer is None:
            raise VtlabError("TripletDataModule has no tokenizer: pass tokenizer= or call set_tokenizer()")
        if self.preprocess is not None:
            texts = [self.preprocess(t) for t in texts]
        enc = self.tokenizer(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
        return {"input_ids": enc["input_ids"].long(), "attention_mask": enc["attention_mask"].long()}

    def _collate_train(self, items: list[tuple[str, list[str], list[float] | None]]) -> dict[str, Any]:
        batch: dict[str, Any] = {
            "query": self._tok([q for q, _, _ in items], self.query_max_length),
            "docs": self._tok([d for _, docs, _ in items for d in docs], self.doc_max_length),
        }
        if self.has_teacher_scores:
            batch["teacher_scores"] = torch.tensor([s for _, _, s in items], dtype=torch.float32)
        return batch

    def _collate_text(self, items: list[tuple[str, str]], max_length: int) -> dict[str, Any]:
        return {"ids": [i for i, _ in items], **self._tok([t for _, t in items], max_length)}

    # ---- loaders ---------------------------------------------------------------------------------------

    def train_dataloader(self) -> DataLoader:
        if self.train_examples is None:
            self.setup("fit")
        assert self.train_examples is not None
        self._train_sampler = EpochSampler(len(self.train_examples), seed=self.seed, epoch=self._epoch)
        return ResumableDataLoader(
            TripletDataset(self.train_examples, self.num_negatives, seed=self.seed),
            batch_size=self.batch_size,
            sampler=self._train_sampler,
            collate_fn=self._collate_train,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
            generator=self._generator(),
        )

    def _generator(self) -> torch.Generator:
        # Each DataLoader pass draws a worker base seed; from its own generator, not the global RNG, so starting an
        # epoch or a validation never shifts the dropout RNG stream (a resumed run replays it from the checkpoint).
        return torch.Generator().manual_seed(self.seed)

    def val_dataloader(self) -> list[DataLoader]:
        if self._dev_src is None:
            return []
        if self.dev_collection is None:
            self.setup("validate")
        assert self.dev_collection is not None
        queries = list(self.dev_collection.queries.items())
        # Longest docs first: similar lengths per batch waste less padding; ids keep the mapping.
        docs = sorted(self.dev_collection.corpus.items(), key=lambda kv: -len(kv[1]))
        return [
            DataLoader(
                _TextDataset(queries),
                batch_size=self.eval_batch_size,
                shuffle=False,
                collate_fn=functools.partial(self._collate_text, max_length=self.query_max_length),
                num_workers=self.num_workers,
                generator=self._generator(),
            ),
            DataLoader(
                _TextDataset(docs),
                batch_size=self.eval_batch_size,
                shuffle=False,
                collate_fn=functools.partial(self._collate_text, max_length=self.doc_max_length),
                num_workers=self.num_workers,
                generator=self._generator(),
            ),
        ]
