"""Stage `finetune`: SPLADE training with Lightning; keeps the best checkpoint by dev retrieval and exports it.

Resuming (`state["resume_from"]`, set by vtlab.pipeline for an interrupted run dir) continues exactly: Lightning
restores weights, optimizer, scheduler and loop counters; the training DataLoader restores its place in the epoch
(vtlab.data.datamodule.ResumableDataLoader); ResumeState restores the global RNG streams (dropout).
"""
from __future__ import annotations

import logging
import os
import pickle
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from hydra.utils import instantiate
from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO
from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.callbacks import ModelCheckpoint

from vtlab.atomic import atomic_dir, atomic_write_bytes
from vtlab.errors import ConfigError, DiskError, RunDirError, gib
from vtlab.runs.reuse import comparable
from vtlab.tracking import configured_loggers
from vtlab.vocab.transfer import TransferOptions, transferred_backbone

log = logging.getLogger("vtlab")


def build_module(cfg: DictConfig, state: dict[str, Any] | None = None) -> pl.LightningModule:
    """The SPLADE module; on the backbone an earlier stage produced (e.g. the MLM-adapted one) when there is one."""
    if state and "backbone" in state:
        return instantiate(cfg.model, encoder=instantiate(cfg.model.encoder, backbone=state["backbone"]))
    return instantiate(cfg.model)


def materialize_inputs(cfg: DictConfig, state: dict[str, Any]) -> None:
    """Build the cached backbone and vocabulary transfer this run loads, if an earlier stage has not: building them
    consumes the global RNG, so on a cold cache training would otherwise draw other dropout than on a warm one."""
    if "backbone" in state:
        return  # an earlier stage (MLM) produced the model: everything it stands on is built
    backbone = instantiate(cfg.backbone)
    materialize = getattr(backbone, "materialize", None)
    if materialize is not None:
        materialize()
    options = TransferOptions(**OmegaConf.to_container(cfg.transfer, resolve=True))
    transferred_backbone(backbone, instantiate(cfg.vocab), instantiate(cfg.init), options)


def run(cfg: DictConfig, state: dict[str, Any]) -> dict[str, Any]:
    materialize_inputs(cfg, state)
    pl.seed_everything(cfg.seed, workers=True)
    run_dir = Path(cfg.paths.run_dir)
    module = state.get("module") or build_module(cfg, state)
    check_free_space(run_dir, module)  # a full disk is found now, not at the first checkpoint or after training
    encoder = module.encoder
    datamodule = instantiate(cfg.data, tokenizer=encoder.tokenizer, preprocess=encoder.preprocess)
    datamodule.setup("fit")  # read and check the data before any model work (Lightning's own setup is then a no-op)
    _check_teacher_scores(module, datamodule, cfg)
    resume_from = state.get("resume_from")
    configs = resume_configs(cfg, resume_from)  # a changed config is refused before any training
    # ResumeState last: its setup check runs after the callbacks that reshape the model (vocabulary transfer)
    callbacks = [instantiate(c) for c in cfg.callbacks.values() if c is not None] + [ResumeState(resume_from, configs)]
    loggers = configured_loggers(cfg)
    extra = {} if cfg.trainer.get("plugins") else {"plugins": [SameDirCheckpointIO()]}
    trainer: pl.Trainer = instantiate(cfg.trainer, callbacks=callbacks, logger=loggers or False, **extra)
    if resume_from:
        log.info("resuming training from %s", resume_from)
    trainer.fit(module, datamodule=datamodule, ckpt_path=resume_from, weights_only=True)

    ckpt = _chosen_checkpoint(trainer)
    if ckpt is not None:
        # the final evaluation uses the checkpoint chosen by the dev metric, not the last weights
        module.load_state_dict(load_checkpoint(ckpt)["state_dict"])
        log.info("loaded checkpoint %s", ckpt)
    model_dir = run_dir / "model"
    if trainer.is_global_zero:
        with atomic_dir(model_dir) as tmp:  # a kill mid-save leaves no half-written model/
            encoder.save_pretrained(tmp)
    return {**state, "module": module, "encoder": encoder, "model_dir": model_dir, "checkpoint": ckpt,
            "trainer": trainer}


# AdamW (conf/model, vtlab's one optimizer) keeps two states per parameter: exp_avg and exp_avg_sq.
OPTIMIZER_STATES = 2
# Checkpoint files on disk at once: last.ckpt, the best-by-dev one, and the replacement of either written beside it.
CHECKPOINT_COPIES = 3
MARGIN_BYTES = 100 * 2**20  # logs, configs, tokenizer, evaluation outputs


