"""What `make reproduce-table SCALE=paper` will submit, before it does: jobs, GPUs, steps and a GPU-hours estimate,
and the checks that keep the recipe's global batch (conf/experiment/paper/base.yaml) what it says.

    python -m vtlab.reproduce --scale paper --dry-run     # prints this plan and the commands, submits nothing

The estimate is arithmetic, not a measurement: 6 × parameters × tokens per training step (plus the MLM head's
projection at every position) at an assumed sustained bf16 rate per GPU. `make gpu-smoke` measures the real rate of
your GPU (tokens/s at the ModernBERT-base shape); pass it as `tflops=`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

from vtlab.core.errors import ConfigError
from vtlab.core.paths import CONF_DIR

# Assumed sustained bf16 throughput per GPU (A100/H100-class; SPLADE's vocabulary-wide max-pooling is memory-bound).
ASSUMED_TFLOPS = 100.0
# Assumed padded lengths per text (dynamic padding to the longest of the batch): MS MARCO queries are ~10 tokens,
# passages ~80, the longest passage of a batch of 128–256 usually 150–256. MLM spans are 128 (conf/mlm/paper.yaml).
QUERY_TOKENS, DOC_TOKENS, MLM_TOKENS = 32, 192, 128
# Encoder parameters without the (tied) vocabulary matrix, and the hidden size, per backbone config name.
ENCODERS = {
    "bert-uncased": (86e6, 768),
    "modernbert": (111e6, 768),
    "roberta-large": (303e6, 1024),
    "e5-small": (21.4e6, 384),  # 12 layers of hidden 384 and the head's transform (the real-case table's)
}
NATIVE_VOCAB = {"bert-uncased": 30522, "modernbert": 50368, "roberta-large": 50265, "e5-small": 47284}
# Vocabularies that keep the backbone's own output rows (vocab=native, lowercase, blank-prefix-lower, lowercase-masked:
# a masked row is still projected), and the size of each pretrained transfer target.
OWN_ROWS = ("vtlab.vocab.targets.NativeVocab", "vtlab.vocab.masked_outputs.CasedOutputsMasked")
TARGET_VOCAB = {"bert-uncased": 30522, "minilm-bert-uncased": 30522}


@dataclass(frozen=True)
class Job:
    """One sweep point (× seeds) of one table."""

    table: str
    experiment: str
    point: str  # the sweep overrides of this point ("" for a main row)
    seeds: int
    gpus: int
    steps: int
    global_batch: int
    mlm_steps: int
    gpu_hours: float  # per job (one seed)
    apc: str = "off"  # the APC it calibrates with (conf/apc/ name)


def check_global_batch(cfg: DictConfig, where: str) -> int:
    """data.batch_size × trainer.devices × trainer.num_nodes must be the config's paper.global_batch."""
    per_device, devices = int(cfg.data.batch_size), cfg.trainer.devices
    nodes = int(cfg.trainer.get("num_nodes", 1) or 1)
    if not isinstance(devices, int):
        raise ConfigError(
            f"{where}: trainer.devices={devices!r}: paper scale needs a number of GPUs (the global "
            "batch is data.batch_size × trainer.devices)"
        )
    declared = OmegaConf.select(cfg, "paper.global_batch")
    if declared is None:
        raise ConfigError(f"{where}: paper.global_batch is missing (conf/experiment/paper/base.yaml declares it)")
    if per_device * devices * nodes != int(declared):
        raise ConfigError(
            f"{where}: data.batch_size={per_device} × trainer.devices={devices} × trainer.num_nodes="
            f"{nodes} = {per_device * devices * nodes}, but paper.global_batch={declared}; keep the "
            "product equal to the global batch (gradient accumulation is not equivalent)"
        )
    return int(declared)


def output_rows(cfg: DictConfig) -> int:
    """The number of output rows the MLM head projects every position onto, under the run's vocabulary."""
    vocab = cfg.vocab
    if str(vocab._target_) in OWN_ROWS:
        return NATIVE_VOCAB[str(cfg.backbone.name)]
    if vocab.get("vocab_size") is not None:  # a vocabulary trained to a size (vocab=corpus-wordpiece)
        return int(vocab.vocab_size)
    if str(vocab.name) in TARGET_VOCAB:
        return TARGET_VOCAB[str(vocab.name)]
    raise ConfigError(
        f"vocab={vocab.name}: no vocabulary size known to vtlab.reproduce.paper_plan (known: {sorted(TARGET_VOCAB)})"
    )


def token_flops(cfg: DictConfig) -> float:
    """FLOPs per token of one training step: forward + backward of the encoder and the head, which projects every
    position onto the run's output rows."""
    name = str(cfg.backbone.name)
    if name not in ENCODERS:
        raise ConfigError(f"backbone={name}: no size known to vtlab.reproduce.paper_plan (known: {sorted(ENCODERS)})")
    params, hidden = ENCODERS[name]
    return 6 * (params + hidden * output_rows(cfg))


