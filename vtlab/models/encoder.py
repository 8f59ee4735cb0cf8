"""The SPLADE encoder: any HF masked-LM → sparse vocabulary-sized vectors. How it computes on this machine (precision,
pooling kernels, int8) is its ComputePolicy's business (vtlab.runtime.policy)."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Literal

import numpy as np
import scipy.sparse as sp
import torch
from torch import Tensor, nn

from vtlab.backbones import Backbone
from vtlab.backbones.pretrained import check_input_lengths
from vtlab.backbones.weights import reading_settings
from vtlab.core.cache_keys import settings_key
from vtlab.core.choices import EncoderPrecision
from vtlab.core.progress import encoding
from vtlab.models.activation import splade_activation
from vtlab.runtime.policy import DEFAULT_CHUNK_BYTES, Choice, ComputePolicy, ProbeTexts

Side = Literal["query", "doc"]
Forward = Callable[[Tensor, Tensor, Side], Tensor]
FirstBatch = Callable[[sp.csr_matrix], None]  # sees the vectors of the first batch encoded


class SpladeEncoder(nn.Module):
    """w = log1p(relu(max over non-pad positions of MLM logits)), one network or separate query/doc networks.

    `precision`: what encode() computes in (vtlab.runtime.policy); `probe`: the texts auto's int8 check runs on."""

    def __init__(
        self,
        model: nn.Module,
        tokenizer: Any,
        query_model: nn.Module | None = None,
        query_max_length: int = 64,
        doc_max_length: int = 256,
        double_log: bool = False,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        preprocess: Callable[[str], str] | None = None,
        precision: EncoderPrecision = "auto",
        probe: ProbeTexts | None = None,
    ) -> None:
        super().__init__()
        self.policy = ComputePolicy(precision, chunk_bytes, probe)  # a bad value fails here, not at the first encode
        # a length past the model's positions fails here, not in the forward pass of the first text that long
        check_input_lengths(
            model, {"model.encoder.query_max_length": query_max_length, "model.encoder.doc_max_length": doc_max_length}
        )
        self.model = model
        self.query_model = query_model  # None → shared (siamese) encoder
        self.tokenizer = tokenizer
        self.max_length = {"query": query_max_length, "doc": doc_max_length}
        self.double_log = double_log
        self.preprocess = preprocess
        # follow the loaded model (eval after from_pretrained), not nn.Module's default; int8 only ever encodes
        nn.Module.train(self, model.training and precision != "int8")

    @property
    def precision(self) -> str:
        return self.policy.precision

    @precision.setter
    def precision(self, value: str) -> None:
        self.policy.precision = value

    def train(self, mode: bool = True) -> SpladeEncoder:
        if mode:
            self.policy.check_trainable()
        return super().train(mode)

    @classmethod
    def from_backbone(cls, backbone: Backbone, shared: bool = True, **kwargs) -> SpladeEncoder:
        model = backbone.load_model()
        query_model = None if shared else copy.deepcopy(model)
        return cls(model, backbone.load_tokenizer(), query_model=query_model, **kwargs)

    def replace_networks(self, model: nn.Module, tokenizer) -> None:
        """Swap in a network on another vocabulary (vocabulary transfer); a separate query network follows it."""
        self.model = model
        if self.query_model is not None:
            self.query_model = copy.deepcopy(model)
        self.tokenizer = tokenizer

    def save_pretrained(self, path: str | Path) -> Path:
        """The network and tokenizer as a Hugging Face directory (a separate query network under `query/`)."""
        path = Path(path)
        self.model.save_pretrained(path)
        self.tokenizer.save_pretrained(path)
        if self.query_model is not None:
            self.query_model.save_pretrained(path / "query")
        return path

    @property
    def vocab_size(self) -> int:
        return self.model.get_output_embeddings().weight.shape[0]

    def network(self, side: Side) -> nn.Module:
        return self.query_model if (side == "query" and self.query_model is not None) else self.model

    def networks(self) -> list[nn.Module]:
        """The networks precision applies to (not e.g. an inference-free IDF table: auto's check does not see it)."""
        return [self.model] + ([self.query_model] if self.query_model is not None else [])

    def forward(self, input_ids: Tensor, attention_mask: Tensor, side: Side = "doc") -> Tensor:
        return self.pooled(input_ids, attention_mask, side)

    def pooled(self, input_ids: Tensor, attention_mask: Tensor, side: Side = "doc") -> Tensor:
        """The network's term weights for `side`, whatever a subclass does on its query side."""
        return splade_activation(self.max_logits(input_ids, attention_mask, side), self.double_log)

    def max_logits(self, input_ids: Tensor, attention_mask: Tensor, side: Side = "doc") -> Tensor:
        """Raw per-term max over non-pad positions of the MLM logits, [B, V] (before relu/log): what APC calibrates."""
        return self.policy.max_logits(self.network(side), input_ids, attention_mask)

    # ---- how it computes: the policy's answers ----------------------------------------------------------------------
    def resolved_precision(self, device: str | torch.device = "cpu") -> str:
        """The precision encode() runs: `precision`, or auto's choice for this model (vtlab.runtime.policy)."""
        return self.policy.resolved(self, device)

    def auto_choice(self, device: str | torch.device = "cpu") -> Choice:
        """What precision=auto runs for this model on `device`, and why (for an encoder whose precision is auto)."""
        return self.policy.auto_choice(self, device)

    def computing(self, device: str | torch.device = "cpu") -> AbstractContextManager[Any]:
        """The context forward passes run under for the resolved precision, for callers that run the encoder outside
        encode() (e.g. a Lightning predict step): `with encoder.computing(device): w = encoder(ids, mask, side)`."""
        return self.policy.computing(self, device)

    def int8_networks(self) -> AbstractContextManager[None]:
        """Forward passes inside run the networks' int8 copies (the fp32 networks are left as they are)."""
        return self.policy.int8_networks(self.training)

    def output_bias(self, side: Side = "doc") -> Tensor:
        """The MLM decoder bias of the network used for `side` (APC shifts it)."""
        return self.network(side).get_output_embeddings().bias

    def tokenize(self, texts: Sequence[str], side: Side) -> dict[str, Tensor]:
        if self.preprocess is not None:
            texts = [self.preprocess(t) for t in texts]
        return self.tokenizer(
            list(texts), padding=True, truncation=True, max_length=self.max_length[side], return_tensors="pt"
        )

    def batches(
        self, texts: Sequence[str], side: Side, batch_size: int = 64
    ) -> Iterator[tuple[np.ndarray, Tensor, Tensor]]:
        """(positions in `texts`, input_ids, attention_mask) batches, longest texts first.

        Every text is tokenized once, in one call of the (Rust, multi-threaded) fast tokenizer, and batches are padded
        from those ids: sorting by token length cuts padding from ~30% to ~2% on BoolQ.
        """
        texts = [self.preprocess(t) for t in texts] if self.preprocess is not None else list(texts)
        if not texts:
            return
        ids = self.tokenizer(
            texts,
            truncation=True,
            max_length=self.max_length[side],
            return_attention_mask=False,
            return_token_type_ids=False,
        )["input_ids"]
        lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
        order = np.argsort(-lengths, kind="stable")
        pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        left = getattr(self.tokenizer, "padding_side", "right") == "left"
        for start in range(0, len(texts), batch_size):
            idx = order[start : start + batch_size]
            width = int(lengths[idx[0]])  # the longest of this batch comes first
            input_ids = np.full((len(idx), width), pad_id, dtype=np.int64)
            mask = np.zeros((len(idx), width), dtype=np.int64)
            for row, i in enumerate(idx):
                n = int(lengths[i])
                cols = slice(width - n, width) if left else slice(0, n)
                input_ids[row, cols] = ids[i]
                mask[row, cols] = 1
            yield idx, torch.from_numpy(input_ids), torch.from_numpy(mask)

    @torch.inference_mode()
    def encode(
        self,
        texts: Sequence[str],
        side: Side = "doc",
        batch_size: int = 64,
        show_progress: bool = True,
        first_batch: FirstBatch | None = None,
    ) -> sp.csr_matrix:
        """Encode texts into a CSR matrix [len(texts), vocab_size], float32, in input order (batches: `batches`).

        Computed in `self.precision` (auto: `resolved_precision`). show_progress: a bar on a terminal, else a log line
        per interval (vtlab.core.progress). first_batch: called with the first batch's vectors (its longest texts)
        before the others are encoded, e.g. to warn of useless vectors before a long encoding."""
        device = next(self.parameters()).device
        return self.encode_as(
            self.resolved_precision(device), texts, side, batch_size, show_progress, self, first_batch=first_batch
        )

    @torch.inference_mode()
    def encode_as(
        self,
        precision: str,
        texts: Sequence[str],
        side: Side,
        batch_size: int,
        show_progress: bool,
        forward: Forward,
        first_batch: FirstBatch | None = None,
    ) -> sp.csr_matrix:
        was_training = self.training
        self.eval()
        device = next(self.parameters()).device
        rows: list[sp.csr_matrix] = []
        positions: list[np.ndarray] = []
        try:
            with encoding(side, len(texts), show_progress) as bar:
                for idx, input_ids, mask in self.batches(texts, side, batch_size):
                    with self.policy.runner(precision, device.type, self.training):
                        w = forward(input_ids.to(device), mask.to(device), side)
                    rows.append(dense_to_csr(w))
                    positions.append(idx)
                    if first_batch is not None and len(rows) == 1:
                        first_batch(rows[0])
                    bar.update(len(idx))
        finally:
            self.train(was_training)
        if not rows:
            return sp.csr_matrix((0, self.vocab_size), dtype=np.float32)
        stacked = sp.vstack(rows, format="csr")
        order = np.concatenate(positions)
        inverse = np.empty_like(order)
        inverse[order] = np.arange(len(order))
        return stacked[inverse]


VECTORS_VERSION = 1  # bump when an encoder computes other vectors with the same settings


def vectors_key(encoder: Any) -> str:
    """Names the document vectors `encoder` computes (an index's, a shard's): how it reads text (reading_settings),
    its precision setting and its activation. Two encodings of one key give a document the same vector in the same
    batch."""
    return settings_key(
        "vectors",
        VECTORS_VERSION,
        precision=encoder.precision,
        double_log=encoder.double_log,
        **reading_settings(encoder),
    )


def dense_to_csr(w: Tensor) -> sp.csr_matrix:
    """A [B, V] tensor of term weights → float32 CSR, keeping only the non-zeros."""
    w = w.detach().float().cpu()
    b, v = torch.nonzero(w, as_tuple=True)
    vals = w[b, v].numpy()
    indptr = np.zeros(w.shape[0] + 1, dtype=np.int64)
    np.cumsum(np.bincount(b.numpy(), minlength=w.shape[0]), out=indptr[1:])
    return sp.csr_matrix((vals, v.numpy().astype(np.int32), indptr), shape=tuple(w.shape))
