"""Entries `apc` and `start_shift`: one decoder-bias shift (vtlab.apc.calibration) when fitting starts."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from safetensors.torch import load_file, save_file

from vtlab.apc.calibration import APC, flat_metrics, json_report, summary_line, write_outputs
from vtlab.backbones.weights import reading_settings
from vtlab.core import integrity
from vtlab.core.assets import cache_dir
from vtlab.core.atomic import file_lock, json_hash
from vtlab.core.cache_keys import settings_key
from vtlab.core.errors import VtlabError
from vtlab.core.json_files import read_json
from vtlab.core.paths import child

log = logging.getLogger("vtlab")


class APCCallback(pl.Callback):
    """Calibrate the module's encoder once when fitting starts (after vocabulary transfer: list it after that callback).

    texts: a function returning the probe documents; default: the distinct positives and negatives of the
    datamodule's training examples, in a seeded random order (the probe takes the first `apc.num_docs`).
    """

    def __init__(self, apc: APC, out_dir: str | None = None, texts: Callable[[], list[str]] | None = None) -> None:
        self.apc, self.out_dir, self.texts = apc, out_dir, texts
        self.report: dict[str, Any] | None = None

    def _train_texts(self, trainer: pl.Trainer) -> list[str]:
        datamodule = getattr(trainer, "datamodule", None)
        if datamodule is None or not hasattr(datamodule, "train_documents"):
            raise VtlabError("apc: no probe texts: pass texts= to APCCallback or fit with a TripletDataModule")
        docs = datamodule.train_documents()
        order = np.random.default_rng(self.apc.seed).permutation(len(docs))[: self.apc.num_docs]
        return [docs[i] for i in order]

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit" or not self.apc.enabled or self.report is not None:
            return
        texts = self.texts() if self.texts is not None else self._train_texts(trainer)
        # every rank calibrates (same texts, same seed → same cutoff) on its own accelerator: `setup` runs before the
        # strategy moves the module there, so the probe moves the encoder itself; only rank 0 writes files
        self.report = calibrate_cached(self.apc, pl_module.encoder, texts, trainer.strategy.root_device)
        log.info(summary_line(self.report, "before"))
        log.info(summary_line(self.report, "after"))
        for logger in trainer.loggers:
            logger.log_metrics(flat_metrics(self.report), step=0)
        if trainer.is_global_zero:
            write_outputs(self.report, self.out_dir or trainer.default_root_dir)


_CACHE_VERSION = "apc-v1"  # bump when calibration changes in a way its settings do not show


def _biases(encoder: Any) -> list[torch.Tensor]:
    biases = [encoder.output_bias("doc")]
    if encoder.output_bias("query") is not biases[0]:
        biases.append(encoder.output_bias("query"))
    return biases


def _key(apc: APC, encoder: Any, texts: list[str]) -> str:
    """The calibration's identity: APC's settings, the probe texts and how the encoder reads them
    (vtlab.backbones.weights.reading_settings: its class, lengths, tokenizer, preprocessing and weights)."""
    texts_key = json_hash(texts[: apc.num_docs], 40)
    return settings_key("apc", _CACHE_VERSION, apc=apc, texts=texts_key, **reading_settings(encoder))


@contextlib.contextmanager
def on_device(module: torch.nn.Module, device: str | torch.device | None) -> Iterator[None]:
    """`module` on `device` inside, back on its parameters' device after (the same Parameter objects throughout);
    None, a module without parameters or one already there: left as it is."""
    first = next(module.parameters(), None)
    if device is None or first is None or first.device == torch.device(device):
        yield
        return
    home = first.device
    module.to(device)
    try:
        yield
    finally:
        module.to(home)


def calibrate_cached(
    apc: APC, encoder: Any, texts: list[str], device: str | torch.device | None = None
) -> dict[str, Any]:
    """`apc.calibrate(encoder, texts)` with the encoder on `device` (None: where it is; back where it was after),
    computed once per (settings, probe texts, weights) into $VTLAB_CACHE/apc and reused after: a table's seeds that
    share their adapted model (mlm.seed) and their probe documents calibrate alike, bit for bit (the calibrated output
    biases are stored, not recomputed; a cached calibration moves nothing)."""
    out = child(cache_dir("apc"), f"{apc.name}-{_key(apc, encoder, texts)}", "apc.name")
    with file_lock(out.with_name(out.name + ".lock")):
        if integrity.problem(out) is None:
            stored = load_file(str(out / "biases.safetensors"))
            with torch.no_grad():
                for i, bias in enumerate(_biases(encoder)):
                    bias.copy_(stored[f"bias{i}"].to(bias.device, bias.dtype))
            report = read_json(out / "report.json", dict, "an APC calibration's report: delete its folder to rebuild")
            report.update({k: stored[k] for k in ("samples", "samples_after")})
            log.info("apc: cached calibration %s", out)
            return report
        with on_device(encoder, device):
            report = apc.calibrate(encoder, texts)

        def write(tmp: Path) -> None:
            tensors = {f"bias{i}": b.detach().cpu().contiguous() for i, b in enumerate(_biases(encoder))}
            tensors.update({k: report[k].contiguous() for k in ("samples", "samples_after")})
            save_file(tensors, str(tmp / "biases.safetensors"))
            (tmp / "report.json").write_text(json.dumps(json_report(report), default=float))

        integrity.build(out, write)
        return report
