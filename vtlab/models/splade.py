"""SPLADE fine-tuning as a LightningModule: ranking loss + per-side sparsity regularizers + retrieval validation."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytorch_lightning as pl
import scipy.sparse as sp
import torch
import torch.distributed as dist
from torch import Tensor

from vtlab.core.errors import ConfigError, NonFiniteLossError
from vtlab.evaluation import compute_metrics, sparsity_stats
from vtlab.index import InvertedIndex, to_run
from vtlab.losses import RankingLoss
from vtlab.losses.base import group_scores
from vtlab.models.cached_step import cached_step
from vtlab.models.encoder import SpladeEncoder, dense_to_csr
from vtlab.models.optim import configure_optimizers
from vtlab.regularizers import Regularizer


class SpladeModule(pl.LightningModule):
    """Siamese (or two-tower) SPLADE trained on (query, positive, negatives[, teacher scores]) batches.

    cached_mini_batch: None encodes the batch in one pass; N encodes it N queries (and their documents) at a time with
    the cached loss (vtlab.models.cached_step): the gradient of the whole batch's loss at the memory of N queries."""

    def __init__(
        self,
        encoder: SpladeEncoder,
        loss: RankingLoss,
        optimizer: Callable[..., torch.optim.Optimizer],
        query_regularizer: Regularizer | None = None,
        doc_regularizer: Regularizer | None = None,
        scheduler: Callable[..., Any] | None = None,
        weight_decay: float = 0.01,
        val_measures: Sequence[str] = ("nDCG@10", "R@10"),
        val_top_k: int = 100,
        cached_mini_batch: int | None = None,
    ) -> None:
        super().__init__()
        if cached_mini_batch is not None and (
            isinstance(cached_mini_batch, bool) or not isinstance(cached_mini_batch, int) or cached_mini_batch < 1
        ):
            raise ConfigError(f"model.cached_mini_batch must be an integer >= 1 or null, got {cached_mini_batch!r}")
        self.cached_mini_batch = cached_mini_batch
        self.encoder = encoder
        self.loss = loss
        self.query_regularizer = query_regularizer
        self.doc_regularizer = doc_regularizer
        self.optimizer_factory = optimizer
        self.scheduler_factory = scheduler
        self.weight_decay = weight_decay
        self.val_measures = list(val_measures)
        self.val_top_k = val_top_k
        self._val: dict[int, tuple[list[str], list[sp.csr_matrix]]] = {}
        self.last_batch: dict[str, Any] = {}
        self._last_finite_loss: tuple[int, float] | None = None  # (step, loss), for the non-finite error

    # ---- training -------------------------------------------------------------------------------------------------
    def on_fit_start(self) -> None:
        # from_pretrained leaves the network in eval mode and Lightning preserves module modes: turn dropout on
        self.train()

    def encode_batch(self, enc: dict[str, Tensor], side: str) -> Tensor:
        return self.encoder(enc["input_ids"], enc["attention_mask"], side=side)

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> Tensor:
        if self.cached_mini_batch is not None:
            params = [p for p in self.parameters() if p.requires_grad]
            return cached_step(self.encode_batch, self.objective, batch, self.cached_mini_batch, params)
        q = self.encode_batch(batch["query"], "query")
        d = self.encode_batch(batch["docs"], "doc")
        return self.objective(q, d, batch)

    def objective(self, q: Tensor, d: Tensor, batch: dict[str, Any]) -> Tensor:
        """The ranking loss + the regularizers of the step's representations; logs the parts, refuses a non-finite
        total."""
        rank_loss = self.loss(q, d, batch.get("teacher_scores"))
        # the last step's representations, for health callbacks (detached: monitoring never touches the graph)
        self.last_batch = {"q": q.detach(), "d": d.detach(), "group_size": d.shape[0] // q.shape[0]}
        total = rank_loss
        logs = {"train/rank_loss": rank_loss.detach()}
        group = d.shape[0] // q.shape[0]
        for side, reg, reps, rows in (("q", self.query_regularizer, q, 1), ("d", self.doc_regularizer, d, group)):
            if reg is None:
                continue
            weighted, raw, lam = reg(reps, self.global_step, group_size=rows)
            total = total + weighted
            logs[f"train/reg_{side}"] = raw.detach()
            logs[f"train/lambda_{side}"] = lam
        logs["train/loss"] = total.detach()
        logs["train/lr"] = self.optimizers().param_groups[0]["lr"] if self._trainer is not None else 0.0
        logs["train/query_active_dims"] = (q != 0).sum(1).float().mean()
        logs["train/doc_active_dims"] = (d != 0).sum(1).float().mean()
        distilled = getattr(self.loss, "requires_teacher", False)  # else the triplets' scores are their mining's
        logs.update(margin_logs(q, d, batch.get("teacher_scores") if distilled else None))
        if not torch.isfinite(total):
            raise NonFiniteLossError(_non_finite_message(self.global_step, logs, self._last_finite_loss))
        self._last_finite_loss = (self.global_step, float(total.detach()))
        self.log_dict(logs, prog_bar=False, on_step=True, on_epoch=False, batch_size=q.shape[0])
        self.log("loss", total.detach(), prog_bar=True, on_step=True, on_epoch=False, batch_size=q.shape[0])
        return total

    # ---- validation: retrieval over a small dev collection ---------------------------------------------------------
    def on_validation_epoch_start(self) -> None:
        self._val = {0: ([], []), 1: ([], [])}

    def validation_step(self, batch: dict[str, Any], batch_idx: int, dataloader_idx: int = 0) -> None:
        side = "query" if dataloader_idx == 0 else "doc"
        w = self.encoder(batch["input_ids"], batch["attention_mask"], side=side)
        ids, mats = self._val[dataloader_idx]
        ids.extend(batch["ids"])
        mats.append(dense_to_csr(w))

    def on_validation_epoch_end(self) -> None:
        parts = self._val
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            gathered: list[Any] = [None] * dist.get_world_size()
            dist.all_gather_object(gathered, parts)
            parts = {
                k: ([i for g in gathered for i in g[k][0]], [m for g in gathered for m in g[k][1]]) for k in (0, 1)
            }
        (q_ids, q_mats), (d_ids, d_mats) = parts[0], parts[1]
        if not q_ids or not d_ids:
            return
        queries, docs = sp.vstack(q_mats, format="csr"), sp.vstack(d_mats, format="csr")
        # DistributedSampler may repeat items to even out shards; keep the first copy of each id
        q_keep = _first_occurrence(q_ids)
        d_keep = _first_occurrence(d_ids)
        queries, docs = queries[q_keep], docs[d_keep]
        q_ids, d_ids = [q_ids[i] for i in q_keep], [d_ids[i] for i in d_keep]
        index = InvertedIndex(docs, d_ids)
        scores, idx = index.search(queries, self.val_top_k)
        qrels = self.trainer.datamodule.dev_collection.qrels
        metrics = compute_metrics(to_run(scores, idx, q_ids, d_ids), qrels, self.val_measures)
        stats = sparsity_stats(queries, docs)
        logs = {f"val/{k}": float(v) for k, v in metrics.items()}
        logs.update({f"val/{k}": float(stats[k]) for k in ("query_active_dims", "doc_active_dims", "flops")})
        main = f"val/{self.val_measures[0]}"
        self.log(main, logs.pop(main), prog_bar=True)
        self.log_dict(logs)

    # ---- optimization ----------------------------------------------------------------------------------------------
    def configure_optimizers(self) -> Any:
        return configure_optimizers(self, self.optimizer_factory, self.scheduler_factory, self.weight_decay)


@torch.no_grad()
def margin_logs(q: Tensor, d: Tensor, teacher_scores: Tensor | None) -> dict[str, Tensor]:
    """The step's positive-over-negative score margins (their mean and spread: the range a distillation teacher's
    margins are matched to, docs/real-case.md), and the teacher's where it gives scores; device tensors, no sync."""
    if d.shape[0] <= q.shape[0]:
        return {}
    s = group_scores(q.detach().float(), d.detach().float())
    logs = _spread("train/margin", s[:, :1] - s[:, 1:])
    if teacher_scores is not None:
        t = teacher_scores.detach().float()
        logs.update(_spread("train/teacher_margin", t[:, :1] - t[:, 1:]))
    return logs


def _spread(name: str, values: Tensor) -> dict[str, Tensor]:
    std = values.std() if values.numel() > 1 else torch.zeros((), device=values.device)
    return {name: values.mean(), f"{name}_std": std}


def _non_finite_message(step: int, logs: dict[str, Any], last_finite: tuple[int, float] | None) -> str:
    """One line: the step, every loss part of that step (which one blew up), the last finite loss, what to try."""
    parts = ", ".join(f"{k}={float(v):.4g}" for k, v in logs.items())
    before = (
        f"last finite loss {last_finite[1]:.4g} at step {last_finite[0]}" if last_finite else "no finite step before it"
    )
    return (
        f"training stopped: non-finite loss at step {step} ({parts}); {before}. Lower model.optimizer.lr, set "
        "trainer.gradient_clip_val, or check the data and loss.temperature"
    )


def _first_occurrence(ids: Sequence[str]) -> np.ndarray:
    seen: set[str] = set()
    keep = []
    for i, x in enumerate(ids):
        if x not in seen:
            seen.add(x)
            keep.append(i)
    return np.asarray(keep, dtype=np.int64)
