"""Stage `apc`: calibrate the (vocabulary-transferred) backbone's MLM output bias and save it as an HF directory."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from vtlab.apc.calibration import APC, json_report, summary_line, write_outputs
from vtlab.core.atomic import atomic_dir
from vtlab.core.errors import VtlabError
from vtlab.data.clean import training_passages
from vtlab.runs.reads import reads
from vtlab.stages.build import ENCODER_READS, build_encoder

log = logging.getLogger("vtlab")


@reads("apc", "data.dev", *ENCODER_READS)
def run(cfg: DictConfig, state: dict[str, Any]) -> dict[str, Any]:
    if cfg.get("apc") is None:
        raise VtlabError("stage=apc needs an apc config: add apc=p60 (or +apc=p60)")
    apc: APC = instantiate(cfg.apc)
    if not apc.enabled:
        raise VtlabError("stage=apc: apc=off has nothing to calibrate; choose e.g. apc=p60")
    encoder = state.get("encoder") or build_encoder(cfg, state)  # on the run's vocabulary
    # the probe takes the first apc.num_docs clean training passages, never the run's dev split or an evaluation text
    dev_size = OmegaConf.select(cfg, "data.dev.dev_size", default=300)
    dev_seed = OmegaConf.select(cfg, "data.dev.seed", default=0)
    report = apc.calibrate(encoder, training_passages(dev_size, dev_seed))
    out = Path(cfg.paths.run_dir) / "apc"
    with atomic_dir(out) as tmp:  # complete or absent: a crash never leaves half a calibrated model
        encoder.model.save_pretrained(tmp)
        encoder.tokenizer.save_pretrained(tmp)
        if encoder.query_model is not None:
            encoder.query_model.save_pretrained(tmp / "query")
        write_outputs(report, tmp)
    for when in ("before", "after"):
        print(summary_line(report, when))
    print(f"calibrated model: {out}  ({report['seconds']:.1f}s)")
    return {**state, "encoder": encoder, "apc_report": json_report(report), "apc_dir": out}
