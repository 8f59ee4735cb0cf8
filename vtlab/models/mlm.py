"""Masked-LM training of an HF masked LM (MLM adaptation after vocabulary transfer, and the pretraining replicas):
the LightningModule, and `train_cached`, which trains once per (start, recipe, preprocessing, seed, precision) into
$VTLAB_CACHE/mlm and loads the cached model afterwards."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf
from pytorch_lightning.loggers import CSVLogger, Logger
from torch import Tensor, nn
from transformers import PreTrainedModel, get_scheduler

from vtlab.backbones import Backbone, decoder_bypassed
from vtlab.callbacks.agreed_stop import AgreedStop
from vtlab.core import integrity
from vtlab.core.assets import cache_dir
from vtlab.core.atomic import file_lock
from vtlab.core.cache_keys import settings_key
from vtlab.core.errors import VtlabError
from vtlab.core.json_files import read_json
from vtlab.core.paths import child
from vtlab.core.progress import counted
from vtlab.core.waiting import Waiting
from vtlab.data.text import TextDataModule
from vtlab.models.head_fit import batch_rows, fit_head, head_inputs, span_batches
from vtlab.models.mlm_probe import probe, split_held_out
from vtlab.models.optim import configure_optimizers
from vtlab.runs.world import World
from vtlab.runtime.policy import trainer_precision
from vtlab.tracking.progress import progress_bar

log = logging.getLogger("vtlab")


# ---- model ----------------------------------------------------------------------------------------------------------
class MLMModule(pl.LightningModule):
    """Masked-LM training of an HF `*ForMaskedLM`; the decoder stays tied to the input embeddings.

    `sparse_prediction`: run the vocabulary decoder only on the masked positions (the loss is the model's own
    cross-entropy over them, unchanged). With 30% masking that cuts the B×L×V logits — most of a small model's step
    — by ~3x, for every family: the decoder is bypassed (`decoder_bypassed`) and applied to the selected rows here."""

    def __init__(
        self,
        model: PreTrainedModel,
        optimizer: Callable[..., torch.optim.Optimizer],
        scheduler: Callable[..., Any] | None = None,
        weight_decay: float = 0.01,
        sparse_prediction: bool = True,
    ) -> None:
        super().__init__()
        self.model = model
        self.optimizer_factory = optimizer
        self.scheduler_factory = scheduler
        self.weight_decay = weight_decay
        self.sparse_prediction = sparse_prediction

    def on_fit_start(self) -> None:
        # from_pretrained leaves the network in eval mode and Lightning preserves module modes: turn dropout on
        self.train()

    def mlm_logits(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """(logits, labels) over the positions the loss uses: all of them, or the masked ones (sparse)."""
        labels = batch["labels"]
        if not self.sparse_prediction:
            out = self.model(input_ids=batch["input_ids"], attention_mask=batch.get("attention_mask"))
            return out.logits.flatten(0, -2), labels.flatten()
        with decoder_bypassed(self.model) as decoder:
            hidden = self.model(input_ids=batch["input_ids"], attention_mask=batch.get("attention_mask")).logits
        masked = labels != -100
        return nn.functional.linear(hidden[masked], decoder.weight, decoder.bias), labels[masked]

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        logits, target = self.mlm_logits(batch)
        loss = nn.functional.cross_entropy(logits.float(), target, ignore_index=-100)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"non-finite MLM loss at step {self.global_step}")
        with torch.no_grad():
            real = target != -100
            acc = (
                (logits[real].argmax(-1) == target[real]).float().mean()
                if bool(real.any())
                else torch.zeros((), device=loss.device)
            )
        lr = self.optimizers().param_groups[0]["lr"] if self._trainer is not None else 0.0
        n = batch["labels"].shape[0]
        self.log_dict(
            {"mlm/loss": loss.detach(), "mlm/accuracy": acc, "mlm/lr": float(lr)},
            on_step=True,
            on_epoch=False,
            batch_size=n,
        )
        self.log("loss", loss.detach(), prog_bar=True, on_step=True, on_epoch=False, batch_size=n, logger=False)
        return loss

    def configure_optimizers(self) -> Any:
        return configure_optimizers(self, self.optimizer_factory, self.scheduler_factory, self.weight_decay)


# ---- cached training ----------------------------------------------------------------------------------------------
_RECIPE = "mlm-v1"  # bump when training changes in a way the config does not show, so old caches are not reused
_DONE = "vtlab_mlm.json"
KEY_NEUTRAL = ("log_every_n_steps", "num_workers")  # settings of the `mlm` recipe that do not change the weights


def global_batch(mlm: Mapping[str, Any], processes: int) -> int:
    """Sequences per optimizer step over all processes: the per-process batch × accumulation × processes."""
    return int(mlm.get("batch_size") or 0) * int(mlm.get("accumulate_grad_batches") or 1) * int(processes)


def cache_key(
    start: Backbone, mlm: Mapping[str, Any], preprocess: Any, seed: int, precision: str, processes: int = 1
) -> str:
    """The adapted model's key: the start, the resolved recipe `mlm` (less KEY_NEUTRAL and the accumulation, which the
    global batch holds), the global batch over `processes`, the input preprocessing, the seed and the trainer's
    precision (vtlab.core.cache_keys). One recipe on 1 or 8 GPUs at the same global batch is one entry."""
    recipe = {k: v for k, v in mlm.items() if k not in (*KEY_NEUTRAL, "accumulate_grad_batches")}
    return settings_key(
        "mlm",
        _RECIPE,
        start=start,
        mlm=recipe,
        global_batch=global_batch(mlm, processes),
        preprocess=preprocess,
        seed=seed,
        precision=precision,
    )


def _train(
    m: Any,
    start: Backbone,
    preprocess: Any,
    out: Path,
    log_dir: Path,
    seed: int,
    trainer_cfg: Mapping[str, Any],
    loggers: list[Logger],
    leader: bool = True,
) -> pl.Trainer:
    steps = int(m.steps)
    model = start.load_model()
    tokenizer = start.load_tokenizer()
    texts, held = _corpus(m)
    data = TextDataModule(
        texts,
        tokenizer,
        max_length=int(m.max_length),
        batch_size=int(m.batch_size),
        mlm_probability=float(m.mlm_probability),
        seed=seed,
        num_workers=int(m.get("num_workers", 0)),
        preprocess=preprocess,
    )
    optimizer = functools.partial(
        torch.optim.AdamW, lr=float(m.lr), betas=tuple(m.get("betas", (0.9, 0.999))), eps=float(m.get("eps", 1e-8))
    )
    scheduler = None
    if m.scheduler is not None:
        try:
            get_scheduler(
                str(m.scheduler),
                torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0),
                num_warmup_steps=1,
                num_training_steps=2,
            )  # fail on a bad name before loading data
        except (ValueError, KeyError) as e:
            raise VtlabError(f"mlm.scheduler={m.scheduler!r}: {e}") from None
        scheduler = functools.partial(get_scheduler, str(m.scheduler), num_warmup_steps=warmup_steps(m))
    head_fit = _fit_head(model, tokenizer, data, m.get("head_fit"))
    # rank 0 records the adaptation, so it alone probes it (the probe draws its masks from its own generator)
    held_probe = _HeldOut(held, tokenizer, m, seed, preprocess) if held and leader else None
    before = held_probe(model) if held_probe is not None else None
    freeze_all_but(model, m.get("trainable"))
    module = MLMModule(model, optimizer, scheduler, weight_decay=float(m.weight_decay))
    t = trainer_cfg
    trainer = pl.Trainer(
        accelerator=t.get("accelerator", "auto"),
        devices=t.get("devices", "auto"),
        strategy=t.get("strategy", "auto"),
        num_nodes=int(t.get("num_nodes") or 1),
        precision=t.get("precision", "32-true"),
        max_steps=steps,
        max_epochs=-1,
        accumulate_grad_batches=int(m.get("accumulate_grad_batches", 1)),
        gradient_clip_val=m.get("gradient_clip_val"),
        limit_val_batches=0,
        num_sanity_val_steps=0,
        enable_checkpointing=False,
        logger=loggers,
        log_every_n_steps=int(m.get("log_every_n_steps", 50)),
        default_root_dir=str(log_dir),
        enable_model_summary=False,
        callbacks=[progress_bar(), AgreedStop()],
    )
    began = time.perf_counter()
    if steps > 0:
        trainer.fit(module, datamodule=data)
    seconds = time.perf_counter() - began
    if trainer.is_global_zero:
        _save(
            module.model,
            tokenizer,
            out,
            {
                "recipe": _RECIPE,
                "start": start.cache_key(),
                "steps": trainer.global_step,
                "seconds": round(seconds, 1),
                "docs": data.num_docs,
                "tokens": data.num_tokens,
                "spans": len(data.dataset),
                "mlm": OmegaConf.to_container(m, resolve=True) if OmegaConf.is_config(m) else dict(m),
                "seed": seed,
                "head_fit": head_fit,
                "warmup_steps": warmup_steps(m),
                "held_out": None if held_probe is None else {"before": before, "after": held_probe(module.model)},
            },
        )
    trainer.strategy.barrier()  # other ranks wait for rank 0's directory
    for lg in loggers:
        if type(lg).__name__ == "WandbLogger" and getattr(lg, "_experiment", None) is not None:
            lg.experiment.finish()
    return trainer


def warmup_steps(m: Any) -> int:
    """The scheduler's warm-up: `mlm.warmup_ratio` × steps where set (a warm-up proportional to the run), else
    `mlm.warmup_steps`."""
    ratio = m.get("warmup_ratio")
    return int(round(float(ratio) * int(m["steps"]))) if ratio is not None else int(m["warmup_steps"])


def _corpus(m: Any) -> tuple[Any, list[str]]:
    """(the texts MLM trains on, the held-out documents): `mlm.held_out` ({share, seed} or null) keeps a share of the
    corpus's documents out of training for the probe (vtlab/models/mlm_probe.py)."""
    corpus = instantiate(m.corpus)
    spec = m.get("held_out")
    if not spec or not float(spec.get("share", 0.0)):
        return corpus, []
    texts = corpus() if callable(corpus) else corpus
    return split_held_out(texts, float(spec["share"]), int(spec.get("seed", 0)))