def required_space(run_dir: Path, module: torch.nn.Module) -> tuple[int, str]:
    """(bytes a training run still needs under `run_dir`, how that was counted). A checkpoint holds every parameter
    with its optimizer states; model/ the weights once more. Checkpoints already there (a resume) are replaced, so
    their space counts as available. The model as built: a vocabulary transfer (at setup) changes the embedding rows,
    which the 10% margin covers for the usual vocabulary sizes."""
    n_params = sum(p.numel() for p in module.parameters())
    weights = sum(p.numel() * p.element_size() for p in module.parameters())
    ckpt = weights * (1 + OPTIMIZER_STATES)
    existing = sum(f.stat().st_size for f in (run_dir / "checkpoints").glob("*.ckpt") if f.is_file())
    need = max(0, CHECKPOINT_COPIES * ckpt - existing) + weights + ckpt // 10 + MARGIN_BYTES
    how = (f"{CHECKPOINT_COPIES} checkpoints of {gib(ckpt)} = {n_params:,} parameters x "
           f"{weights // max(n_params, 1)} bytes x (1 + {OPTIMIZER_STATES} optimizer states)"
           + (f", less {gib(existing)} of checkpoints already there" if existing else "")
           + f", model/ {gib(weights)}, margin {gib(ckpt // 10 + MARGIN_BYTES)}")
    return need, how


def check_free_space(run_dir: Path, module: torch.nn.Module) -> None:
    """DiskError (one line: the path, the free and the needed sizes) when the disk of `run_dir` cannot hold the run's
    checkpoints and model, before any training step."""
    need, how = required_space(run_dir, module)
    where = next(p for p in (run_dir, *run_dir.absolute().parents) if p.exists())  # run_dir may not exist yet
    free = shutil.disk_usage(where).free
    if free < need:
        raise DiskError(f"{run_dir}: not enough free disk space to train: {gib(free)} free, {gib(need)} needed "
                        f"({how}); free some space there or choose another hydra.run.dir")


def _check_teacher_scores(module: pl.LightningModule, datamodule: Any, cfg: DictConfig) -> None:
    """A distillation loss on triplets without teacher scores fails at the first step otherwise, after model loading,
    transfer and calibration."""
    loss = getattr(module, "loss", None)
    if getattr(loss, "requires_teacher", False) and not getattr(datamodule, "has_teacher_scores", True):
        raise ConfigError(
            f"loss={type(loss).__name__} needs teacher scores, and the training data "
            f"({OmegaConf.select(cfg, 'data.train._target_', default='data.train')}) has none: add 'scores' to the "
            "triplets (or data.train.scores_path=FILE), or use loss=infonce")


def _chosen_checkpoint(trainer: pl.Trainer) -> str | None:
    cb = trainer.checkpoint_callback
    if cb is None:
        return None
    return cb.best_model_path or cb.last_model_path or None


# ---- exact resume ------------------------------------------------------------------------------------------------

# Keys a resumed run may change: how it runs and reports, not what it computes (besides vtlab.runs.reuse.IGNORED: labels
# and paths).
RUN_LOCAL = ("resume", "overwrite", "resume_with_changes", "logger", "baseline")


def run_config(cfg: DictConfig) -> dict[str, Any]:
    """What a checkpoint records of its run's config: plain values, unresolved, without the run-local keys."""
    return {k: v for k, v in comparable(cfg).items() if k not in RUN_LOCAL}


