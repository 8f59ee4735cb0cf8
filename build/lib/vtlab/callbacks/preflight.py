"""Entry `preflight`: a probe before step 0 that warns on a dead or saturated start (health.py measures it)."""

from __future__ import annotations

import logging
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.utilities import rank_zero_warn
from torch import Tensor

from vtlab.callbacks.health import DEAD_FIX, DENSE_FIX, side_stats

log = logging.getLogger("vtlab")


class PreflightCheck(pl.Callback):
    """Before step 0 (after transfer/APC callbacks have run in `setup`), encode a small probe and warn if the start
    is already dead or saturated: both collapses are visible before any gradient step and cost a whole run later."""

    def __init__(
        self,
        num_queries: int = 16,
        num_docs: int = 32,
        dead_active_dims: float = 1.0,
        dense_active_share: float = 0.5,
        dense_cosine: float = 0.95,
    ) -> None:
        self.num_queries, self.num_docs = int(num_queries), int(num_docs)
        self.dead_active_dims = float(dead_active_dims)
        self.dense_active_share = float(dense_active_share)
        self.dense_cosine = float(dense_cosine)
        self.report: dict[str, Any] | None = None

    def probe_texts(self, trainer: pl.Trainer) -> tuple[list[str], list[str]]:
        dm = getattr(trainer, "datamodule", None)
        examples = getattr(dm, "train_examples", None)
        if examples:
            return (
                [ex.query for ex in examples[: self.num_queries]],
                [ex.positive for ex in examples[: self.num_docs]],
            )
        dev = getattr(dm, "dev_collection", None)
        if dev is not None:
            return list(dev.queries.values())[: self.num_queries], list(dev.corpus.values())[: self.num_docs]
        return [], []

    @torch.no_grad()
    def _encode(self, pl_module: pl.LightningModule, texts: list[str], side: str, batch_size: int = 16) -> Tensor:
        enc = pl_module.encoder
        parts = []
        for i in range(0, len(texts), batch_size):
            t = enc.tokenize(texts[i : i + batch_size], side)
            parts.append(enc(t["input_ids"].to(pl_module.device), t["attention_mask"].to(pl_module.device), side=side))
        return torch.cat(parts).float()

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        queries, docs = self.probe_texts(trainer)
        if not queries or not docs:
            log.warning("preflight: no training examples or dev collection to probe; skipped")
            return
        was_training = pl_module.training
        pl_module.eval()  # dropout off: the probe measures the model, not the noise
        try:
            q, d = self._encode(pl_module, queries, "query"), self._encode(pl_module, docs, "doc")
        finally:
            pl_module.train(was_training)
        nz = torch.cat([q[q != 0], d[d != 0]])
        report: dict[str, Any] = {
            **side_stats(q, d),
            "weight_mean": float(nz.mean()) if nz.numel() else 0.0,
            "weight_std": float(nz.std()) if nz.numel() > 1 else 0.0,
            "vocab_size": int(q.shape[1]),
            "num_queries": len(queries),
            "num_docs": len(docs),
        }
        problems = []
        dead = [s for s in ("query", "doc") if report[f"{s}_active_dims"] < self.dead_active_dims]
        if dead:
            problems.append(
                "DEAD START: mean active dims " + ", ".join(f"{s}={report[s + '_active_dims']:.2f}" for s in dead) + " "
                f"(< {self.dead_active_dims}); all-zero vectors get no gradient and training cannot recover: {DEAD_FIX}"
            )
        dense = [s for s in ("query", "doc") if report[f"{s}_active_share"] > self.dense_active_share]
        if dense or report["doc_cosine"] > self.dense_cosine:
            problems.append(
                "SATURATED START: active share "
                + ", ".join(f"{s}={report[s + '_active_share']:.1%}" for s in ("query", "doc"))
                + f" of {report['vocab_size']} terms, mean doc-doc cosine {report['doc_cosine']:.3f}: {DENSE_FIX}"
            )
        report["status"] = "dead" if dead else ("dense" if problems else "ok")
        report["problems"] = problems
        self.report = report

        log.info(
            "preflight: query active dims %.1f, doc active dims %.1f (share %.2f%%), "
            "weights %.3f±%.3f, doc cosine %.3f",
            report["query_active_dims"],
            report["doc_active_dims"],
            100 * report["doc_active_share"],
            report["weight_mean"],
            report["weight_std"],
            report["doc_cosine"],
        )
        keys = (
            "query_active_dims",
            "doc_active_dims",
            "query_active_share",
            "doc_active_share",
            "weight_mean",
            "weight_std",
            "doc_cosine",
        )
        _log_to_loggers(trainer, {f"health/preflight_{k}": float(report[k]) for k in keys}, step=0)
        for msg in problems:
            log.warning("preflight: %s", msg)
            rank_zero_warn(f"vtlab preflight: {msg}")


def _log_to_loggers(trainer: pl.Trainer, metrics: dict[str, float], step: int) -> None:
    for logger in trainer.loggers:
        logger.log_metrics(metrics, step=step)
