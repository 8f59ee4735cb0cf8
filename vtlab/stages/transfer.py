"""Stage `transfer`: write the transferred HF model directory + transfer_report.json (cached per configuration)."""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from vtlab.errors import VtlabError
from vtlab.vocab.transfer import TransferOptions, cached_transfer

log = logging.getLogger("vtlab")


def transfer_parts(cfg: DictConfig):
    """(backbone, vocab, init, options) built from the run's config."""
    options = TransferOptions(**OmegaConf.to_container(cfg.transfer, resolve=True))
    return instantiate(cfg.backbone), instantiate(cfg.vocab), instantiate(cfg.init), options


def run(cfg: DictConfig, state: dict[str, Any]) -> dict[str, Any]:
    backbone, vocab, init, options = transfer_parts(cfg)
    if not vocab.transfers:
        raise VtlabError(f"stage=transfer: vocab={vocab.name} keeps the backbone's vocabulary; choose e.g. "
                         "vocab=bert-uncased or vocab=corpus-wordpiece")
    cached = cached_transfer(backbone, vocab, init, options)
    out = Path(cfg.paths.run_dir) / "transfer"
    _link(cached, out)
    report = json.loads((cached / "transfer_report.json").read_text())
    print(f"transferred model: {out} -> {cached}")
    print(f"overlap: {report['overlap']}  init: {report['init']}  ({report['seconds']:.1f}s)")
    return {**state, "transferred_dir": cached, "transfer_report": report}


def _link(target: Path, link: Path) -> None:
    """Point `link` at `target`, replacing an older link in one rename (never a dangling or half-made link)."""
    link.parent.mkdir(parents=True, exist_ok=True)
    tmp = link.with_name(f".{link.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    os.symlink(target, tmp, target_is_directory=True)
    try:
        os.replace(tmp, link)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
