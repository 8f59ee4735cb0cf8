"""Five DDP encodes in a row into one work directory, rank 1 slowed down before each of its flushes; started by
tests/export/test_ddp_encode.py as `python -m torch.distributed.run --nproc_per_node=2 --standalone
tests/ddp_encode_runs.py OUT`. Rank 0 saves each merged index as OUT/run-<i>.npz; the test imports the corpus and
the encoder from here for its one-process reference."""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path
from typing import Any

import pytorch_lightning as pl

from vtlab.backbones import Backbone
from vtlab.index.shards import save_csr
from vtlab.models.encoder import SpladeEncoder
from vtlab.models.predict import encode_corpus

RUNS = 5
# 21 documents in batches of 4: 6 batches, the last of one document; rank 1 gets batches 1, 3, 5
_WORDS = "the a river bank money loan water fish city north south law court paper tree green old new".split()
_rng = random.Random(0)
TEXTS = [" ".join(_rng.choices(_WORDS, k=_rng.randint(1, 30))) for _ in range(21)]
SETTINGS: dict[str, Any] = {"batch_size": 4, "shard_rows": 8, "threads": 1}  # a spill every 2 batches


def tiny_encoder() -> SpladeEncoder:
    # fp32 pinned: the comparison with one process is bitwise
    return SpladeEncoder.from_backbone(
        Backbone("asset:splade-tiny", family="bert"), doc_max_length=32, precision="fp32"
    )


class SlowRank(pl.Callback):
    """Rank 1 sleeps before each of its spills is written: at each batch end (before the writer, listed after this
    callback, spills) and before the writer's last flush, at teardown."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def on_predict_batch_end(self, trainer: pl.Trainer, *args: Any, **kwargs: Any) -> None:
        if trainer.global_rank == 1:
            time.sleep(self.seconds / 4)

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if trainer.global_rank == 1:
            time.sleep(self.seconds)


def main(out: Path) -> None:
    encoder = tiny_encoder()
    trainer_kwargs = {"strategy": "ddp", "accelerator": "cpu", "devices": 2, "callbacks": [SlowRank(1.5)]}
    for i in range(RUNS):
        docs = encode_corpus(encoder, TEXTS, out / "work", trainer_kwargs, **SETTINGS)
        if docs is not None:
            save_csr(out / f"run-{i}.npz", docs)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
