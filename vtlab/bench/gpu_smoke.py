"""GPU smoke run (`make gpu-smoke`): the paper's VT fine-tune step at ModernBERT-base shape on one GPU, measured.

    python -m vtlab.bench.gpu_smoke [--steps 200] [--out outputs/bench/gpu_smoke.json]
    python -m vtlab.bench.gpu_smoke --tiny   # a few seconds on CPU (tests/reproduce/test_paper_recipe.py runs it)

Offline and self-contained: a random-init ModernBERT-base-shaped model (22 layers, hidden 768, 12 heads, MLP 1152)
with the real ModernBERT tokenizer (OLMo BPE asset, vtlab.backbones.TinyModernBert) goes through the VT pipeline —
vocabulary transfer to bert-base-uncased's WordPiece (semantic PMI init, conf/vocab/bert-uncased.yaml's offline
assets), APC p60 (probing 64 documents) — and is fine-tuned as the paper's per-device step: 16 queries × (positive +
negative), max length
256, MarginMSE + FLOPS (per group, l0 mask 150), AdamW, bf16-mixed, through SpladeModule in a Lightning Trainer.
Texts are BoolQ validation questions/passages (an offline asset) with synthetic teacher scores.

Written as JSON (and printed): median step time, tokens/s (real and padded tokens of queries + documents), peak GPU
memory, and the MLM head's share of step time from torch.profiler over a window of steps: the vocabulary projection
(vtlab.runtime.pooling.MaskedMaxLogits forward + backward: tiled GEMM, max-pool, sparse backward) and the GEMM
kernels inside it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from torch.profiler import ProfilerActivity, profile

from vtlab.bench.common import machine, peak_rss_mb, write_result
from vtlab.core.paths import CONF_DIR
from vtlab.data.boolq import validation_pairs
from vtlab.data.datamodule import TripletDataModule
from vtlab.data.examples import TripletExample

HEAD = "MaskedMaxLogits"  # the autograd Function of the vocabulary projection + max-pool (profiler event names)
GEMMS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")

# ModernBERT-base (answerdotai/ModernBERT-base config.json) and a CPU shape that keeps every code path.
SHAPES = {
    "base": dict(hidden_size=768, num_hidden_layers=22, num_attention_heads=12, intermediate_size=1152),
    "tiny": dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64),
}


def config_overrides(
    shape: str, batch_size: int, max_length: int, init: str, apc_docs: int, cached_mini_batch: int | None = None
) -> list[str]:
    """The run as Hydra overrides of conf/config.yaml: the paper's fine-tune on an offline ModernBERT-shaped model
    (with the cached loss at `cached_mini_batch` queries a pass, when given)."""
    dims = [f"backbone.{k}={v}" for k, v in SHAPES[shape].items()]
    cached = [] if cached_mini_batch is None else [f"model.cached_mini_batch={cached_mini_batch}"]
    return [
        *cached,
        "backbone=tiny-modernbert",
        *dims,
        "vocab=bert-uncased",
        f"init={init}",
        "apc=p60",
        f"apc.num_docs={apc_docs}",
        "loss=margin-mse",
        "regularizer=flops-l0",
        "regularizer.doc.normalize=per_group",
        "regularizer.query.weight=8",
        "regularizer.doc.weight=4",
        "regularizer.query.warmup_steps=50000",
        "regularizer.doc.warmup_steps=50000",
        "model.optimizer.lr=2e-5",
        "model.scheduler.num_warmup_steps=6000",
        f"data.batch_size={batch_size}",
        "data.num_negatives=1",
        f"data.query_max_length={max_length}",
        f"data.doc_max_length={max_length}",
        "logger=none",
        "baseline=false",
        "paths.run_dir=/tmp/vtlab-gpu-smoke",
    ]


def triplets(n: int) -> list[TripletExample]:
    """BoolQ validation: each question, its passage and the next question's passage; synthetic teacher scores."""
    pairs = validation_pairs()
    n = min(n, len(pairs))
    return [
        TripletExample(q, p, [pairs[(i + 1) % len(pairs)][1]], [8.0 + (i % 5) * 0.5, float(i % 7) - 3.0])
        for i, (q, p) in enumerate(pairs[:n])
    ]