def config_changes(old: Any, new: Any, key: str = "") -> list[str]:
    """`key: old -> new` for each leaf that differs (dicts compared key by key, anything else as a whole)."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [c for k in sorted(set(old) | set(new), key=str)
                for c in config_changes(old.get(k, "<absent>"), new.get(k, "<absent>"), f"{key}.{k}" if key else str(k))]
    return [] if old == new else [f"{key}: {old!r} -> {new!r}"]


def resume_configs(cfg: DictConfig, resume_from: str | None) -> list[dict[str, Any]]:
    """The configs a run's checkpoints record: this run's, or on a resume the interrupted run's ones. A resume whose
    config differs from the interrupted run's (lr, batch size, ...: the restored optimizer, schedule and data order
    would silently mix both) is refused unless resume_with_changes=true, which then appends this config to the record
    (the checkpoint then holds both) and warns with the differences."""
    current = run_config(cfg)
    if not resume_from:
        return [current]
    saved = load_checkpoint(resume_from, mmap=True).get("callbacks", {}).get(ResumeState.__qualname__, {})
    recorded = saved.get("configs") if isinstance(saved, dict) else None
    if not recorded:
        log.warning("%s records no config (written before vtlab recorded one): the resumed config is not checked",
                    resume_from)
        return [current]
    changes = config_changes(recorded[-1], current)
    if not changes:
        return list(recorded)
    shown = "; ".join(changes[:4]) + (f"; and {len(changes) - 4} more" if len(changes) > 4 else "")
    if not cfg.get("resume_with_changes", False):
        raise RunDirError(f"{resume_from}: cannot resume: the config differs from the interrupted run's ({shown}); "
                          "rerun with its settings, pass resume_with_changes=true to continue with these (both are "
                          "recorded in the checkpoint), or overwrite=true to start over")
    log.warning("resume_with_changes=true: continuing %s with a changed config (%s); the restored optimizer, "
                "schedule and data order are the interrupted run's", resume_from, shown)
    return [*recorded, current]



def rng_states() -> dict[str, Any]:
    """The global RNG streams, as tensors and plain values (checkpoints load with torch's weights_only)."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    states: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate(),
                              "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss]}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict[str, Any]) -> None:
    torch.set_rng_state(states["torch"])
    random.setstate(states["python"])
    kind, keys, pos, has_gauss, gauss = states["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


# What vtlab's Lightning checkpoints hold beyond torch's weights-only defaults (tensors, dicts, lists, tuples, str,
# numbers, OrderedDict): nothing: rng_states stores tensors and plain values, Lightning's loops, callbacks, optimizer
# and scheduler states are plain too (tests/test_security.py checks a real checkpoint). A type added to a checkpoint
# goes here, by name; nothing else is ever unpickled, so a crafted checkpoint cannot run code.
CHECKPOINT_GLOBALS: list[Any] = []
_UNSUPPORTED_GLOBAL = re.compile(r"GLOBAL (\S+)|Unsupported global: (\S+)|global (\S+) (?:was|is) not")


def load_checkpoint(path: str | os.PathLike[str], mmap: bool = False) -> dict[str, Any]:
    """A checkpoint, loaded weights-only: unpickling may build only tensors, plain containers and CHECKPOINT_GLOBALS.
    RunDirError (one line) for a file that needs anything else (a crafted checkpoint: nothing of it ran) or that cannot
    be read (truncated, foreign)."""
    try:
        with torch.serialization.safe_globals(CHECKPOINT_GLOBALS):
            ckpt = torch.load(path, map_location="cpu", mmap=mmap, weights_only=True)
    except pickle.UnpicklingError as e:
        m = _UNSUPPORTED_GLOBAL.search(str(e))
        if m is None:
            raise RunDirError(_unreadable(path, e)) from None
        name = next(g for g in m.groups() if g).rstrip(".,")
        raise RunDirError(f"{path}: refused to load the checkpoint: it asks to import {name}, which a vtlab checkpoint "
                          "never holds (a crafted file can run code this way; nothing of it ran); delete it, or pass "
                          "overwrite=true to start over") from None
    except Exception as e:  # noqa: BLE001 - truncated or foreign file: any load error means "cannot resume from it"
        raise RunDirError(_unreadable(path, e)) from None
    if not isinstance(ckpt, dict):
        raise RunDirError(f"{path}: not a Lightning checkpoint (a {type(ckpt).__name__}, expected a dict); delete it, "
                          "or pass overwrite=true to start over")
    return ckpt


def _unreadable(path: str | os.PathLike[str], e: BaseException) -> str:
    first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
    return (f"{path}: cannot read the checkpoint ({type(e).__name__}: {first}); delete it to resume from an earlier "
            "one, or pass overwrite=true to start over")


def check_checkpoint_fits(path: str | os.PathLike[str], module: torch.nn.Module) -> None:
    """RunDirError naming the first tensor whose shape differs between the checkpoint and this run's model (a run
    resumed with another vocabulary or backbone), instead of Lightning's multi-page RuntimeError."""
    ckpt = load_checkpoint(path, mmap=True)
    saved = ckpt.get("state_dict", {})
    current = module.state_dict()
    for key, tensor in current.items():
        if key in saved and saved[key].shape != tensor.shape:
            raise RunDirError(
                f"{path}: cannot resume: {key} has shape {list(saved[key].shape)} in the checkpoint but "
                f"{list(tensor.shape)} in this run's model (a different vocab/backbone?); resume with the "
                "interrupted run's settings, or pass overwrite=true to start over")
    missing, unexpected = sorted(set(current) - set(saved)), sorted(set(saved) - set(current))
    if missing or unexpected:
        what = f"missing {missing[0]}" if missing else f"unexpected {unexpected[0]}"
        raise RunDirError(f"{path}: cannot resume: the checkpoint's weights do not match this run's model ({what}, "
                          f"{len(missing)} missing, {len(unexpected)} unexpected); resume with the interrupted run's "
                          "settings, or pass overwrite=true to start over")


class ResumeState(pl.Callback):
    """What a Lightning checkpoint lacks for an exact restart.

    Saves the global RNG states with every checkpoint and restores them when training starts again (after the
    setup-time callbacks — transfer, IDF, APC — and the pre-flight probe, none of which draw from them on restore),
    so dropout continues the uninterrupted run's stream. Before the restore it checks that the checkpoint fits the
    model as set up (after vocabulary transfer).
    """

    def __init__(self, resume_from: str | None = None, configs: list[dict[str, Any]] | None = None) -> None:
        self.resume_from = resume_from
        self.configs = configs  # recorded in every checkpoint: what a resume is checked against
        self._pending: dict[str, Any] | None = None

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"rng": rng_states()}
        if self.configs is not None:
            state["configs"] = self.configs
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._pending = state_dict.get("rng")

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit" and self.resume_from:
            check_checkpoint_fits(self.resume_from, pl_module)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._pending is not None:
            set_rng_states(self._pending)
            self._pending = None


class LastCheckpoint(ModelCheckpoint):
    """checkpoints/last.ckpt every `every_n_train_steps` steps and when training ends: what a killed run resumes from.

    When a validation runs right after a due step, the save waits for its end: Lightning, restarting from a checkpoint
    written before that validation, counts the validation as done and skips it (the run would then miss a dev score
    and may keep another best checkpoint). The only writer of last.ckpt: the best-by-dev ModelCheckpoint keeps
    save_last off, since two writers make Lightning version each other's file as last-v1.ckpt.
    """

    def __init__(self, dirpath: str, every_n_train_steps: int = 50) -> None:
        if isinstance(every_n_train_steps, bool) or not isinstance(every_n_train_steps, int) or every_n_train_steps < 1:
            raise ConfigError(f"callbacks.last_checkpoint.every_n_train_steps={every_n_train_steps!r} must be an "
                              "integer >= 1")
        super().__init__(dirpath=dirpath, every_n_train_steps=every_n_train_steps, save_top_k=0, save_last=True)
        self._save_after_validation = False

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if _validation_follows(trainer):
            due = trainer.global_step % self._every_n_train_steps == 0
            self._save_after_validation = self._save_after_validation or due
            return
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # after the best-by-dev ModelCheckpoint (listed before): the saved state includes this validation's outcome
        if self._save_after_validation and not trainer.sanity_checking:
            self._save_after_validation = False
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.global_step != self._last_global_step_saved:  # the final steps since the last multiple of N
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))


def _validation_follows(trainer: pl.Trainer) -> bool:
    """Whether the fit loop validates right after the current training batch (Lightning's own test, read early)."""
    loop = trainer.fit_loop
    return bool(trainer.enable_validation) and loop.epoch_loop._should_check_val_fx(loop._data_fetcher)  # noqa: SLF001


class SameDirCheckpointIO(TorchCheckpointIO):
    """Checkpoints written to a temp file next to the target and renamed into place: a kill leaves the previous
    last.ckpt intact. (Lightning's own transaction stages the file in the system temp dir, and moving it onto another
    filesystem is a copy, which a kill can cut short.)"""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        if storage_options is not None or "://" in str(path):
            return super().save_checkpoint(checkpoint, path, storage_options)
        atomic_write_bytes(path, lambda f: torch.save(checkpoint, f))  # full or read-only disk: one line, no temp

    def load_checkpoint(self, path: Any, map_location: Any | None = None, weights_only: bool | None = None) -> Any:
        """Lightning's resume load: always weights-only (whatever `weights_only` the caller passes)."""
        if "://" in str(path):
            return super().load_checkpoint(path, map_location=map_location, weights_only=True)
        return load_checkpoint(path)
