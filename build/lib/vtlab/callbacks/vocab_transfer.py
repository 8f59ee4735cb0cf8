"""Entry `vocab_transfer`: the run's model moved onto `vocab` before training (vtlab.vocab.transfer applies it)."""

from __future__ import annotations

import logging

import pytorch_lightning as pl

from vtlab.backbones import Backbone
from vtlab.vocab.init import Initializer
from vtlab.vocab.targets import TargetVocab
from vtlab.vocab.transfer import TransferOptions, check_compatible, transferred_backbone

log = logging.getLogger("vtlab")


class VocabTransferCallback(pl.Callback):
    """When the run's `vocab` differs from the backbone's, swap the module's network and tokenizer for the transferred
    ones (cached per backbone × vocab × init) before the optimizer and the dataloaders are built, so
    `python -m vtlab backbone=modernbert vocab=bert-uncased` trains the transferred model."""

    def __init__(
        self,
        backbone: Backbone,
        vocab: TargetVocab,
        init: Initializer,
        options: dict | None = None,
        transferred: bool = False,
    ) -> None:
        check_compatible(vocab, init)  # at config time, not after the data is loaded
        self.backbone, self.vocab, self.init = backbone, vocab, init
        # set by the fine-tune stage when an earlier stage (MLM adaptation) handed on a model already on `vocab`
        self.transferred = transferred
        self.options = TransferOptions(**(options or {}))
        self.applied_from: str | None = None

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit" or not self.vocab.transfers or self.transferred or self.applied_from is not None:
            return
        target = transferred_backbone(self.backbone, self.vocab, self.init, self.options)
        pl_module.encoder.replace_networks(target.load_model(), target.load_tokenizer())
        datamodule = getattr(trainer, "datamodule", None)
        if datamodule is not None:
            datamodule.set_tokenizer(pl_module.encoder.tokenizer)
        self.applied_from = target.name_or_path
        log.info(
            "vocabulary transfer applied: %s → %s (%s)", self.backbone.name_or_path, self.vocab.name, self.init.name
        )
