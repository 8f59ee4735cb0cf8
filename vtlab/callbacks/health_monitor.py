"""Entry `health_monitor`: per-step sparsity health metrics (health.py measures them)."""

from __future__ import annotations

from typing import Any

import pytorch_lightning as pl
import torch
from torch import Tensor

from vtlab.callbacks.health import active_dims, flops, margin
from vtlab.core.errors import VtlabError


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

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        last = getattr(pl_module, "last_batch", None) or {}
        q, d = last.get("q"), last.get("d")
        if q is None or d is None:
            return
        active = (d != 0).any(0)
        if self._seen is None or self._seen.shape != (self.window, active.shape[0]):
            self._seen = torch.zeros(self.window, active.shape[0], dtype=torch.bool, device=active.device)
            self._filled = 0
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
