"""Entry `idf`: inference-free models' query IDF table, computed under the tokenizer the model trains with."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytorch_lightning as pl

from vtlab.core.atomic import write_json
from vtlab.core.errors import VtlabError

log = logging.getLogger("vtlab")


class IdfCallback(pl.Callback):
    """Compute the encoder's IDF table when fitting starts, from the training documents, under the tokenizer the model
    trains with — so list it after the vocabulary-transfer callback. A no-op for encoders without a query IDF.

    texts: a function returning the corpus; default: the distinct positives and negatives of the training examples.
    Writes `idf.json` and `idf_report.json` to out_dir (default: the trainer's root dir).
    """

    def __init__(self, out_dir: str | None = None, texts: Callable[[], list[str]] | None = None) -> None:
        self.out_dir, self.texts = out_dir, texts
        self.report: dict[str, Any] | None = None

    def _train_texts(self, trainer: pl.Trainer) -> list[str]:
        datamodule = getattr(trainer, "datamodule", None)
        if datamodule is None or not hasattr(datamodule, "train_documents"):
            raise VtlabError("idf: no corpus: pass texts= to IdfCallback or fit with a TripletDataModule")
        return datamodule.train_documents()

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        encoder = getattr(pl_module, "encoder", None)
        if stage != "fit" or not getattr(encoder, "needs_idf", False):
            return
        texts = self.texts() if self.texts is not None else self._train_texts(trainer)
        table = encoder.fit_idf(texts)
        self.report = table.report()
        log.info(
            "idf: %d training documents, %d of %d vocabulary entries never occur (df = 0)",
            self.report["n_docs"],
            self.report["zero_df"],
            self.report["vocab_size"],
        )
        if trainer.is_global_zero:
            out = Path(self.out_dir or trainer.default_root_dir)
            table.to_json(out / "idf.json")
            write_json(out / "idf_report.json", self.report)
