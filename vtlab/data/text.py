"""Text for masked-LM training: a corpus tokenized once, packed into spans of `max_length`, shuffled and masked with
seeded RNGs (the MLM adaptation stage's and the pretraining replicas' data)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset
from transformers import DataCollatorForLanguageModeling, PreTrainedTokenizerBase

from vtlab.core.errors import VtlabError
from vtlab.core.progress import counted

log = logging.getLogger("vtlab")

_TOKENIZE_BATCH = 1000


def _boundary_ids(tokenizer: PreTrainedTokenizerBase) -> tuple[int, int]:
    """(start, end) ids wrapped around every span: CLS/SEP, or BOS/EOS for tokenizers without them."""
    start = tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id
    end = tokenizer.sep_token_id if tokenizer.sep_token_id is not None else tokenizer.eos_token_id
    if start is None or end is None or tokenizer.mask_token_id is None:
        raise VtlabError(
            f"MLM needs a tokenizer with CLS/SEP (or BOS/EOS) and MASK tokens; {type(tokenizer).__name__} lacks one"
        )
    return int(start), int(end)


def pack_spans(docs: Iterable[list[int]], start: int, end: int, max_length: int) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate documents (separated by `end`) and cut into spans `start` + body + `end` of ≤ max_length ids.

    Returns (ids[n, max_length] right-padded with -1, lengths[n]). Only the last span can be short."""
    body = max_length - 2
    stream: list[np.ndarray] = []
    for ids in docs:
        if ids:
            stream.append(np.asarray(ids, dtype=np.int64))
            stream.append(np.asarray([end], dtype=np.int64))  # document boundary, as a special (never masked) token
    if not stream:
        return np.zeros((0, max_length), dtype=np.int64), np.zeros(0, dtype=np.int64)
    flat = np.concatenate(stream[:-1])  # no separator after the last document: the span's own end closes it
    n = -(-len(flat) // body)
    padded = np.full(n * body, -1, dtype=np.int64)
    padded[: len(flat)] = flat
    spans = np.full((n, max_length), -1, dtype=np.int64)
    spans[:, 1:-1] = padded.reshape(n, body)
    lengths = (spans[:, 1:-1] >= 0).sum(1) + 2
    spans[:, 0] = start
    spans[np.arange(n), lengths - 1] = end
    return spans, lengths


class SpanDataset(Dataset):
    """Packed spans → {"input_ids", "special_tokens_mask"} (lists; the collator pads and masks)."""

    def __init__(self, spans: np.ndarray, lengths: np.ndarray, special_ids: Iterable[int]) -> None:
        dtype = np.uint16 if spans.size and spans.max() < 2**16 else np.int32  # halves memory for ≤65k vocabularies
        self.spans = np.where(spans < 0, 0, spans).astype(dtype)
        self.lengths = lengths
        self.special = np.asarray(sorted(set(special_ids)), dtype=np.int64)

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i: int) -> dict[str, list[int]]:
        ids = self.spans[i, : self.lengths[i]].astype(np.int64)
        return {"input_ids": ids.tolist(), "special_tokens_mask": np.isin(ids, self.special).astype(np.int64).tolist()}


class SeededMLMCollator(DataCollatorForLanguageModeling):
    """HF's MLM collator with its seed honoured in any process that is not a DataLoader worker. HF takes every process
    not named "MainProcess" for a DataLoader worker and refuses to seed there; a sweep job started by a launcher
    (hydra/launcher=parallel: a joblib worker) is such a process while its DataLoader (num_workers=0) collates in it,
    so it seeds exactly as the main process would — the same batches as a job run alone."""

    def create_rng(self, return_tensors: str | None = None) -> None:
        if torch.utils.data.get_worker_info() is not None:
            super().create_rng(return_tensors)  # a real DataLoader worker: HF's seed + worker id
            return
        self.generator = self.get_generator(self.seed, return_tensors)
        self._generator_pid = os.getpid()


