"""Inference-free SPLADE: documents through the MLM network, queries as a lookup of their tokens in an IDF table.

Query latency is that of BM25 (tokenize + look up): no network runs on the query side, ever. The query vector has
one entry per distinct query token (special tokens 0) times relu(idf[token]), or all ones without IDF (the authors'
"woidf" runs). The IDF table is computed under the model's current tokenizer (vtlab/models/idf.py) and can be
trained with its own learning rate.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from vtlab.backbones import Backbone
from vtlab.core import hub
from vtlab.core.assets import looks_like_path
from vtlab.core.errors import VtlabError
from vtlab.models.encoder import Side, SpladeEncoder
from vtlab.models.idf import IdfTable, id_to_token
from vtlab.models.optim import configure_optimizers
from vtlab.models.splade import SpladeModule

log = logging.getLogger("vtlab")

IDF_FILE = "idf.json"


class InferenceFreeEncoder(SpladeEncoder):
    """SPLADE documents, IDF-weighted bag-of-tokens queries.

    use_idf: false → every query token weighs 1 (no table needed).
    count_repeats: a token repeated in the query counts that many times (default: once, as the authors do).
    idf_lowercase: lowercase the corpus before counting document frequencies (the authors' `--lowercase`).
    idf_path: an `idf.json` to start from instead of computing one; found automatically beside a local backbone.
    """

    def __init__(
        self,
        model: nn.Module,
        tokenizer: Any,
        query_max_length: int = 64,
        doc_max_length: int = 256,
        double_log: bool = False,
        preprocess: Callable[[str], str] | None = None,
        use_idf: bool = True,
        count_repeats: bool = False,
        idf_lowercase: bool = False,
        idf_path: str | Path | None = None,
        **kwargs: Any,
    ) -> None:
        if kwargs.get("query_model") is not None:
            raise VtlabError("model.encoder: inference-free SPLADE has no query network (query_model must be None)")
        super().__init__(
            model,
            tokenizer,
            query_max_length=query_max_length,
            doc_max_length=doc_max_length,
            double_log=double_log,
            preprocess=preprocess,
            **kwargs,
        )
        self.use_idf, self.count_repeats, self.idf_lowercase = bool(use_idf), bool(count_repeats), bool(idf_lowercase)
        self.trainable_idf = False
        self._reset_query_side()
        if idf_path is not None and self.use_idf:
            self.set_idf(IdfTable.from_json(idf_path, tokenizer))

    @classmethod
    def from_backbone(cls, backbone: Backbone, shared: bool | None = None, **kwargs: Any) -> InferenceFreeEncoder:
        """A saved inference-free model (or an OpenSearch doc model) ships its table as `idf.json` beside the weights:
        used when `idf_path` is not given, from a local directory or, for a hub id, downloaded from the repo."""
        if shared is False:
            raise VtlabError("model.encoder.shared=false: inference-free SPLADE has no query network to separate")
        model, tokenizer = backbone.load_model(), backbone.load_tokenizer()  # their own errors come first
        if kwargs.get("idf_path") is None and kwargs.get("use_idf", True):
            import os

            source, field = backbone._source(tokenizer=False)  # asset: names and generated backbones resolved
            if os.path.isdir(source):
                local = Path(source) / IDF_FILE
                kwargs["idf_path"] = local if local.is_file() else None
            elif not looks_like_path(source):  # a hub id (the model itself loaded from the hub or its cache)
                from huggingface_hub import _CACHED_NO_EXIST, hf_hub_download, try_to_load_from_cache
                from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError

                cached = try_to_load_from_cache(source, IDF_FILE, revision=backbone.revision)
                offline_hint = (
                    "; run once with network, set model.encoder.idf_path=FILE, or model.encoder.use_idf=false"
                )
                if isinstance(cached, str):
                    kwargs["idf_path"] = cached
                elif cached is not _CACHED_NO_EXIST:  # unknown: ask the hub (a known-absent file needs no ask)
                    if hub.offline() or not hub.reachable():
                        raise VtlabError(
                            f"{field}={source!r}: cannot check the hub for its {IDF_FILE} (offline)" + offline_hint
                        )
                    try:
                        kwargs["idf_path"] = hf_hub_download(source, IDF_FILE, revision=backbone.revision)
                    except LocalEntryNotFoundError as exc:  # before EntryNotFoundError: it is a subclass
                        raise VtlabError(
                            f"{field}={source!r}: could not download {IDF_FILE} (offline)" + offline_hint
                        ) from exc
                    except EntryNotFoundError:
                        pass  # the repo has no table: one is computed from the training / evaluation corpus
                    except OSError as exc:
                        why = (
                            "hub unreachable" + offline_hint
                            if hub.is_connection_error(exc)
                            else (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                        )
                        raise VtlabError(f"{field}={source!r}: could not download {IDF_FILE}: {why}") from exc
        return cls(model, tokenizer, **kwargs)

    # ---- the query side --------------------------------------------------------------------------------------------
    def _reset_query_side(self) -> None:
        """A fresh (unfitted) table sized to the current tokenizer; specials masked out."""
        vocab = self.vocab_size
        if len(self.tokenizer) > vocab:
            raise VtlabError(f"tokenizer has {len(self.tokenizer)} tokens but the MLM head only {vocab} outputs")
        device = next(self.model.parameters()).device
        self.idf = nn.Parameter(torch.ones(vocab, device=device), requires_grad=self.trainable_idf)
        keep = torch.ones(vocab, device=device)
        keep[[i for i in self.tokenizer.all_special_ids if i is not None and 0 <= i < vocab]] = 0.0
        self.register_buffer("query_token_mask", keep, persistent=False)
        self.idf_table: IdfTable | None = None

    @property
    def needs_idf(self) -> bool:
        """Whether the query side still lacks a table for the current tokenizer."""
        return self.use_idf and self.idf_table is None

    def set_trainable_idf(self, trainable: bool) -> None:
        self.trainable_idf = bool(trainable)
        self.idf.requires_grad_(self.trainable_idf)

    def set_idf(self, table: IdfTable) -> None:
        if len(table.weights) > self.vocab_size or table.tokens[: len(self.tokenizer)] != id_to_token(self.tokenizer):
            raise VtlabError("idf table was built for another tokenizer (its tokens differ from the model's)")
        with torch.no_grad():
            self.idf.zero_()
            self.idf[: len(table.weights)] = torch.as_tensor(table.weights, device=self.idf.device)
        self.idf_table = table

    def fit_idf(self, texts: Sequence[str]) -> IdfTable:
        """Compute the table of `texts` under the current tokenizer and preprocessing (cached), and use it."""
        table = IdfTable.from_corpus(self.tokenizer, texts, lowercase=self.idf_lowercase, preprocess=self.preprocess)
        self.set_idf(table)
        return table

    def fit_corpus(self, texts: Sequence[str]) -> None:
        """Evaluation hook: a model that never saw a table for this tokenizer gets the evaluation corpus's IDF."""
        if self.needs_idf:
            table = self.fit_idf(texts)
            log.info("idf: no table for this tokenizer; computed from the %d evaluation documents", table.n_docs)

    def query_weights(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        """[B, V]: distinct (or counted) non-special query tokens × relu(idf); differentiable in `idf` only."""
        if self.needs_idf:
            raise VtlabError(
                "inference-free query side has no IDF table for this tokenizer: fit_idf(texts) first, "
                "or set model.encoder.idf_path (or model.encoder.use_idf=false)"
            )
        counts = torch.zeros(input_ids.shape[0], self.vocab_size, device=input_ids.device)
        counts.scatter_add_(1, input_ids, attention_mask.to(counts.dtype))
        if not self.count_repeats:
            counts = (counts > 0).to(counts.dtype)
        counts = counts * self.query_token_mask
        return counts * torch.relu(self.idf) if self.use_idf else counts

    def forward(self, input_ids: Tensor, attention_mask: Tensor, side: Side = "doc") -> Tensor:
        if side == "query":
            return self.query_weights(input_ids, attention_mask)
        return super().forward(input_ids, attention_mask, side="doc")

    def network(self, side: Side) -> nn.Module:
        return self.model  # only documents run the network (APC and health probes ask for the doc side)

    # ---- vocabulary transfer and saving -----------------------------------------------------------------------------
    def replace_networks(self, model: nn.Module, tokenizer: Any) -> None:
        super().replace_networks(model, tokenizer)
        self._reset_query_side()  # the old table's ids name other strings now: recompute under the new tokenizer
        self.set_trainable_idf(self.trainable_idf)

    def save_pretrained(self, path: str | Path) -> Path:
        path = super().save_pretrained(path)
        if self.use_idf and self.idf_table is not None:
            self.idf_table.to_json(path / IDF_FILE, weights=torch.relu(self.idf).detach().cpu().numpy())
        return path


class InferenceFreeModule(SpladeModule):
    """SPLADE training with an inference-free encoder: doc-side regularization only; an optionally trainable IDF with
    its own learning rate (the authors' `idf_lr`) in a separate optimizer parameter group."""

    def __init__(
        self,
        encoder: InferenceFreeEncoder,
        *args: Any,
        trainable_idf: bool = False,
        idf_lr: float | None = None,
        query_regularizer: Any = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(encoder, InferenceFreeEncoder):
            raise VtlabError(
                f"model.encoder: inference-free training needs an InferenceFreeEncoder, got {type(encoder).__name__}"
            )
        if query_regularizer is not None:
            raise VtlabError(
                "model.query_regularizer: inference-free SPLADE has no query network to regularize; "
                "set it to null (regularize documents with model.doc_regularizer)"
            )
        if trainable_idf and not encoder.use_idf:
            raise VtlabError("model.trainable_idf=true needs model.encoder.use_idf=true (there is no table to train)")
        super().__init__(encoder, *args, query_regularizer=None, **kwargs)
        encoder.set_trainable_idf(trainable_idf)
        self.idf_lr = idf_lr

    def configure_optimizers(self) -> Any:
        groups = {}
        if self.encoder.trainable_idf:  # its own group: no weight decay pulling weights to 0, and its own lr
            groups["encoder.idf"] = {"weight_decay": 0.0, **({"lr": float(self.idf_lr)} if self.idf_lr else {})}
        return configure_optimizers(
            self, self.optimizer_factory, self.scheduler_factory, self.weight_decay, own_groups=groups
        )
