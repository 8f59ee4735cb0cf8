"""What several stages build from a run's config, in one place: the transfer's parts, the run's backbone (moved to the
run's vocabulary when `vocab` changes it, unless an earlier stage already handed one on) and the encoder to evaluate,
calibrate, diagnose, encode or export without training."""

from __future__ import annotations

from typing import Any

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from vtlab.backbones import Backbone
from vtlab.core.instantiate import instantiate_with
from vtlab.vocab.init import Initializer
from vtlab.vocab.targets import TargetVocab
from vtlab.vocab.transfer import TransferOptions, transferred_backbone

# the config keys each builder reads, for the stages' declarations (vtlab.runs.reads)
TRANSFER_READS = ("backbone", "vocab", "init", "transfer")  # transfer_parts, run_backbone
ENCODER_READS = ("model.encoder", *TRANSFER_READS)  # build_encoder
# where a trainer computes and on how many processes: join_trainer, predict_trainer_kwargs
PROCESS_KEYS = ("accelerator", "devices", "strategy", "num_nodes")
PROCESS_READS = tuple(f"trainer.{k}" for k in PROCESS_KEYS)


def transfer_parts(cfg: DictConfig) -> tuple[Backbone, TargetVocab, Initializer, TransferOptions]:
    """(backbone, vocab, init, options) built from the run's config."""
    options = TransferOptions(**OmegaConf.to_container(cfg.transfer, resolve=True))
    return instantiate(cfg.backbone), instantiate(cfg.vocab), instantiate(cfg.init), options


def run_backbone(cfg: DictConfig, state: dict[str, Any]) -> Backbone:
    """The backbone this run works on: the one an earlier stage handed on (`state["backbone"]`, e.g. the MLM-adapted
    model, already on the run's vocabulary), else the configured one moved to the run's vocabulary (the transfer
    is built once per configuration and cached: vtlab.vocab.transfer.transferred_backbone)."""
    if "backbone" in state:
        return state["backbone"]
    backbone, vocab, init, options = transfer_parts(cfg)
    return transferred_backbone(backbone, vocab, init, options)


def build_encoder(cfg: DictConfig, state: dict[str, Any] | None = None) -> Any:
    """The model to use without training: `model.encoder` on the run's backbone. An encoder config without a
    `backbone` key has no network (model=bm25) and is built as it is."""
    if "backbone" not in cfg.model.encoder:
        return instantiate(cfg.model.encoder)
    return instantiate_with(cfg.model.encoder, backbone=run_backbone(cfg, state or {}))


def predict_trainer_kwargs(trainer: Any) -> dict[str, Any]:
    """The `trainer` config's keys that say where and on how many processes a `predict` runs, as set."""
    return {k: trainer[k] for k in PROCESS_KEYS if trainer.get(k) is not None}
