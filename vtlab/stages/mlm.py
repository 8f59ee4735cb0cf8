"""Stage `mlm`: masked-LM adaptation of the (vocabulary-transferred) backbone, before APC and sparse fine-tuning.

The adapted model is cached under $VTLAB_CACHE/mlm per (starting backbone, resolved `mlm` config, preprocessing,
seed), linked as <run_dir>/mlm/model, and handed on as `state["backbone"]`. `mlm.steps=0` is the paper's no-MLM
variant: the stage does nothing."""
from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import logging
import os
import time
from pathlib import Path
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytorch_lightning as pl
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.loggers import CSVLogger, Logger
from transformers import get_scheduler

from vtlab import integrity
from vtlab.assets import cache_dir
from vtlab.backbones import Backbone
from vtlab.errors import VtlabError
from vtlab.models.mlm import MLMModule, TextDataModule
from vtlab.stages.transfer import transfer_parts
from vtlab.tracking import instantiate_logger
from vtlab.vocab.transfer import transferred_backbone

log = logging.getLogger("vtlab")

_RECIPE = "mlm-v1"  # bump when training changes in a way the config does not show, so old caches are not reused
_DONE = "vtlab_mlm.json"
_NOT_IN_KEY = ("log_every_n_steps", "num_workers")  # do not change the trained weights


def _cache_key(start: Backbone, mlm: dict[str, Any], preprocess: Any, seed: int, precision: str) -> str:
    mlm = {k: v for k, v in mlm.items() if k not in _NOT_IN_KEY}
    blob = json.dumps({"recipe": _RECIPE, "backbone": start.cache_key(), "mlm": mlm, "preprocess": repr(preprocess),
                       "seed": seed, "precision": precision}, sort_keys=True, default=str)
    return hashlib.sha1(blob.encode()).hexdigest()[:16]


def _starting_point(cfg: DictConfig, state: dict[str, Any]) -> tuple[Backbone, Any]:
    """(backbone to adapt, input preprocess): the state's backbone if an earlier stage set one, else the
    configured backbone moved to the run's vocabulary (MLM runs after vocabulary transfer)."""
    backbone, vocab, init, options = transfer_parts(cfg)
    start = state.get("backbone") or transferred_backbone(backbone, vocab, init, options)
    return start, vocab.preprocess


def _loggers(cfg: DictConfig, out: Path) -> list[Logger]:
    loggers: list[Logger] = [CSVLogger(save_dir=str(out), name="csv", version="")]
    wandb_cfg = (cfg.get("logger") or {}).get("wandb")
    if wandb_cfg is not None:
        # its own wandb run (job_type=mlm), finished after training so the fine-tune stage starts a fresh one
        loggers.append(instantiate_logger(cfg, wandb_cfg, name=f"{cfg.name}-mlm", job_type="mlm"))
    return loggers


def _train(m: Any, start: Backbone, preprocess: Any, out: Path, log_dir: Path, seed: int,
           trainer_cfg: Mapping[str, Any], loggers: list[Logger]) -> pl.Trainer:
    steps = int(m.steps)
    model = start.load_model()
    tokenizer = start.load_tokenizer()
    data = TextDataModule(instantiate(m.corpus), tokenizer, max_length=int(m.max_length),
                          batch_size=int(m.batch_size), mlm_probability=float(m.mlm_probability), seed=seed,
                          num_workers=int(m.get("num_workers", 0)), preprocess=preprocess)
    optimizer = functools.partial(torch.optim.AdamW, lr=float(m.lr), betas=tuple(m.get("betas", (0.9, 0.999))),
                                  eps=float(m.get("eps", 1e-8)))
    scheduler = None
    if m.scheduler is not None:
        try:
            get_scheduler(str(m.scheduler), torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0),
                          num_warmup_steps=1, num_training_steps=2)  # fail on a bad name before loading data
        except (ValueError, KeyError) as e:
            raise VtlabError(f"mlm.scheduler={m.scheduler!r}: {e}") from None
        scheduler = functools.partial(get_scheduler, str(m.scheduler), num_warmup_steps=int(m.warmup_steps))
    module = MLMModule(model, optimizer, scheduler, weight_decay=float(m.weight_decay))
    t = trainer_cfg
    trainer = pl.Trainer(
        accelerator=t.get("accelerator", "auto"), devices=t.get("devices", "auto"), strategy=t.get("strategy", "auto"),
        precision=t.get("precision", "32-true"), max_steps=steps, max_epochs=-1,
        accumulate_grad_batches=int(m.get("accumulate_grad_batches", 1)),
        gradient_clip_val=m.get("gradient_clip_val"), limit_val_batches=0, num_sanity_val_steps=0,
        enable_checkpointing=False, logger=loggers, log_every_n_steps=int(m.get("log_every_n_steps", 50)),
        default_root_dir=str(log_dir), enable_model_summary=False,
    )
    began = time.perf_counter()
    trainer.fit(module, datamodule=data)
    seconds = time.perf_counter() - began
    if trainer.is_global_zero:
        _save(module.model, tokenizer, out, {
            "recipe": _RECIPE, "start": start.cache_key(), "steps": trainer.global_step, "seconds": round(seconds, 1),
            "docs": data.num_docs, "tokens": data.num_tokens, "spans": len(data.dataset),
            "mlm": OmegaConf.to_container(m, resolve=True) if OmegaConf.is_config(m) else dict(m), "seed": seed,
        })
    trainer.strategy.barrier()  # other ranks wait for rank 0's directory
    for lg in loggers:
        if type(lg).__name__ == "WandbLogger" and getattr(lg, "_experiment", None) is not None:
            lg.experiment.finish()
    return trainer


