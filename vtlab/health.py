"""Training-health callbacks for SPLADE's two failure modes.

* dead collapse: every term weight is 0 (relu of negative logits), so there is no gradient and training can never
  recover (the mmBERT-on-Korean case: active dims fall to 0 and retrieval with them);
* dense collapse: every vocabulary entry is active, documents are near-identical (pairwise cosine ≈ 1) and nDCG is
  ~0 (sentence-transformers issue #3431; a saturated MLM head or a vocabulary gap after a backbone swap).

`PreflightCheck` probes the model once before the first step, `HealthMonitor` logs per-step health metrics, and
`CollapseDetector` stops (or warns) when a collapse persists, leaving a checkpoint and a diagnosis behind.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.utilities import rank_zero_warn
from torch import Tensor

from vtlab.errors import VtlabError

log = logging.getLogger("vtlab")

ACTIONS = ("warn", "stop")
DEAD_FIX = (
    "the decoder bias is too negative (or the regularizer weight λ / the learning rate is too large): lower the "
    "regularizer weight, enable apc=p60 to calibrate the decoder bias, and check the λ warm-up"
)
DENSE_FIX = (
    "the MLM head is saturated — the vocabulary-gap failure (or λ is too small): enable apc=p60; try "
    "vocab=bert-uncased init=semantic apc=p60; increase the regularizer weight"
)


# ---------------------------------------------------------------------------------------------------- statistics


def active_dims(w: Tensor) -> float:
    """Mean number of non-zero terms per row."""
    return float((w != 0).sum(1).float().mean()) if w.numel() else 0.0


def mean_pairwise_cosine(w: Tensor) -> float:
    """Mean cosine over distinct row pairs; all-zero rows count as cosine 0 (a dead model is not 'similar')."""
    n = w.shape[0]
    if n < 2:
        return 0.0
    x = torch.nn.functional.normalize(w.float(), dim=1)  # zero rows stay zero
    sim = x @ x.T
    return float((sim.sum() - sim.diagonal().sum()) / (n * (n - 1)))


def flops(q: Tensor, d: Tensor) -> float:
    """Σ_v p_q(v)·p_d(v) over the batch (the SPLADE FLOPS estimate, as in `evaluation.sparsity_stats`)."""
    return float((q != 0).float().mean(0) @ (d != 0).float().mean(0))


def margin(q: Tensor, d: Tensor, group_size: int) -> float | None:
    """Mean over queries of positive score − max negative score (own negatives; in-batch ones when there are none)."""
    b = q.shape[0]
    scores = q.float() @ d.float().T  # [B, B*G]
    pos_col = torch.arange(b, device=q.device) * group_size
    pos = scores[torch.arange(b, device=q.device), pos_col]
    if group_size > 1:
        neg = scores.view(b, b, group_size)[torch.arange(b), torch.arange(b), 1:].max(1).values
    elif b > 1:
        masked = scores.clone()
        masked[torch.arange(b), pos_col] = float("-inf")
        neg = masked.max(1).values
    else:
        return None
    return float((pos - neg).mean())


def side_stats(q: Tensor, d: Tensor) -> dict[str, float]:
    vocab = q.shape[1]
    qd, dd = active_dims(q), active_dims(d)
    return {
        "query_active_dims": qd,
        "doc_active_dims": dd,
        "query_active_share": qd / vocab,
        "doc_active_share": dd / vocab,
        "doc_cosine": mean_pairwise_cosine(d),
    }


def _log_to_loggers(trainer: pl.Trainer, metrics: dict[str, float], step: int) -> None:
    for logger in trainer.loggers:
        logger.log_metrics(metrics, step=step)


# ---------------------------------------------------------------------------------------------------- preflight


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
            return ([ex.query for ex in examples[: self.num_queries]],
                    [ex.positive for ex in examples[: self.num_docs]])
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
            "preflight: query active dims %.1f, doc active dims %.1f (share %.2f%%), weights %.3f±%.3f, doc cosine %.3f",
            report["query_active_dims"], report["doc_active_dims"], 100 * report["doc_active_share"],
            report["weight_mean"], report["weight_std"], report["doc_cosine"],
        )
        keys = ("query_active_dims", "doc_active_dims", "query_active_share", "doc_active_share", "weight_mean",
                "weight_std", "doc_cosine")
        _log_to_loggers(trainer, {f"health/preflight_{k}": float(report[k]) for k in keys}, step=0)
        for msg in problems:
            log.warning("preflight: %s", msg)
            rank_zero_warn(f"vtlab preflight: {msg}")


# ---------------------------------------------------------------------------------------------------- monitor


class HealthMonitor(pl.Callback):
    """Per-step sparsity health from the module's detached `last_batch`: active dims, FLOPS, the share of the
    vocabulary no document used in the last `window` steps (dead terms), and the positive-vs-hardest-negative margin."""

    def __init__(self, window: int = 50, log_every_n_steps: int = 1) -> None:
        if window < 1 or log_every_n_steps < 1:
            raise VtlabError("callbacks.health_monitor: window and log_every_n_steps must be >= 1")
        self.window, self.log_every_n_steps = int(window), int(log_every_n_steps)
        self._seen: Tensor | None = None  # ring buffer [window, V] of "term active in some doc this step"
        self._filled = 0
        self._calls = 0

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        last = getattr(pl_module, "last_batch", None) or {}
        q, d = last.get("q"), last.get("d")
        if q is None or d is None:
            return
        active = (d != 0).any(0)
        if self._seen is None or self._seen.shape != (self.window, active.shape[0]):
            self._seen, self._filled = torch.zeros(self.window, active.shape[0], dtype=torch.bool, device=active.device), 0
        self._seen = self._seen.to(active.device)  # restored from a checkpoint on the CPU
        self._seen[self._filled % self.window] = active  # the ring buffer is updated every step, logged less often
        self._filled += 1
        self._calls += 1
        if (self._calls - 1) % self.log_every_n_steps:
            return
        used = self._seen[: min(self._filled, self.window)].any(0)
        metrics = {
            "health/query_active_dims": active_dims(q),
            "health/doc_active_dims": active_dims(d),
            "health/flops": flops(q, d),
            "health/never_active_share": 1.0 - float(used.float().mean()),
        }
        m = margin(q, d, int(last.get("group_size", d.shape[0] // max(q.shape[0], 1))))
        if m is not None:
            metrics["health/margin"] = m
        pl_module.log_dict(metrics, on_step=True, on_epoch=False, batch_size=q.shape[0])

    def state_dict(self) -> dict[str, Any]:
        """The ring buffer and counters go into checkpoints: a resumed run reports the uninterrupted run's values."""
        return {"seen": self._seen, "filled": self._filled, "calls": self._calls}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._seen, self._filled, self._calls = state_dict["seen"], state_dict["filled"], state_dict["calls"]


