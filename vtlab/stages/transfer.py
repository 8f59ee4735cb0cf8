"""Stage `transfer`: write the transferred HF model directory + transfer_report.json (cached per configuration)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from vtlab.core.atomic import atomic_symlink
from vtlab.core.errors import VtlabError
from vtlab.core.json_files import read_json
from vtlab.runs.reads import reads
from vtlab.stages.build import TRANSFER_READS, transfer_parts
from vtlab.vocab.transfer import cached_transfer

log = logging.getLogger("vtlab")


@reads(*TRANSFER_READS)
def run(cfg: DictConfig, state: dict[str, Any]) -> dict[str, Any]:
    backbone, vocab, init, options = transfer_parts(cfg)
    if not vocab.transfers:
        raise VtlabError(
            f"stage=transfer: vocab={vocab.name} keeps the backbone's vocabulary; choose e.g. "
            "vocab=bert-uncased or vocab=corpus-wordpiece"
        )
    cached = cached_transfer(backbone, vocab, init, options)
    out = Path(cfg.paths.run_dir) / "transfer"
    atomic_symlink(cached, out)
    report = read_json(cached / "transfer_report.json", dict, "a transfer's report: delete its directory to rebuild")
    print(f"transferred model: {out} -> {cached}")
    print(f"overlap: {report['overlap']}  init: {report['init']}  ({report['seconds']:.1f}s)")
    return {**state, "transferred_dir": cached, "transfer_report": report}
