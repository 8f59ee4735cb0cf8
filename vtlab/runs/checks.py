"""The run's config, checked before any stage runs: each key users set to a number, a choice or a path, against what
it must be; one line naming the full key and the value otherwise, e.g.
`trainer.max_steps='abc': expected an integer >= 1 (or -1 for no limit)`.

Lightning, the data module or a loader refuse most of these values too, but only once a model is loaded (the
evaluation's keys: after training), and often in words that name no key. The library keeps its own checks for callers
that do not come through the pipeline.

The choices are read where they are declared, never copied here: `trainer.precision` from the Lightning Trainer's
type of its `precision` parameter (plus vtlab's `native`), `eval.index` from the nodes of vtlab/index/indexes.yaml,
and vtlab's own (`model.encoder.precision`, `init.similarity`, `transfer.bias`, `export.onnx_int8`, ...) from the
Literal types of vtlab.core.choices, the types the constructors that take them declare.

A key that is absent, or still `???` (reported by whoever reads it), is not checked; a null parent (eval=none,
regularizer=none) ends the walk. `*` in a key matches every child of a mapping (eval.evaluations.*.top_k).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import InterpolationToMissingValueError

from vtlab.core.choices import (
    CollapseAction,
    EncoderPrecision,
    FlopsNormalization,
    OnnxInt8Target,
    Similarity,
    TrainerPrecision,
    TransferBias,
)
from vtlab.core.errors import ConfigError
from vtlab.core.paths import INDEXES_FILE
from vtlab.runs.paths import check_paths


@dataclass(frozen=True)
class Rule:
    """What a value must be: `expected` completes "expected ..." in the message; `accepts` decides."""

    expected: str
    accepts: Callable[[Any], bool]


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return (_is_int(v) or isinstance(v, float)) and math.isfinite(v)


def integer(low: int, high: int | None = None, *, also: int | None = None, note: str = "") -> Rule:
    """An int in [low, high] (no bool, no float); `also`: one more value allowed outside it (`note` says what it
    means)."""
    words = f"an integer >= {low}" if high is None else f"an integer in [{low}, {high}]"
    if also is not None:
        words += f" (or {also}{f' for {note}' if note else ''})"
    elif note:
        words += f" ({note})"
    return Rule(words, lambda v: _is_int(v) and (low <= v and (high is None or v <= high) or v == also))


def number(
    low: float, high: float | None = None, *, low_open: bool = False, high_open: bool = False, note: str = ""
) -> Rule:
    """A finite int or float between `low` and `high` (each bound included unless open)."""
    if high is None:
        words = f"a finite number {'>' if low_open else '>='} {low:g}"
    else:
        words = f"a number in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    words += f" ({note})" if note else ""

    def accepts(v: Any) -> bool:
        if not _is_number(v):
            return False
        above = v > low if low_open else v >= low
        below = high is None or (v < high if high_open else v <= high)
        return above and below

    return Rule(words, accepts)


def one_of(*choices: Any) -> Rule:
    """Exactly one of `choices` (as given: 32 and '32' are different values)."""
    return Rule(
        f"one of {', '.join(dict.fromkeys(map(str, choices)))}",
        lambda v: any(type(v) is type(c) and v == c for c in choices),
    )


def either(first: Rule, second: Rule) -> Rule:
    return Rule(f"{first.expected} or {second.expected}", lambda v: first.accepts(v) or second.accepts(v))


def nullable(rule: Rule, note: str = "") -> Rule:
    return Rule(f"{rule.expected}, or null{f' for {note}' if note else ''}", lambda v: v is None or rule.accepts(v))


def existing(words: str, exists: Callable[[Path], bool]) -> Rule:
    """A path (relative to the working directory, `~` expanded) for which `exists` holds."""
    return Rule(words, lambda v: isinstance(v, str) and bool(v) and exists(Path(v).expanduser()))


FILE = existing("an existing file", Path.is_file)
DIRECTORY = existing("an existing directory", Path.is_dir)
FILE_OR_DIRECTORY = existing("an existing file or directory", Path.exists)


def _beir_layout(path: Path) -> bool:
    """The BEIR files are there (what kind of file each is, and what it holds, is the loader's to say)."""
    return all((path / f).exists() for f in ("corpus.jsonl", "queries.jsonl")) and any((path / "qrels").glob("*.tsv"))


# answered before torch loads, leaving no run directory: the loader would meet it minutes later, after the model loads
BEIR_DIRECTORY = existing("a BEIR directory (corpus.jsonl, queries.jsonl and qrels/<split>.tsv in it)", _beir_layout)
POSITIVE = integer(1)
COUNT = integer(0)
RATE = number(0, low_open=True)
MAX_STEPS = integer(1, also=-1, note="no limit")
MAX_LENGTH = integer(3, note="tokens, special ones included")  # the smallest the data module takes

# ---- choices, read where they are declared (never copied here: a new value there is accepted here with no edit)


def literal_values(declared: Any) -> tuple[Any, ...]:
    """The values a Literal type allows, through Unions and Optional (None left out: `nullable` says it), in order."""
    if get_origin(declared) is Literal:
        return get_args(declared)
    if get_origin(declared) is Union:
        return tuple(dict.fromkeys(v for member in get_args(declared) for v in literal_values(member)))
    return ()


def node_names(yaml_file: Path) -> tuple[str, ...]:
    """The top-level node names of a YAML file, in order (indexes.yaml's: eval.index's choices, as vtlab.index reads
    them)."""
    return tuple(str(name) for name in OmegaConf.load(yaml_file))


def usual_first(choices: tuple[Any, ...], usual: tuple[Any, ...]) -> tuple[Any, ...]:
    """`choices` with those of `usual` first (in its order) for the message; no value added or dropped."""
    return tuple(sorted(choices, key=lambda c: usual.index(c) if c in usual else len(usual)))


@functools.cache
def lightning_precisions() -> tuple[str | int, ...]:
    """trainer.precision's choices: vtlab's own values, then pytorch_lightning.Trainer's type of its `precision`
    parameter (Lightning is imported on first use only: a config mistake is answered before it loads)."""
    from pytorch_lightning import Trainer

    return usual_first(
        literal_values(TrainerPrecision) + literal_values(get_type_hints(Trainer.__init__)["precision"]),
        usual=("native", "32-true", "bf16-mixed"),
    )


def __getattr__(name: str) -> Any:
    if name == "LIGHTNING_PRECISIONS":
        return lightning_precisions()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class Deferred:
    """A Rule built on first use (its choices come from a library that is slow to import)."""

    make: Callable[[], Rule]

    @functools.cached_property
    def rule(self) -> Rule:
        return self.make()

    @property
    def expected(self) -> str:
        return self.rule.expected

    def accepts(self, value: Any) -> bool:
        return self.rule.accepts(value)


ENCODER_PRECISIONS: tuple[str, ...] = literal_values(EncoderPrecision)
ONNX_INT8_TARGETS: tuple[str, ...] = literal_values(OnnxInt8Target)
SIMILARITIES: tuple[str, ...] = literal_values(Similarity)
TRANSFER_BIASES: tuple[str, ...] = literal_values(TransferBias)
COLLAPSE_ACTIONS: tuple[str, ...] = literal_values(CollapseAction)
FLOPS_NORMALIZATIONS: tuple[str, ...] = literal_values(FlopsNormalization)
INDEXES: tuple[str, ...] = node_names(INDEXES_FILE)


# full key → rule. The keys users set on the command line and in experiment configs; what each means: conf/.
CHECKS: dict[str, Rule] = {
    "seed": integer(0, 2**32 - 1),
    # trainer: pytorch_lightning.Trainer's arguments
    "trainer.max_steps": MAX_STEPS,
    "trainer.max_epochs": nullable(MAX_STEPS),
    "trainer.val_check_interval": nullable(
        either(integer(1, note="batches"), number(0, 1, low_open=True, note="a fraction of an epoch"))
    ),
    "trainer.limit_val_batches": either(integer(0, note="batches"), number(0, 1, note="a fraction")),
    "trainer.check_val_every_n_epoch": nullable(POSITIVE),
    "trainer.log_every_n_steps": POSITIVE,
    "trainer.accumulate_grad_batches": POSITIVE,
    "trainer.num_nodes": POSITIVE,
    "trainer.gradient_clip_val": nullable(number(0)),
    "trainer.precision": Deferred(lambda: nullable(one_of(*lightning_precisions()))),
    # data: vtlab.data.datamodule.TripletDataModule and its sources
    "data.batch_size": POSITIVE,
    "data.eval_batch_size": POSITIVE,
    "data.num_negatives": COUNT,
    "data.query_max_length": MAX_LENGTH,
    "data.doc_max_length": MAX_LENGTH,
    "data.num_workers": COUNT,
    "data.train.path": FILE,
    "data.train.scores_path": nullable(FILE),
    "data.dev_path": nullable(BEIR_DIRECTORY),
    # model: the encoder and its training
    "model.encoder.query_max_length": MAX_LENGTH,
    "model.encoder.doc_max_length": MAX_LENGTH,
    "model.encoder.precision": one_of(*ENCODER_PRECISIONS),
    "model.encoder.idf_path": nullable(FILE),
    "model.optimizer.lr": RATE,
    "model.weight_decay": number(0),
    "model.scheduler.num_warmup_steps": COUNT,
    "model.val_top_k": POSITIVE,
    "model.cached_mini_batch": nullable(POSITIVE, note="one pass"),
    "loss.temperature": RATE,
    "regularizer.*.weight": number(0),
    "regularizer.*.warmup_steps": COUNT,
    "regularizer.*.delay_steps": COUNT,
    "regularizer.*.normalize": one_of(*FLOPS_NORMALIZATIONS),
    "callbacks.collapse_detector.action": one_of(*COLLAPSE_ACTIONS),
    # apc, mlm, vocab
    "apc.percentile": nullable(number(0, 100, low_open=True, high_open=True), note="no APC"),
    "apc.num_docs": POSITIVE,
    "apc.batch_size": POSITIVE,
    "apc.max_length": MAX_LENGTH,
    "mlm.steps": COUNT,
    "mlm.mlm_probability": number(0, 1, low_open=True, high_open=True),
    "mlm.max_length": MAX_LENGTH,
    "mlm.batch_size": POSITIVE,
    "mlm.accumulate_grad_batches": POSITIVE,
    "mlm.lr": RATE,
    "mlm.warmup_steps": COUNT,
    "vocab.corpus.path": nullable(FILE_OR_DIRECTORY),
    # vocabulary transfer
    "init.similarity": one_of(*SIMILARITIES),
    "transfer.bias": one_of(*TRANSFER_BIASES),
    # eval: one evaluation, or each of a suite's
    "eval.path": BEIR_DIRECTORY,
    "eval.top_k": POSITIVE,
    "eval.batch_size": POSITIVE,
    "eval.index": one_of(*INDEXES),
    "eval.evaluations.*.top_k": POSITIVE,
    "eval.evaluations.*.batch_size": POSITIVE,
    "eval.evaluations.*.index": one_of(*INDEXES),
    # export
    "run_dir": nullable(DIRECTORY, note="the model this config builds"),
    "export.onnx_int8": nullable(one_of(*ONNX_INT8_TARGETS), note="no int8 graphs"),
}


def values(cfg: DictConfig, key: str) -> Iterator[tuple[str, Any]]:
    """(full key, resolved value) of each node `key` names in `cfg`; absent and `???` nodes are skipped."""

    def walk(node: Any, parts: list[str], prefix: str) -> Iterator[tuple[str, Any]]:
        if not isinstance(node, DictConfig):
            return  # a null parent, or a scalar where the key expects a mapping
        head, rest = parts[0], parts[1:]
        for name in list(node.keys()) if head == "*" else [head]:
            if name not in node:  # absent, or `???`
                continue
            try:
                child = node[name]
            except InterpolationToMissingValueError:  # `${...}` of a `???`: whoever reads it names the key
                continue
            full = f"{prefix}.{name}" if prefix else str(name)
            if rest:
                yield from walk(child, rest, full)
            else:
                yield full, child

    yield from walk(cfg, key.split("."), "")


def check_config(cfg: DictConfig, checks: dict[str, Rule] = CHECKS) -> None:
    """ConfigError for a GPU count that does not divide the paper's global batches (before a value derived from them
    is resolved), then for the first value in `cfg` that its rule in `checks` refuses, then for a name or an output
    path that would leave its root or replace an input (vtlab.runs.paths)."""
    check_paper_batches(cfg)
    for key, rule in checks.items():
        for full, value in values(cfg, key):
            if not rule.accepts(value):
                shown = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
                raise ConfigError(f"{full}={shown!r}: expected {rule.expected}", key=full)
    check_paths(cfg)


# ---- the paper's global batches on any GPU count (conf/experiment/paper/base.yaml, adaptation.yaml)

# (the global batch, the per-device batch it is made of) of the paper rows; a row without MLM has no paper.mlm_*
PAPER_BATCHES = {"paper.global_batch": None, "paper.mlm_global_batch": "mlm.batch_size"}


def device_count(devices: Any) -> int | None:
    """The devices a Trainer's `devices` asks for when it names them: a count, or a list of ids; None for "auto", -1
    or an id string (Lightning counts those itself)."""
    if _is_int(devices):
        return devices if devices >= 0 else None
    if isinstance(devices, (list, ListConfig)):
        return len(devices)
    return None


def check_paper_batches(cfg: DictConfig) -> None:
    """A paper row's global batches (paper.global_batch queries, paper.mlm_global_batch spans) are split over
    trainer.devices × trainer.num_nodes by interpolation (data.batch_size, mlm.accumulate_grad_batches): one line
    naming the counts that work when the row's GPU count leaves a remainder."""
    totals = {key: OmegaConf.select(cfg, key) for key in PAPER_BATCHES}
    if totals["paper.global_batch"] is None:
        return
    devices, nodes = OmegaConf.select(cfg, "trainer.devices"), OmegaConf.select(cfg, "trainer.num_nodes", default=1)
    if device_count(devices) is None or isinstance(devices, (list, ListConfig)) or not _is_int(nodes) or nodes < 1:
        raise ConfigError(
            f"trainer.devices={devices!r} × trainer.num_nodes={nodes!r}: the paper's global batch is split over a "
            "number of GPUs; set it with ++paper.gpus=N (and hydra.launcher.gpus_per_node=N under SLURM)",
            key="paper.gpus",
        )
    parts: dict[str, tuple[int, int]] = {}  # key → (global batch, per-device batch)
    for key, per in PAPER_BATCHES.items():
        if totals[key] is not None:
            parts[key] = (int(totals[key]), int(OmegaConf.select(cfg, per)) if per else 1)

    def splits(gpus: int) -> bool:
        return gpus >= 1 and all(total % (per * gpus * nodes) == 0 for total, per in parts.values())

    if splits(devices):
        return
    counts = ", ".join(str(n) for n in range(1, parts["paper.global_batch"][0] + 1) if splits(n))
    batches = "; ".join(
        f"{key}={total}" + (f" of {PAPER_BATCHES[key]}={per} per GPU" if PAPER_BATCHES[key] else "")
        for key, (total, per) in parts.items()
    )
    raise ConfigError(
        f"paper.gpus={OmegaConf.select(cfg, 'paper.gpus')} (trainer.devices={devices} × trainer.num_nodes={nodes}) "
        f"does not divide the paper's global batches ({batches}); use ++paper.gpus=N "
        f"hydra.launcher.gpus_per_node=N with N one of {counts or 'none: change the per-GPU batch'}",
        key="paper.gpus",
    )
