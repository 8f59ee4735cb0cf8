"""Entries `apc` and `start_shift`: one decoder-bias shift (vtlab.apc) when fitting starts."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np
import pytorch_lightning as pl

from vtlab.apc import APC, flat_metrics, summary_line, write_outputs
from vtlab.errors import VtlabError

log = logging.getLogger("vtlab")


class APCCallback(pl.Callback):
    """Calibrate the module's encoder once when fitting starts (after vocabulary transfer: list it after that callback).

    texts: a function returning the probe documents; default: the distinct positives and negatives of the
    datamodule's training examples, in a seeded random order (the probe takes the first `apc.num_docs`).
    """

    def __init__(self, apc: APC, out_dir: str | None = None, texts: Callable[[], list[str]] | None = None) -> None:
        self.apc, self.out_dir, self.texts = apc, out_dir, texts
        self.report: dict[str, Any] | None = None

    def _train_texts(self, trainer: pl.Trainer) -> list[str]:
        datamodule = getattr(trainer, "datamodule", None)
        if datamodule is None or not hasattr(datamodule, "train_documents"):
            raise VtlabError("apc: no probe texts: pass texts= to APCCallback or fit with a TripletDataModule")
        docs = datamodule.train_documents()
        order = np.random.default_rng(self.apc.seed).permutation(len(docs))[: self.apc.num_docs]
        return [docs[i] for i in order]

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit" or not self.apc.enabled or self.report is not None:
            return
        texts = self.texts() if self.texts is not None else self._train_texts(trainer)
        # every rank calibrates (same texts, same seed → same cutoff); only rank 0 writes files
        self.report = self.apc.calibrate(pl_module.encoder, texts)
        log.info(summary_line(self.report, "before"))
        log.info(summary_line(self.report, "after"))
        for logger in trainer.loggers:
            logger.log_metrics(flat_metrics(self.report), step=0)
        if trainer.is_global_zero:
            write_outputs(self.report, self.out_dir or trainer.default_root_dir)