class StepMeter(pl.Callback):
    """Wall time of every optimizer step (device synchronized) and the tokens it processed; torch.profiler over
    steps [profile_from, profile_from + profile_steps)."""

    def __init__(self, profile_from: int, profile_steps: int) -> None:
        self.profile_from, self.profile_steps = profile_from, profile_steps
        self.times: list[float] = []
        self.tokens: list[tuple[int, int]] = []  # (real, padded) per step
        self.profiled: list[int] = []
        self.prof: profile | None = None
        self._t0 = 0.0

    @staticmethod
    def _sync() -> None:
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        step = len(self.times)
        if step == self.profile_from:
            activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
            self.prof = profile(activities=activities)
            self.prof.__enter__()
        masks = [batch["query"]["attention_mask"], batch["docs"]["attention_mask"]]
        self.tokens.append((int(sum(m.sum() for m in masks)), int(sum(m.numel() for m in masks))))
        self._sync()
        self._t0 = time.perf_counter()

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._sync()
        self.times.append(time.perf_counter() - self._t0)
        step = len(self.times) - 1
        if self.prof is not None and self.profile_from <= step < self.profile_from + self.profile_steps:
            self.profiled.append(step)
            if len(self.profiled) == self.profile_steps:
                self.prof.__exit__(None, None, None)


def head_times(prof: profile, cuda: bool) -> tuple[float, float]:
    """(seconds inside the head's forward + backward, seconds of GEMM kernels inside it), summed over the window."""

    def spent(e: Any) -> float:
        return (e.device_time_total if cuda else e.cpu_time_total) / 1e6

    def in_head(e: Any) -> bool:
        while e is not None:
            if e.name == HEAD or e.name.endswith(HEAD + "Backward"):
                return True
            e = e.cpu_parent
        return False

    events = prof.events()
    head = sum(
        spent(e) for e in events if (e.name == HEAD or e.name.endswith(HEAD + "Backward")) and not in_head(e.cpu_parent)
    )
    gemm = sum(
        (e.self_device_time_total if cuda else e.self_cpu_time_total) / 1e6
        for e in events
        if e.name in GEMMS and in_head(e)
    )
    return head, gemm