class TextDataModule(pl.LightningDataModule):
    """A text corpus tokenized once, packed into spans of `max_length`, shuffled and MLM-masked with seeded RNGs."""

    def __init__(
        self,
        corpus: Callable[[], Iterable[str]] | Iterable[str],
        tokenizer: PreTrainedTokenizerBase | None = None,
        max_length: int = 128,
        batch_size: int = 32,
        mlm_probability: float = 0.3,
        seed: int = 0,
        num_workers: int = 0,
        preprocess: Callable[[str], str] | None = None,
    ) -> None:
        super().__init__()
        if not 0.0 < float(mlm_probability) < 1.0:
            raise VtlabError(f"mlm.mlm_probability={mlm_probability!r} must be in (0, 1)")
        if max_length < 3:
            raise VtlabError(f"mlm.max_length={max_length!r} must be >= 3 (CLS + a token + SEP)")
        if batch_size < 1:
            raise VtlabError(f"mlm.batch_size={batch_size!r} must be >= 1")
        self.corpus = corpus
        self.tokenizer = tokenizer
        self.max_length = int(max_length)
        self.batch_size = int(batch_size)
        self.mlm_probability = float(mlm_probability)
        self.seed = int(seed)
        self.num_workers = int(num_workers)
        self.preprocess = preprocess
        self.dataset: SpanDataset | None = None
        self.num_docs = 0
        self.num_tokens = 0  # corpus tokens, before CLS/SEP are added
        self._collator: DataCollatorForLanguageModeling | None = None

    def _token_docs(self) -> Iterable[list[int]]:
        texts = self.corpus() if callable(self.corpus) else self.corpus
        batch: list[str] = []

        def flush() -> list[list[int]]:
            enc = self.tokenizer(batch, add_special_tokens=False, return_attention_mask=False, verbose=False)
            return enc["input_ids"]

        for text in texts:
            if not isinstance(text, str) or not text.strip():
                continue
            batch.append(self.preprocess(text) if self.preprocess is not None else text)
            if len(batch) >= _TOKENIZE_BATCH:  # batched: the fast tokenizer parallelizes within a batch
                yield from flush()
                batch = []
        if batch:
            yield from flush()

    def setup(self, stage: str | None = None) -> None:
        if self.dataset is not None:
            return  # tokenize once
        if self.tokenizer is None:
            raise VtlabError("TextDataModule needs a tokenizer (pass tokenizer=...)")
        start, end = _boundary_ids(self.tokenizer)
        counts = [0, 0]

        def tally(docs: Iterable[list[int]]) -> Iterable[list[int]]:
            for ids in docs:
                counts[0] += 1
                counts[1] += len(ids)
                yield ids

        docs = counted(self._token_docs(), None, "documents", "MLM corpus: tokenizing")
        spans, lengths = pack_spans(tally(docs), start, end, self.max_length)
        self.num_docs, self.num_tokens = counts
        if len(lengths) == 0:
            raise VtlabError(f"MLM corpus {self.corpus!r} gave no text")
        self.dataset = SpanDataset(spans, lengths, self.tokenizer.all_special_ids)
        # 80/10/10 masking; its own seeded generator (per worker: seed + worker id) makes batches reproducible
        self._collator = SeededMLMCollator(self.tokenizer, mlm_probability=self.mlm_probability, seed=self.seed)
        log.info(
            "MLM corpus: %d documents, %d tokens, %d spans of <= %d",
            self.num_docs,
            self.num_tokens,
            len(self.dataset),
            self.max_length,
        )

    def train_dataloader(self) -> DataLoader:
        if self.dataset is None:
            self.setup("fit")
        return DataLoader(
            self.dataset,
            batch_size=self.batch_size,
            shuffle=True,
            collate_fn=self._collator,
            generator=torch.Generator().manual_seed(self.seed),
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
            drop_last=len(self.dataset) >= self.batch_size,
        )