class _HeldOut:
    """The held-out documents tokenized and packed like the training corpus (at most `mlm.held_out.max_spans`
    spans); calling it probes a model on them (loss, own-token top-1)."""

    def __init__(self, texts: list[str], tokenizer: Any, m: Any, seed: int, preprocess: Any) -> None:
        data = TextDataModule(texts, tokenizer, max_length=int(m.max_length), preprocess=preprocess)
        data.setup("fit")
        n = int(m.held_out.get("max_spans") or len(data.dataset))
        self.spans, self.lengths = data.dataset.spans[:n], data.dataset.lengths[:n]
        self.special, self.mask_id = tokenizer.all_special_ids, int(tokenizer.mask_token_id)
        self.probability, self.seed = float(m.mlm_probability), int(seed)

    def __call__(self, model: Any) -> dict[str, Any]:
        report = probe(model, self.spans, self.lengths, self.special, self.mask_id, self.probability, self.seed)
        log.info("mlm.held_out: loss %.4f, own-token top-1 %.4f", report["loss"], report["own_top1"])
        return report


def _fit_head(model: PreTrainedModel, tokenizer: Any, data: TextDataModule, spec: Any) -> dict[str, Any] | None:
    """`mlm.head_fit` ({spans, ridge, scale} or null): the least-squares start of the head's transform on the first
    `spans` packed spans of the MLM corpus (vtlab/models/head_fit.py), before any MLM step."""
    if not spec:
        return None
    data.setup("fit")
    n = min(int(spec.get("spans", 256)), len(data.dataset))
    ids = torch.from_numpy(data.dataset.spans[:n].astype("int64"))
    lengths = torch.from_numpy(data.dataset.lengths[:n])
    batches = counted(span_batches(ids, lengths), n, "spans", "mlm.head_fit: reading", size=batch_rows)
    hidden, tokens = head_inputs(model, batches, torch.tensor(tokenizer.all_special_ids))
    with Waiting(f"mlm.head_fit: solving for {len(tokens):,} positions"):
        report = fit_head(
            model, hidden, tokens, ridge=float(spec.get("ridge", 1e-2)), scale=float(spec.get("scale", 5.0))
        )
    log.info("mlm.head_fit: the head's transform fitted on %d positions of %d spans", report["positions"], n)
    return report