def check_recipe(m: Any) -> None:
    steps = int(m.steps)
    if steps < 0:
        raise VtlabError(f"mlm.steps={steps} must be >= 0")
    if not 0.0 < float(m.mlm_probability) < 1.0:
        raise VtlabError(f"mlm.mlm_probability={m.mlm_probability!r} must be in (0, 1)")


def train_cached(start: Backbone, m: Any, seed: int, preprocess: Any = None,
                 trainer_cfg: Mapping[str, Any] | None = None, log_dir: Path | None = None,
                 loggers: Callable[[Path], list[Logger]] | None = None) -> tuple[Path, dict[str, Any]]:
    """MLM-train `start` with recipe `m` (a resolved `mlm` config), once per (start, recipe, preprocessing, seed,
    precision): later calls — other jobs of a sweep, other rows of a table — load the cached model. Concurrent callers
    wait on a lock instead of training twice. Returns (model directory, training report)."""
    m = OmegaConf.create(OmegaConf.to_container(m, resolve=True) if OmegaConf.is_config(m) else dict(m))
    check_recipe(m)
    trainer_cfg = dict(trainer_cfg or {})
    precision = str(trainer_cfg.get("precision", "32-true"))
    key = _cache_key(start, OmegaConf.to_container(m, resolve=True), preprocess, seed, precision)
    out = cache_dir("mlm") / f"{start.name}-{int(m.steps)}-{key}"
    with _lock(out.with_name(out.name + ".lock")):
        damage = integrity.problem(out) if out.exists() else "absent"
        if damage is None:
            log.info("mlm: cached %s", out)
        else:
            if damage != "absent":
                log.warning("mlm cache %s is not usable (%s): retraining it", out, damage)
            materialize = getattr(start, "materialize", None)
            if materialize is not None:
                # build a cached start (a pretrained replica) BEFORE seeding: building it consumes the global RNG, so
                # a cold cache would otherwise train with other dropout/masking draws than a warm one
                materialize()
            pl.seed_everything(seed, workers=True)
            log.info("mlm: %d steps on %s -> %s", int(m.steps), start.name_or_path, out)
            log_dir = log_dir or out.with_name(out.name + ".logs")
            default = [CSVLogger(save_dir=str(log_dir), name="csv", version="")]
            _train(m, start, preprocess, out, log_dir, seed, trainer_cfg, loggers(log_dir) if loggers else default)
    return out, json.loads((out / _DONE).read_text())


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # released when the file closes, also if the process dies
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _save(model: Any, tokenizer: Any, out: Path, report: dict[str, Any]) -> None:
    """Write into a temp dir next to `out` and rename: a crash never leaves a half model that looks done."""
    def write(tmp: Path) -> None:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / _DONE).write_text(json.dumps(report, indent=1, default=str))

    integrity.build(out, write)  # replaces an incomplete or damaged earlier attempt


def run(cfg: DictConfig, state: dict[str, Any]) -> dict[str, Any]:
    m = cfg.mlm
    check_recipe(m)
    steps = int(m.steps)
    if steps == 0:
        return state  # the no-MLM variant
    run_dir = Path(cfg.paths.run_dir)
    start, preprocess = _starting_point(cfg, state)
    out, report = train_cached(start, m, int(cfg.seed), preprocess, cfg.trainer, log_dir=run_dir / "mlm",
                               loggers=lambda d: _loggers(cfg, d))
    link = run_dir / "mlm" / "model"
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() and Path(os.readlink(link)) != out:
        link.unlink()  # a rerun into the same run_dir with another config
    if not link.is_symlink() and not link.exists():
        os.symlink(out, link, target_is_directory=True)
    print(f"MLM-adapted model: {link} -> {out} ({report['steps']} steps)")
    return {**state, "backbone": Backbone(str(out), family=start.family, name=f"{start.name}-mlm{steps}"),
            "mlm_dir": out, "mlm_report": report}