def run(args: argparse.Namespace) -> dict[str, Any]:
    cuda = torch.cuda.is_available()
    if not cuda and not args.tiny:
        raise SystemExit("vtlab: error: gpu-smoke needs a CUDA GPU (or --tiny for the CPU shape)")
    pl.seed_everything(0, verbose=False)
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose(
            "config",
            overrides=config_overrides(
                args.shape, args.batch_size, args.max_length, args.init, args.apc_docs, args.cached_mini_batch
            ),
        )
    began = time.perf_counter()
    module = instantiate(cfg.model)
    data = TripletDataModule(
        triplets(args.steps * args.batch_size),
        tokenizer=module.encoder.tokenizer,
        batch_size=args.batch_size,
        num_negatives=1,
        query_max_length=args.max_length,
        doc_max_length=args.max_length,
        num_workers=args.num_workers,
        preprocess=module.encoder.preprocess,
    )
    meter = StepMeter(profile_from=min(args.warmup, args.steps - 1), profile_steps=args.profile_steps)
    callbacks = [instantiate(cfg.callbacks.vocab_transfer), instantiate(cfg.callbacks.apc), meter]
    trainer = pl.Trainer(
        accelerator="gpu" if cuda else "cpu",
        devices=1,
        precision=args.precision,
        max_steps=args.steps,
        max_epochs=-1,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks,
        default_root_dir=args.tmp,
    )
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    trainer.fit(module, datamodule=data)
    total = time.perf_counter() - began
    timed = [t for i, t in enumerate(meter.times) if i >= args.warmup and i not in meter.profiled]
    timed = timed or meter.times[-1:]
    real = [r for i, (r, _) in enumerate(meter.tokens) if i >= args.warmup and i not in meter.profiled] or [0]
    padded = [p for i, (_, p) in enumerate(meter.tokens) if i >= args.warmup and i not in meter.profiled] or [0]
    step = statistics.median(timed)
    head, gemm = head_times(meter.prof, cuda) if meter.profiled else (float("nan"), float("nan"))
    window = sum(meter.times[i] for i in meter.profiled) or float("nan")
    enc = module.encoder
    return {
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "shape": {**SHAPES[args.shape], "vocab_size": enc.vocab_size, "init": args.init},
        "precision": args.precision,
        "cached_mini_batch": args.cached_mini_batch,
        "final_loss": float(trainer.callback_metrics.get("loss", float("nan"))),
        "steps": len(meter.times),
        "warmup_steps_excluded": args.warmup,
        "batch": {"queries": args.batch_size, "docs_per_query": 2, "max_length": args.max_length},
        "step_time_s_median": step,
        "step_time_s_mean": statistics.fmean(timed),
        "tokens_per_s": statistics.fmean(real) / step,
        "padded_tokens_per_s": statistics.fmean(padded) / step,
        "peak_gpu_mem_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
        "head_share_of_step": head / window,
        "head_gemm_share_of_step": gemm / window,
        "profiled_steps": len(meter.profiled),
        "wall_s_total": total,
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "machine": machine(),
        "torch": torch.__version__,
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m vtlab.bench.gpu_smoke", description=__doc__.split("\n\n")[0])
    p.add_argument("--tiny", action="store_true", help="CPU shape, 3 steps (CI: keeps the script from rotting)")
    p.add_argument("--steps", type=int, default=None, help="optimizer steps (default 200; --tiny: 3)")
    p.add_argument("--warmup", type=int, default=None, help="first steps left out of the timing (default 20; tiny 1)")
    p.add_argument("--profile-steps", type=int, default=None, help="steps under torch.profiler (default 5; tiny 1)")
    p.add_argument("--batch-size", type=int, default=None, help="queries per step (default 16; tiny 2)")
    p.add_argument("--max-length", type=int, default=None, help="tokens per text (default 256; tiny 16)")
    p.add_argument("--init", default=None, help="VT init (default semantic-pmi; tiny: mean, seconds on CPU)")
    p.add_argument(
        "--precision",
        default=None,
        help="Lightning precision (default bf16-mixed; tiny: 32-true, as CPUs without bf16 units emulate it slowly)",
    )
    p.add_argument("--cached-mini-batch", type=int, default=None, help="the cached loss: N queries a pass")
    p.add_argument("--num-workers", type=int, default=2)
    p.add_argument("--out", type=Path, default=Path("outputs/bench/gpu_smoke.json"))
    args = p.parse_args(argv)
    tiny = args.tiny
    defaults = dict(
        steps=(3, 200),
        warmup=(1, 20),
        profile_steps=(1, 5),
        batch_size=(2, 16),
        max_length=(16, 256),
        init=("mean", "semantic-pmi"),
        precision=("32-true", "bf16-mixed"),
    )
    for key, (small, full) in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, small if tiny else full)
    args.shape = "tiny" if tiny else "base"
    # APC probes in the callbacks' setup, before Lightning moves the model to the GPU: on the CPU, so few docs
    args.apc_docs = 8 if tiny else 64
    if tiny:
        args.num_workers = 0
    if min(args.steps, args.batch_size, args.max_length) < 1 or args.warmup < 0 or args.profile_steps < 1:
        p.error("--steps, --batch-size, --max-length, --profile-steps must be >= 1 and --warmup >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="vtlab-gpu-smoke-") as tmp:
        args.tmp = tmp
        result = run(args)
    write_result(args.out, result)
    print(json.dumps(result, indent=2, default=float))
    print(
        f"gpu-smoke: {result['device']}: {result['step_time_s_median'] * 1000:.1f} ms/step, "
        f"{result['tokens_per_s']:,.0f} tokens/s, head {100 * result['head_share_of_step']:.1f}% of the step "
        f"(GEMMs {100 * result['head_gemm_share_of_step']:.1f}%), peak GPU memory "
        f"{result['peak_gpu_mem_gib'] if result['peak_gpu_mem_gib'] is not None else 'n/a'} GiB -> {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