def freeze_all_but(model: nn.Module, trainable: Sequence[str] | None) -> list[str]:
    """`mlm.trainable`: None trains every parameter; a list of regular expressions trains only the parameters whose
    name one of them matches (e.g. [embeddings, decoder.bias, \\.bias$]). Returns the names left trainable; an empty
    match is an error naming the key, not a silent no-op training."""
    patterns = None if trainable is None else [re.compile(str(t)) for t in trainable]
    kept = []
    for name, param in model.named_parameters():
        param.requires_grad_(patterns is None or any(p.search(name) for p in patterns))
        if param.requires_grad:
            kept.append(name)
    if not kept and trainable is not None:
        raise VtlabError(f"mlm.trainable={list(trainable)!r} matches no parameter of {type(model).__name__}")
    return kept


def check_recipe(m: Any) -> None:
    steps = int(m.steps)
    fit = m.get("head_fit")
    if fit and (
        int(fit.get("spans", 256)) < 1 or float(fit.get("ridge", 1e-2)) < 0 or float(fit.get("scale", 5.0)) <= 0
    ):
        raise VtlabError(f"mlm.head_fit={dict(fit)!r}: expected spans >= 1, ridge >= 0, scale > 0")
    if steps < 0:
        raise VtlabError(f"mlm.steps={steps} must be >= 0")
    if not 0.0 < float(m.mlm_probability) < 1.0:
        raise VtlabError(f"mlm.mlm_probability={m.mlm_probability!r} must be in (0, 1)")
    ratio = m.get("warmup_ratio")
    if ratio is not None and not 0.0 <= float(ratio) <= 1.0:
        raise VtlabError(f"mlm.warmup_ratio={ratio!r}: expected a share of the steps in [0, 1] (or null)")
    held = m.get("held_out")
    if held and not 0.0 <= float(held.get("share", 0.0)) < 1.0:
        raise VtlabError(f"mlm.held_out.share={held.get('share')!r}: expected a share in [0, 1)")


