"""Stage `evaluate`: encode the collection(s), exact retrieval from the inverted index, ir-measures metrics."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from rich.console import Console

from vtlab.core.atomic import write_json
from vtlab.core.logs import print_line
from vtlab.core.paths import child
from vtlab.data.collections import judged_queries
from vtlab.evaluation import EvaluationSuite, average, results_table
from vtlab.evaluation.baseline import baseline_metrics
from vtlab.evaluation.mteb_results import write_mteb_results
from vtlab.export.run_encoder import encoder_from_run
from vtlab.models.spread_encoder import SpreadEncoder, serve
from vtlab.runs.reads import reads
from vtlab.runs.world import join_trainer
from vtlab.stages.build import ENCODER_READS, PROCESS_READS, build_encoder, predict_trainer_kwargs
from vtlab.tracking.loggers import log_results, run_loggers

log = logging.getLogger("vtlab")


def _baseline(cfg: DictConfig, evaluation, dataset: str) -> dict[str, float]:
    """The plain backbone (native vocabulary, no APC, no training) on the same collection, cached per configuration."""
    return baseline_metrics(
        evaluation,
        lambda: instantiate(cfg.model.encoder),
        backbone_key=instantiate(cfg.backbone).cache_key(),
        eval_config=OmegaConf.to_container(cfg.eval, resolve=True),
        encoder_config=OmegaConf.to_container(cfg.model.encoder, resolve=True),
        dataset=dataset,
    )


@reads("eval", "baseline", *PROCESS_READS, *ENCODER_READS)
def run(cfg: DictConfig, state: dict[str, Any]) -> dict[str, Any]:
    """The evaluation on the device training used (the trainer's root device, in the precision `auto` picks there:
    bf16 on a GPU). On several processes rank 0 evaluates and every rank encodes a share of each corpus
    (vtlab.models.spread_encoder); the later ranks write nothing."""
    if cfg.eval is None:
        return state
    world = join_trainer(cfg.trainer)
    run_dir = Path(cfg.paths.run_dir)
    if "reused_training_from" in state:  # an equal run's training, copied into this run's directory (vtlab.runs.reuse)
        state = {**state, "encoder": encoder_from_run(run_dir, cfg)[0]}
    encoder = on_device(state.get("encoder") or build_encoder(cfg, state), world.device)
    if world.size > 1:
        spread = (encoder, world, run_dir / "eval" / ".encoding", predict_trainer_kwargs(cfg.trainer))
        if not world.leader:
            serve(*spread)
            return state
        encoder = SpreadEncoder(*spread)
        try:
            return _evaluate(cfg, state, run_dir, encoder)
        finally:
            encoder.close()
    return _evaluate(cfg, state, run_dir, encoder)


def on_device(encoder: Any, device: torch.device) -> Any:
    """`encoder` moved to `device` (a model=bm25 encoder has no network: as it is), and a line saying where it
    encodes and in which precision."""
    if isinstance(encoder, torch.nn.Module):
        encoder = encoder.to(device)
        resolved = getattr(encoder, "resolved_precision", None)
        log.info("evaluating on %s%s", device, f" in {resolved(device)}" if resolved else "")
    return encoder


def _evaluate(cfg: DictConfig, state: dict[str, Any], run_dir: Path, encoder: Any) -> dict[str, Any]:
    evaluation = instantiate(cfg.eval)
    datasets = evaluation.items() if isinstance(evaluation, EvaluationSuite) else [(None, evaluation)]
    with_baseline = cfg.get("baseline", False) and ("encoder" in state or instantiate(cfg.vocab).transfers)
    console = Console()
    results: dict[str, dict[str, float]] = {}
    for name, ev in datasets:
        name = name or ev.name  # a BEIR directory's own name (loading it) unless eval.name is set
        out_dir = child(run_dir / "eval", name, "eval.name")
        coll = getattr(ev, "collection", None)
        if coll is not None:  # what was read, before minutes of encoding
            log.info(
                "evaluating %s: %d queries (%d judged) over %d documents -> %s",
                name,
                len(coll.queries),
                len(judged_queries(coll.qrels)),
                len(coll.corpus),
                out_dir,
            )
        metrics = ev(encoder, out_dir=out_dir)
        results[name] = metrics
        mteb_dir = run_dir / "eval" / "mteb"  # the scores again in MTEB's results format
        write_mteb_results(mteb_dir, ev, name, metrics, f"vtlab/{cfg.name}", encoder=encoder)
        baseline = _baseline(cfg, ev, name) if with_baseline else None
        console.print(
            results_table(
                metrics,
                title=f"{cfg.name}: {name}",
                baseline=baseline,
                baseline_label=f"{cfg.backbone.get('name', 'backbone')} as is",
            )
        )
        if baseline is not None:
            write_json(out_dir / "baseline_metrics.json", baseline)
    summary = average(results) if len(results) > 1 else next(iter(results.values()))
    if len(results) > 1:
        write_json(run_dir / "eval" / "summary.json", {"datasets": results, "average": summary})
        console.print(results_table(summary, title=f"{cfg.name}: average over {len(results)} datasets"))
    eval_dir = (run_dir / "eval").resolve()
    files = [eval_dir / n / "metrics.json" for n in results] + ([eval_dir / "summary.json"] if len(results) > 1 else [])
    print_line(console, f"outputs: {run_dir.resolve()}  (metrics: {', '.join(map(str, files))})")
    log_results(run_loggers(cfg, state), results, run_dir)
    return {**state, "metrics": summary, "results": results, "eval_dir": run_dir / "eval"}
