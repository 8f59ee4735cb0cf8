"""Evaluation's document encoding spread over the run's processes: rank 0 evaluates and asks, the others serve.

Rank 0 runs the evaluation as on one process, with its encoder wrapped in `SpreadEncoder`; every corpus it encodes
is sent to the later ranks (vtlab.runs.world.World.broadcast), and all of them encode it together with Lightning's
`predict` (vtlab.models.predict.encode_corpus: batches dealt to the ranks, spilled, merged on rank 0 after a barrier).
The later ranks sit in `serve` until rank 0 says the evaluation is over. Queries, indexing and scoring stay on rank 0.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import scipy.sparse as sp

from vtlab.models.predict import encode_corpus
from vtlab.runs.world import World


class SpreadEncoder:
    """`encoder` whose `encode(side="doc")` runs on every process of `world`; everything else is `encoder`'s own."""

    def __init__(self, encoder: Any, world: World, work_dir: Path, trainer_kwargs: dict[str, Any]) -> None:
        self.encoder, self.world, self.work_dir, self.trainer_kwargs = encoder, world, Path(work_dir), trainer_kwargs

    def __getattr__(self, name: str) -> Any:
        return getattr(self.encoder, name)

    def encode(
        self,
        texts: Sequence[str],
        side: str = "doc",
        batch_size: int = 64,
        show_progress: bool = True,
        first_batch: Callable[[sp.csr_matrix], Any] | None = None,
    ) -> sp.csr_matrix:
        if side != "doc":
            tap = {} if first_batch is None else {"first_batch": first_batch}
            return self.encoder.encode(texts, side, batch_size, show_progress, **tap)
        texts = list(texts)
        self.world.broadcast((texts, batch_size))
        docs = encode_corpus(self.encoder, texts, self.work_dir, self.trainer_kwargs, batch_size=batch_size)
        if first_batch is not None:
            first_batch(docs[:batch_size])
        return docs

    def close(self) -> None:
        """The evaluation is over: the later ranks leave `serve`, and the spilled shards go."""
        self.world.broadcast(None)
        shutil.rmtree(self.work_dir, ignore_errors=True)


def serve(encoder: Any, world: World, work_dir: Path, trainer_kwargs: dict[str, Any]) -> int:
    """A later rank's share of rank 0's evaluation: encode each corpus it sends until it sends None. Returns how many
    corpora this rank helped encode."""
    served = 0
    while (request := world.broadcast(None)) is not None:
        texts, batch_size = request
        encode_corpus(encoder, texts, work_dir, trainer_kwargs, batch_size=batch_size)
        served += 1
    return served