def train_cached(
    start: Backbone,
    m: Any,
    seed: int,
    preprocess: Any = None,
    trainer_cfg: Mapping[str, Any] | None = None,
    log_dir: Path | None = None,
    loggers: Callable[[Path], list[Logger]] | None = None,
    world: World | None = None,
) -> tuple[Path, dict[str, Any]]:
    """MLM-train `start` with recipe `m` (a resolved `mlm` config), once per (start, recipe, global batch,
    preprocessing, seed, precision): later calls — other jobs of a sweep, other rows of a table — load the cached
    model. Returns (model directory, training report).

    Built once for all the run's processes (`world`, vtlab.runs.world): rank 0 holds the entry's lock (so another job
    waits instead of training it twice) and looks; its answer is every rank's. A missing entry is trained by all ranks
    together, rank 0 writes it, and after a barrier every rank reads it. Only rank 0 takes the lock: a rank waiting
    on it while rank 0 waits for that rank in the trainer's collectives would never return."""
    world = world or World()
    m = OmegaConf.create(OmegaConf.to_container(m, resolve=True) if OmegaConf.is_config(m) else dict(m))
    check_recipe(m)
    trainer_cfg = dict(trainer_cfg or {})
    trainer_cfg["precision"] = trainer_precision(
        trainer_cfg.get("precision", "32-true"), trainer_cfg.get("accelerator", "auto")
    )
    out = entry_dir(start, m, seed, preprocess, str(trainer_cfg["precision"]), world.size)
    lock = file_lock(out.with_name(out.name + ".lock")) if world.leader else contextlib.nullcontext()
    with lock:
        damage = world.broadcast((integrity.problem(out) if out.exists() else "absent") if world.leader else None)
        if damage is None:
            log.info("mlm: cached %s", out)
        else:
            if damage != "absent" and world.leader:
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
            chosen = loggers(log_dir) if loggers else default
            _train(m, start, preprocess, out, log_dir, seed, trainer_cfg, chosen, leader=world.leader)
        world.barrier()  # rank 0 wrote the entry (or found it) before any rank reads it
    return out, read_json(out / _DONE, dict, "an MLM adaptation's record: delete its directory to rebuild")


def entry_dir(start: Backbone, m: Any, seed: int, preprocess: Any, precision: str, processes: int = 1) -> Path:
    """Where the adaptation of `start` by recipe `m` lives in the cache (cache_key), built or not."""
    recipe = OmegaConf.to_container(m, resolve=True) if OmegaConf.is_config(m) else dict(m)
    key = cache_key(start, recipe, preprocess, seed, precision, processes)
    return child(cache_dir("mlm"), f"{start.name}-{int(m['steps'])}-{key}", "start.name")


def _save(model: Any, tokenizer: Any, out: Path, report: dict[str, Any]) -> None:
    """Write into a temp dir next to `out` and rename: a crash never leaves a half model that looks done."""

    def write(tmp: Path) -> None:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / _DONE).write_text(json.dumps(report, indent=1, default=str))

    integrity.build(out, write)  # replaces an incomplete or damaged earlier attempt
