"""A dense bi-encoder for teacher scores: an embedding model (multilingual-e5-small) used as the contrastively trained
retriever it is, so that a distillation teacher scores passages without any sparse vocabulary of its own.

E5's recipe: each text carries its side's prefix ("query: " / "passage: "), the last hidden state of the transformer
body is mean-pooled over the attention mask and L2-normalised; the score of a query and a passage is the dot product
of their embeddings (their cosine). Always fp32, in inference mode: the same texts give the same embeddings."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from vtlab.backbones import Backbone
from vtlab.backbones.pretrained import check_input_lengths
from vtlab.core.progress import encoding
from vtlab.models.encoder import Side


class DenseEncoder(nn.Module):
    """Texts → L2-normalised mean-pooled embeddings [n, hidden] of `model` (a transformer body such as BertModel)."""

    def __init__(
        self,
        model: nn.Module,
        tokenizer: Any,
        query_max_length: int = 64,
        doc_max_length: int = 256,
        query_prefix: str = "query: ",
        doc_prefix: str = "passage: ",
    ) -> None:
        super().__init__()
        check_input_lengths(model, {"query_max_length": query_max_length, "doc_max_length": doc_max_length})
        self.model = model.float()
        self.train(False)  # an encoder for scores only: dropout off from the start
        self.tokenizer = tokenizer
        self.max_length = {"query": query_max_length, "doc": doc_max_length}
        self.prefix = {"query": query_prefix, "doc": doc_prefix}

    @classmethod
    def from_backbone(cls, backbone: Backbone, **kwargs: Any) -> DenseEncoder:
        """The backbone's transformer body (its masked-LM head is not used) and tokenizer."""
        return cls(backbone.load_model().base_model, backbone.load_tokenizer(), **kwargs)

    @torch.inference_mode()
    def encode(
        self, texts: Sequence[str], side: Side = "doc", batch_size: int = 64, show_progress: bool = True
    ) -> np.ndarray:
        """Embeddings of `texts` (each with `side`'s prefix), float32 [len(texts), hidden], in input order. Batches
        hold texts of similar length (longest first), so little of a batch is padding."""
        if side not in self.prefix:
            raise ValueError(f"side={side!r}: expected 'query' or 'doc'")
        was_training = self.training
        self.eval()
        device = next(self.model.parameters()).device
        prefixed = [self.prefix[side] + t for t in texts]
        ids = self.tokenizer(prefixed, truncation=True, max_length=self.max_length[side])["input_ids"] if texts else []
        order = np.argsort(-np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids)), kind="stable")
        out = np.zeros((len(texts), self.model.config.hidden_size), dtype=np.float32)
        try:
            with encoding(side, len(texts), show_progress) as bar:
                for start in range(0, len(texts), batch_size):
                    idx = order[start : start + batch_size]
                    batch = self.tokenizer.pad({"input_ids": [ids[i] for i in idx]}, return_tensors="pt")
                    mask = batch["attention_mask"].to(device)
                    hidden = self.model(input_ids=batch["input_ids"].to(device), attention_mask=mask).last_hidden_state
                    m = mask.unsqueeze(-1).float()
                    pooled = (hidden.float() * m).sum(dim=1) / m.sum(dim=1).clamp(min=1.0)
                    out[idx] = nn.functional.normalize(pooled, p=2, dim=-1).cpu().numpy()
                    bar.update(len(idx))
        finally:
            self.train(was_training)
        return out