def step_flops(cfg: DictConfig) -> tuple[float, float]:
    """(FLOPs of one fine-tuning step of the global batch, FLOPs of one MLM step of 2048 spans)."""
    per_token = token_flops(cfg)
    group = 1 + int(cfg.data.num_negatives)
    q_side = 0 if str(cfg.model._target_).endswith("InferenceFreeModule") else QUERY_TOKENS
    tokens = int(cfg.paper.global_batch) * (q_side + group * DOC_TOKENS)
    mlm = cfg.mlm
    mlm_tokens = int(mlm.batch_size) * int(mlm.accumulate_grad_batches) * int(cfg.trainer.devices) * MLM_TOKENS
    return per_token * tokens, per_token * mlm_tokens


def _points(cfg: DictConfig) -> list[list[str]]:
    """The sweep points of an experiment's hydra.sweeper.params (comma lists), [[]] when it has none."""
    params = OmegaConf.select(cfg, "hydra.sweeper.params") or {}
    axes = [[f"{k}={v.strip()}" for v in str(vals).split(",")] for k, vals in params.items()]
    return [list(p) for p in itertools.product(*axes)] if axes else [[]]


def plan(sweeps: dict[str, list[str]], tflops: float = ASSUMED_TFLOPS) -> list[Job]:
    """Jobs of `sweeps` (vtlab.reproduce.sweeps: table → ["experiment=a,b", "seed=0,1", …]), each composed."""
    jobs = []
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        for table, overrides in sweeps.items():
            args = dict(o.split("=", 1) for o in overrides if not o.startswith("reuse_runs="))
            seeds = len(args.get("seed", "0").split(","))
            for exp in args["experiment"].split(","):
                base = [f"experiment={exp}", "paths.run_dir=/tmp/vtlab-plan"]
                first = compose("config", overrides=base, return_hydra_config=True)
                for point in _points(first):
                    cfg = compose("config", overrides=base + point) if point else first
                    where = f"conf/experiment/{exp}.yaml{' ' + ' '.join(point) if point else ''}"
                    batch = check_global_batch(cfg, where)
                    step, mlm_step = step_flops(cfg)
                    steps, mlm_steps = int(cfg.trainer.max_steps), int(cfg.mlm.steps)
                    gpus = int(cfg.trainer.devices) * int(cfg.trainer.get("num_nodes", 1) or 1)
                    # FLOPs / (gpus × rate) seconds on each of `gpus` GPUs = FLOPs / rate GPU-seconds
                    hours = (steps * step + mlm_steps * mlm_step) / (tflops * 1e12) / 3600
                    apc = str(cfg.apc.name)
                    jobs.append(Job(table, exp, " ".join(point), seeds, gpus, steps, batch, mlm_steps, hours, apc))
    return jobs


def launcher_overrides(jobs: list[Job]) -> list[str]:
    """SLURM tasks per node = GPUs per job (Lightning's DDP under SLURM runs one task per GPU and refuses otherwise)."""
    gpus = sorted({j.gpus for j in jobs})
    if len(gpus) != 1:
        raise ConfigError(f"paper jobs ask for different GPU counts {gpus}; submit them as separate sweeps")
    return [f"hydra.launcher.tasks_per_node={gpus[0]}", f"hydra.launcher.gpus_per_node={gpus[0]}"]


def render(jobs: list[Job], tflops: float = ASSUMED_TFLOPS) -> str:
    """The plan as a table: one line per sweep point, then the totals."""
    lines = [
        f"{'table':<16} {'experiment / sweep point':<58} {'seeds':>5} {'GPUs':>4} {'batch':>5} {'steps':>7} "
        f"{'MLM':>6} {'APC':>7} {'GPU-h':>8}"
    ]
    for j in jobs:
        what = f"{j.experiment} {j.point}".strip()
        lines.append(
            f"{j.table:<16} {what:<58} {j.seeds:>5} {j.gpus:>4} {j.global_batch:>5} {j.steps:>7} "
            f"{j.mlm_steps:>6} {j.apc:>7} {j.gpu_hours * j.seeds:>8.0f}"
        )
    n = sum(j.seeds for j in jobs)
    total = sum(j.gpu_hours * j.seeds for j in jobs)
    lines.append(
        f"paper plan: {n} jobs, ≈{total:,.0f} GPU-hours (estimate at {tflops:g} TFLOP/s per GPU, "
        f"{QUERY_TOKENS}/{DOC_TOKENS}-token queries/passages; ablation points equal to a main row are reused, "
        "so fewer may run; BEIR-13 evaluation not counted)"
    )
    return "\n".join(lines)
