"""Training-step benchmark worker: one tool, SPLADE-tiny, BoolQ train pairs, in this (fresh) process.

    python -m vtlab.bench.train --tool vtlab|st --out FILE [--steps 15 --warmup 3 --batch 16 --max-length 128]

Both tools run the same step: 16 questions + their 16 passages (in-batch negatives), max length 128 on both sides,
fp32 with dropout on, InfoNCE on dot products at scale 1 + FLOPS (λ_q 5e-5, λ_d 3e-5), backward, AdamW (lr 2e-5),
through each tool's own trainer:

- `vtlab`: SpladeModule (fused max pooling with a sparse backward) in a Lightning Trainer;
- `st`: sentence-transformers SparseEncoderTrainer + SpladeLoss(SparseMultipleNegativesRankingLoss), NO_DUPLICATES
  batches (it also adds its λ warm-up callback).

A step is timed from the trainer's step-begin to its step-end hook (forward, loss, backward, optimizer step); the
median of the steps after --warmup is reported, with this process's peak RSS.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
import warnings
from typing import Any

from vtlab.bench.common import peak_rss_mb, rss_mb, set_threads, write_result
from vtlab.core.assets import asset_path
from vtlab.data.boolq import train_pairs
from vtlab.runtime.allocator import keep_freed_memory

# vtlab's model, loss and regularizer modules are imported in run_vtlab only: the `st` process measures
# sentence-transformers' step time and peak RSS without them.

LAMBDA_Q, LAMBDA_D, LR = 5e-5, 3e-5, 2e-5


def pairs(n: int) -> tuple[list[str], list[str]]:
    p = train_pairs()[:n]
    return [q for q, _ in p], [d for _, d in p]


def run_vtlab(questions: list[str], passages: list[str], args: argparse.Namespace) -> dict[str, Any]:
    import functools

    import pytorch_lightning as pl
    import torch
    from torch.utils.data import DataLoader

    from vtlab.backbones import Backbone
    from vtlab.losses import InfoNCE
    from vtlab.models.encoder import SpladeEncoder
    from vtlab.models.splade import SpladeModule
    from vtlab.regularizers import Flops

    keep_freed_memory()  # as `python -m vtlab` runs (vtlab.runtime.allocator)
    pl.seed_everything(0, verbose=False)
    enc = SpladeEncoder.from_backbone(
        Backbone(str(asset_path("splade-tiny")), family="bert"),
        query_max_length=args.max_length,
        doc_max_length=args.max_length,
    )
    module = SpladeModule(
        enc,
        InfoNCE(temperature=1.0, in_batch_negatives=True),
        functools.partial(torch.optim.AdamW, lr=LR),
        query_regularizer=Flops(LAMBDA_Q),
        doc_regularizer=Flops(LAMBDA_D),
        scheduler=None,
    )
    tok = enc.tokenizer

    def collate(items: list[tuple[str, str]]) -> dict[str, Any]:
        def t(texts: list[str]) -> dict[str, torch.Tensor]:
            e = tok(texts, padding=True, truncation=True, max_length=args.max_length, return_tensors="pt")
            return {"input_ids": e["input_ids"], "attention_mask": e["attention_mask"]}

        return {"query": t([q for q, _ in items]), "docs": t([d for _, d in items])}

    loader = DataLoader(
        list(zip(questions, passages)),
        batch_size=args.batch,
        shuffle=True,
        collate_fn=collate,
        generator=torch.Generator().manual_seed(0),
        drop_last=True,
    )
    steps: list[float] = []

    class StepTimer(pl.Callback):
        def on_train_batch_start(self, *a: Any) -> None:
            self.t = time.perf_counter()

        def on_train_batch_end(self, *a: Any) -> None:  # after backward and the optimizer step
            steps.append(time.perf_counter() - self.t)

    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        precision="32-true",
        max_steps=args.warmup + args.steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        callbacks=[StepTimer()],
    )
    rss_load = rss_mb()
    trainer.fit(module, train_dataloaders=loader)
    return {"steps_s": steps, "rss_after_load_mb": round(rss_load, 1)}


def run_st(questions: list[str], passages: list[str], args: argparse.Namespace) -> dict[str, Any]:
    from datasets import Dataset
    from sentence_transformers.base.sampler import BatchSamplers
    from sentence_transformers.sparse_encoder import SparseEncoder, SparseEncoderTrainer, SparseEncoderTrainingArguments
    from sentence_transformers.sparse_encoder.losses import SparseMultipleNegativesRankingLoss, SpladeLoss
    from sentence_transformers.sparse_encoder.modules.mlm_transformer import MLMTransformer
    from sentence_transformers.sparse_encoder.modules.splade_pooling import SpladePooling
    from transformers import TrainerCallback

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.getLogger("sentence_transformers").setLevel(logging.ERROR)
        mlm = MLMTransformer(str(asset_path("splade-tiny")), max_seq_length=args.max_length)
        model = SparseEncoder(
            modules=[mlm, SpladePooling(pooling_strategy="max", activation_function="relu")], device="cpu"
        )
    loss = SpladeLoss(
        model,
        SparseMultipleNegativesRankingLoss(model, scale=1.0),
        document_regularizer_weight=LAMBDA_D,
        query_regularizer_weight=LAMBDA_Q,
    )
    steps: list[float] = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *a: Any, **k: Any) -> None:
            self.t = time.perf_counter()

        def on_step_end(self, *a: Any, **k: Any) -> None:  # after backward and the optimizer step
            steps.append(time.perf_counter() - self.t)

    with tempfile.TemporaryDirectory() as tmp:
        targs = SparseEncoderTrainingArguments(
            output_dir=tmp,
            per_device_train_batch_size=args.batch,
            max_steps=args.warmup + args.steps,
            learning_rate=LR,
            batch_sampler=BatchSamplers.NO_DUPLICATES,
            logging_steps=10_000,
            save_strategy="no",
            report_to=[],
            use_cpu=True,
            dataloader_num_workers=0,
            seed=0,
            disable_tqdm=True,
            lr_scheduler_type="constant",
        )
        trainer = SparseEncoderTrainer(
            model=model,
            args=targs,
            loss=loss,
            train_dataset=Dataset.from_dict({"anchor": questions, "positive": passages}),
            callbacks=[StepTimer()],
        )
        rss_load = rss_mb()
        trainer.train()
    return {"steps_s": steps, "rss_after_load_mb": round(rss_load, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tool", required=True, choices=["vtlab", "st"])
    # 15 timed steps after 3 warm-up ones: sentence-transformers' ~1 s steps (2-3 s on AVX2) are the bench's longest
    # wait after the Seismic build. Steps vary ~3%: medians of 12-step windows stay within ±3% over 35 steps of each
    # tool, so 15 steps give the ratio that 30 would
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--pairs", type=int, default=2000, help="the first N BoolQ train pairs")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    set_threads(args.threads)
    questions, passages = pairs(args.pairs)
    result = (run_st if args.tool == "st" else run_vtlab)(questions, passages, args)
    timed_steps = result["steps_s"][args.warmup :]
    result.update(
        tool=args.tool,
        batch=args.batch,
        max_length=args.max_length,
        threads=args.threads,
        steps_timed=len(timed_steps),
        s_per_step=round(statistics.median(timed_steps), 4),
        mean_s_per_step=round(statistics.fmean(timed_steps), 4),
        peak_rss_mb=round(peak_rss_mb(), 1),
    )
    result["steps_s"] = [round(s, 4) for s in result["steps_s"]]
    write_result(args.out, result)


if __name__ == "__main__":
    main()
