"""Entry `collapse_detector`: stops (or warns) when a dead or dense collapse persists (health.py measures it)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, get_args

import pytorch_lightning as pl
import torch
from pytorch_lightning.utilities import rank_zero_warn

from vtlab.callbacks.health import side_stats
from vtlab.core.choices import CollapseAction
from vtlab.core.errors import VtlabError

log = logging.getLogger("vtlab")

ACTIONS: tuple[str, ...] = get_args(CollapseAction)


class CollapseDetector(pl.Callback):
    """Counts consecutive collapsed steps per kind (dead_query, dead_doc, dense_query, dense_doc). When one reaches
    `patience`: saves <root>/collapse.ckpt, writes <root>/collapse.json, logs a one-paragraph diagnosis, and with
    action=stop ends training (a dead model never recovers; a dense one wastes the run)."""

    KINDS = ("dead_query", "dead_doc", "dense_query", "dense_doc")

    def __init__(
        self,
        action: CollapseAction = "stop",
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

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._step = trainer.global_step  # the step whose forward produced `last_batch`

    def collapsed(self, s: dict[str, float]) -> dict[str, bool]:
        return {
            "dead_query": s["query_active_dims"] < self.dead_active_dims,
            "dead_doc": s["doc_active_dims"] < self.dead_active_dims,
            "dense_query": s["query_active_share"] > self.dense_active_share,
            "dense_doc": s["doc_active_share"] > self.dense_active_share or s["doc_cosine"] > self.dense_cosine,
        }

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
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
        healthy = (
            f"the last healthy step was {self.last_healthy_step}"
            if self.last_healthy_step is not None
            else "no step was healthy (the model started collapsed)"
        )
        parts = [
            f"SPLADE {' and '.join(types)} collapse on the {who} side since step {first} "
            f"({self.patience} consecutive steps, detected at step {self._step}); {healthy}. "
            f"Last batch: query active dims {s['query_active_dims']:.1f} ({s['query_active_share']:.1%} of the "
            f"vocabulary), doc active dims {s['doc_active_dims']:.1f} ({s['doc_active_share']:.1%}), mean "
            f"doc-doc cosine {s['doc_cosine']:.3f}."
        ]
        if "dead" in types:
            parts.append(
                "Dead (all-zero vectors, no gradient): likely causes are a decoder bias that is too "
                "negative, a regularizer weight λ that is too large, or a learning rate that is too high; "
                "fixes: lower the regularizer weight, enable apc=p60, check the λ warm-up (regularizer.*."
                "warmup_steps) and the learning rate."
            )
        if "dense" in types:
            parts.append(
                "Dense (every term active, documents indistinguishable, ~0 nDCG): likely causes are a "
                "saturated MLM head, the vocabulary gap after a backbone/vocabulary swap, or a λ that is "
                "too small; fixes: enable apc=p60, try vocab=bert-uncased init=semantic apc=p60, increase "
                "the regularizer weight."
            )
        if self.action == "stop":
            parts.append(f"Training was stopped; the state at detection is in {ckpt}.")
        return " ".join(parts)
