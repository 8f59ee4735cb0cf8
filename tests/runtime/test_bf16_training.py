"""trainer.precision=native trains in bf16-mixed where the CPU computes bf16 natively: the losses of a bf16-mixed run
track an fp32 run of the same recipe, seed and batches (the real SPLADE-tiny on BoolQ-clean triplets)."""

import numpy as np
import pytest
import pytorch_lightning as pl
from hydra.utils import instantiate

from tests.helpers import compose_config
from vtlab.runtime.precision import trainer_precision
from vtlab.stages.finetune import build_module

pytestmark = pytest.mark.usefixtures("shared_cache")
STEPS = 12


class Losses(pl.Callback):
    def __init__(self) -> None:
        self.values: list[float] = []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        self.values.append(float(outputs["loss"] if isinstance(outputs, dict) else outputs))


def _losses(precision: str) -> list[float]:
    cfg = compose_config(["vocab=native", "apc=off", "data.batch_size=8", "regularizer.doc.warmup_steps=0"])
    pl.seed_everything(0, workers=True)
    module = build_module(cfg)
    data = instantiate(cfg.data, tokenizer=module.encoder.tokenizer, preprocess=module.encoder.preprocess)
    losses = Losses()
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        precision=precision,
        max_steps=STEPS,
        limit_val_batches=0,
        enable_checkpointing=False,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[losses],
    )
    trainer.fit(module, datamodule=data)
    return losses.values


def test_native_is_bf16_mixed_exactly_where_the_cpu_computes_bf16():
    assert trainer_precision("native", "cpu", flags={"avx2", "amx_bf16"}) == "bf16-mixed"
    assert trainer_precision("native", "cpu", flags={"avx2", "avx512_bf16"}) == "bf16-mixed"
    assert trainer_precision("native", "cpu", flags={"avx2", "avx512f"}) == "32-true"
    assert trainer_precision("bf16-mixed", "cpu", flags={"avx2"}) == "bf16-mixed"  # an explicit choice is kept


@pytest.mark.train
def test_bf16_mixed_losses_track_fp32():
    fp32, bf16 = np.array(_losses("32-true")), np.array(_losses("bf16-mixed"))
    assert len(fp32) == len(bf16) == STEPS
    # bf16 keeps 8 significant bits (relative rounding 2^-8 ≈ 0.4% per operation); a step's loss sums many rounded
    # terms and the weights drift apart step by step, so each loss may differ by a few percent, not by tens
    rel = np.abs(bf16 - fp32) / np.abs(fp32)
    assert float(np.median(rel)) < 0.03 and float(rel.max()) < 0.15, (fp32, bf16)
    # and the batch-to-batch ups and downs are the same ones: the losses move together
    assert np.corrcoef(fp32, bf16)[0, 1] > 0.95, (fp32, bf16)