# ---------------------------------------------------------------------------------------------------- detector


class CollapseDetector(pl.Callback):
    """Counts consecutive collapsed steps per kind (dead_query, dead_doc, dense_query, dense_doc). When one reaches
    `patience`: saves <root>/collapse.ckpt, writes <root>/collapse.json, logs a one-paragraph diagnosis, and with
    action=stop ends training (a dead model never recovers; a dense one wastes the run)."""

    KINDS = ("dead_query", "dead_doc", "dense_query", "dense_doc")

    def __init__(
        self,
        action: str = "stop",
        patience: int = 20,
        dead_active_dims: float = 0.5,
        dense_active_share: float = 0.5,
        dense_cosine: float = 0.99,
        warmup_steps: int = 0,
    ) -> None:
        if action not in ACTIONS:
            raise VtlabError(f"callbacks.collapse_detector.action={action!r}: expected one of {', '.join(ACTIONS)}")
        if patience < 1:
            raise VtlabError(f"callbacks.collapse_detector.patience={patience}: must be >= 1")
        self.action, self.patience, self.warmup_steps = action, int(patience), int(warmup_steps)
        self.dead_active_dims = float(dead_active_dims)
        self.dense_active_share = float(dense_active_share)
        self.dense_cosine = float(dense_cosine)
        self.counts = {k: 0 for k in self.KINDS}
        self.first_step: dict[str, int | None] = {k: None for k in self.KINDS}
        self.last_healthy_step: int | None = None
        self.reported: set[str] = set()
        self.fired: dict[str, Any] | None = None  # the collapse.json payload once the detector has fired
        self._step = 0

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        self._step = trainer.global_step  # the step whose forward produced `last_batch`

    def collapsed(self, s: dict[str, float]) -> dict[str, bool]:
        return {
            "dead_query": s["query_active_dims"] < self.dead_active_dims,
            "dead_doc": s["doc_active_dims"] < self.dead_active_dims,
            "dense_query": s["query_active_share"] > self.dense_active_share,
            "dense_doc": s["doc_active_share"] > self.dense_active_share or s["doc_cosine"] > self.dense_cosine,
        }

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        last = getattr(pl_module, "last_batch", None) or {}
        if last.get("q") is None or last.get("d") is None or self._step < self.warmup_steps:
            return
        stats = side_stats(last["q"], last["d"])
        flags = self.collapsed(stats)
        if trainer.world_size > 1:
            # any rank collapsed → collapsed on all: every rank keeps the same counters and takes the same decision
            # (save_checkpoint is collective, and a lone should_stop would hang DDP)
            t = torch.tensor([float(flags[k]) for k in self.KINDS], device=pl_module.device)
            t = trainer.strategy.reduce(t, reduce_op="max")
            flags = {k: bool(v) for k, v in zip(self.KINDS, t.tolist())}
        for kind, bad in flags.items():
            if bad and self.counts[kind] == 0:
                self.first_step[kind] = self._step
            self.counts[kind] = self.counts[kind] + 1 if bad else 0
        if not any(flags.values()):
            self.last_healthy_step = self._step
        due = [k for k in self.KINDS if self.counts[k] >= self.patience and k not in self.reported]
        if not due:
            return
        self.reported.update(due)
        self._fire(trainer, due, stats)

    def _fire(self, trainer: pl.Trainer, kinds: list[str], stats: dict[str, float]) -> None:
        types = sorted({k.split("_")[0] for k in kinds})
        sides = sorted({k.split("_")[1] for k in kinds}, key=("query", "doc").index)
        first = min((self.first_step[k] for k in kinds if self.first_step[k] is not None), default=self._step)
        root = Path(trainer.default_root_dir)
        payload = {
            "kind": "+".join(types),
            "side": "both" if len(sides) == 2 else sides[0],
            "kinds": kinds,
            "step": self._step,
            "first_collapsed_step": first,
            "last_healthy_step": self.last_healthy_step,
            "patience": self.patience,
            "action": self.action,
            "metrics": stats,
            "diagnosis": self.diagnosis(types, sides, first, stats, root / "collapse.ckpt"),
        }
        if self.action == "stop":
            payload["checkpoint"] = str(root / "collapse.ckpt")
            trainer.save_checkpoint(payload["checkpoint"])  # collective: every rank calls it
        if trainer.is_global_zero:
            root.mkdir(parents=True, exist_ok=True)
            (root / "collapse.json").write_text(json.dumps(payload, indent=2) + "\n")
        log.warning("collapse detector: %s", payload["diagnosis"])
        rank_zero_warn(f"vtlab collapse detector: {payload['diagnosis']}")
        if self.action == "stop":
            self.fired = payload
            trainer.should_stop = True
        elif self.fired is None:
            self.fired = payload

    def diagnosis(self, types: list[str], sides: list[str], first: int, s: dict[str, float], ckpt: Path) -> str:
        who = "query and document" if len(sides) == 2 else sides[0].replace("doc", "document")
        healthy = (f"the last healthy step was {self.last_healthy_step}" if self.last_healthy_step is not None
                   else "no step was healthy (the model started collapsed)")
        parts = [f"SPLADE {' and '.join(types)} collapse on the {who} side since step {first} "
                 f"({self.patience} consecutive steps, detected at step {self._step}); {healthy}. "
                 f"Last batch: query active dims {s['query_active_dims']:.1f} ({s['query_active_share']:.1%} of the "
                 f"vocabulary), doc active dims {s['doc_active_dims']:.1f} ({s['doc_active_share']:.1%}), mean "
                 f"doc-doc cosine {s['doc_cosine']:.3f}."]
        if "dead" in types:
            parts.append("Dead (all-zero vectors, no gradient): likely causes are a decoder bias that is too "
                         "negative, a regularizer weight λ that is too large, or a learning rate that is too high; "
                         "fixes: lower the regularizer weight, enable apc=p60, check the λ warm-up (regularizer.*."
                         "warmup_steps) and the learning rate.")
        if "dense" in types:
            parts.append("Dense (every term active, documents indistinguishable, ~0 nDCG): likely causes are a "
                         "saturated MLM head, the vocabulary gap after a backbone/vocabulary swap, or a λ that is "
                         "too small; fixes: enable apc=p60, try vocab=bert-uncased init=semantic apc=p60, increase "
                         "the regularizer weight.")
        if self.action == "stop":
            parts.append(f"Training was stopped; the state at detection is in {ckpt}.")
        return " ".join(parts)
