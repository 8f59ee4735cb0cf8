"""Stage `diagnose`: can the backbone's vocabulary express the corpus? Figures for one backbone × vocab, no training.

Writes <run_dir>/diagnose/: diagnose.json (every figure), report.md/report.json/*.png for this candidate and, when
APC is probed, max_logits.png (APC's histogram). In a multirun every job also re-renders the comparison over all jobs
of the sweep so far into <sweep_dir>/diagnose/ (complete after the last job); `python -m vtlab.diagnose DIR` rebuilds
it from the jobs' diagnose.json files.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from vtlab.apc.calibration import APC, save_histogram
from vtlab.core.atomic import write_json
from vtlab.core.errors import VtlabError
from vtlab.diagnose.activity import output_activity
from vtlab.diagnose.corpus import corpus_name, load_corpus
from vtlab.diagnose.redundancy import redundancy
from vtlab.diagnose.report import RESULT_FILE, collect, render
from vtlab.diagnose.summary import console_summary
from vtlab.diagnose.tokenizer_fit import tokenize_corpus, tokenizer_fit
from vtlab.runs.job import config_choice, sweep_dir
from vtlab.runs.reads import reads
from vtlab.stages.build import ENCODER_READS, build_encoder
from vtlab.vocab.canonical import tokenizer_kind

log = logging.getLogger("vtlab")


def _apc(cfg: DictConfig, settings: DictConfig) -> APC:
    """The run's APC with the diagnose probe size (apc=off still probes, without a shift)."""
    overrides = {"num_docs": settings.num_docs, "max_length": settings.max_length, "batch_size": settings.batch_size}
    return instantiate(cfg.apc, **overrides) if cfg.get("apc") is not None else APC(percentile=None, **overrides)


@reads("diagnose", "apc", "data", *ENCODER_READS)
def run(cfg: DictConfig, state: dict[str, Any]) -> dict[str, Any]:
    settings = cfg.get("diagnose")
    if settings is None:
        raise VtlabError("stage=diagnose needs the diagnose config group (conf/diagnose/default.yaml)")
    t0 = time.perf_counter()
    backbone, vocab = instantiate(cfg.backbone), instantiate(cfg.vocab)
    texts = load_corpus(settings.corpus, cfg.get("data"))
    probe = int(settings.activity.num_docs) > 0
    apc = _apc(cfg, settings.activity) if probe else None  # validated before any model is loaded
    encoder = None
    if probe:
        encoder = build_encoder(cfg, state)  # the run's model, on the run's vocabulary
        tokenizer = encoder.tokenizer
    else:
        tokenizer = vocab.load_tokenizer(backbone.load_tokenizer())
    label = f"{config_choice(cfg, 'backbone')} · {config_choice(cfg, 'vocab')}"
    print(f"diagnose {label}: {len(texts):,} documents from {corpus_name(settings.corpus)}")

    corpus = tokenize_corpus(tokenizer, texts, vocab.preprocess)
    fit = tokenizer_fit(tokenizer, corpus, int(settings.fit.top_words), float(settings.fit.min_script_share))
    red = redundancy(tokenizer, corpus.ids)
    activity = output_activity(encoder, texts, apc, float(settings.activity.always_on)) if encoder else None
    samples = activity.pop("_samples") if activity else None

    apc_name = config_choice(cfg, "apc") if cfg.get("apc") is not None else "off"
    result = {
        "candidate": {
            "label": label,
            "backbone": config_choice(cfg, "backbone"),
            "vocab": config_choice(cfg, "vocab"),
            "init": config_choice(cfg, "init"),
            "apc": apc_name,
            "apc_enabled": bool(apc and apc.enabled),
            # generated test backbones (backbones/tiny.py) are random-init unless a stage trained them
            "random_init": backbone.random_init and "backbone" not in state,
            "transfers": vocab.transfers,
            "backbone_name": backbone.name,
            "vocab_size": len(tokenizer),
            "tokenizer_kind": tokenizer_kind(tokenizer),
            "preprocess": repr(vocab.preprocess),
        },
        "corpus": {"name": corpus_name(settings.corpus), "docs": len(texts)},
        "fit": fit,
        "redundancy": red,
        "activity": activity,
        "settings": OmegaConf.to_container(settings, resolve=True),
        "seconds": time.perf_counter() - t0,
    }
    out = Path(cfg.paths.run_dir) / "diagnose"
    write_json(out / RESULT_FILE, result)
    if activity is not None and samples is not None and samples.numel():
        save_histogram(samples, activity["apc"]["cutoff"], out / "max_logits.png")
    paths = render([result], out)
    for line in console_summary(result):
        print(line)
    print(f"report: {paths['markdown']}")
    sweep = sweep_dir()
    if sweep is not None:
        combined = render(collect(sweep), sweep / "diagnose")
        print(f"combined report (all jobs so far): {combined['markdown']}")
    return {**state, "diagnose": result, "diagnose_dir": out}
