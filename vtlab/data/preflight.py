"""Checks of the run's data before the expensive part, called by the run's admission (vtlab.stages.admission).

- The evaluation collection(s), when evaluation comes after another stage (stage=all: MLM, fine-tuning, then
  evaluation): loaded and checked now as the evaluation would (files exist and parse, qrels have a positive grade, doc
  ids are valid: vtlab.data.collections.load_beir, vtlab.evaluation), so a broken eval directory fails in seconds with
  exit 2 instead of after training. Collections from the Hugging Face hub (vtlab.data.collections.HUB_LOADERS) are not
  loaded ahead: that can mean gigabytes; they fail when evaluated.
- When the run trains: a dev set given as data.dev_path parses, and shares no text with the evaluation sets. (The
  files the config names, and a resume's inputs, are checked by the run's admission: vtlab.stages.admission.)

What needs the training set itself (the train/dev overlap check, vtlab.data.overlap) runs where the two meet, in
TripletDataModule.setup: building the training set can be the expensive part.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hydra.utils import get_method, instantiate
from omegaconf import DictConfig, OmegaConf

from vtlab.data.collections import HUB_LOADERS, Collection, check_collection, load_beir
from vtlab.data.overlap import normalize

# the evaluation's own check of a loaded collection: the same words now as after training
from vtlab.runs.directory import TRAINING_STEP

log = logging.getLogger("vtlab")

# the stages, named (not imported: vtlab.stages sits above this layer)
EVALUATE_STEP = "vtlab.stages.evaluate.run"


def preflight(cfg: DictConfig) -> None:
    """The checks this run's stages call for (the module docstring): DataError / RunDirError, one line each."""
    steps = [
        str(s.get("_target_"))
        for s in OmegaConf.select(cfg, "stage.steps", default=None) or []
        if isinstance(s, DictConfig)
    ]
    evaluates_late, trains = EVALUATE_STEP in steps[1:], TRAINING_STEP in steps
    evaluated = check_eval(cfg) if evaluates_late else []  # evaluation after another stage: checked before it runs
    warn_vocab_on_eval_corpus(cfg)
    if trains:
        dev = check_dev_path(cfg)
        if dev is not None:
            warn_dev_overlap(dev, evaluated, str(cfg.data.dev_path))


def _targets(node: Any) -> Iterator[str]:
    """Every `_target_` in a plain (unresolved) config tree."""
    if isinstance(node, dict):
        if isinstance(node.get("_target_"), str):
            yield node["_target_"]
        for value in node.values():
            yield from _targets(value)
    elif isinstance(node, list):
        for value in node:
            yield from _targets(value)


def _located(target: str) -> Any:
    try:
        return get_method(target)
    except Exception:  # noqa: BLE001 - an unknown target fails when instantiated, with Hydra's message
        return None


def _reads_hub(node: DictConfig) -> bool:
    targets = _targets(OmegaConf.to_container(node, resolve=False))  # unresolved: a `???` is not read here
    return any(_located(t) in HUB_LOADERS for t in targets)


def eval_members(cfg: DictConfig) -> list[tuple[str, DictConfig]]:
    """(config key, node) of each evaluation: the eval itself, or each member of a suite (eval.evaluations.*)."""
    ev = cfg.get("eval")
    if not isinstance(ev, DictConfig):
        return []
    members = ev.get("evaluations")
    if isinstance(members, DictConfig):
        return [(f"eval.evaluations.{name}", node) for name, node in members.items() if isinstance(node, DictConfig)]
    return [("eval", ev)]


def check_eval(cfg: DictConfig) -> list[Collection]:
    """Load and check each evaluation collection that is not on the hub (DataError / Hydra's error naming the key);
    returns them."""
    out = []
    for key, node in eval_members(cfg):
        if _reads_hub(node):
            log.info("%s reads the Hugging Face hub: checked when evaluated, not ahead of the run", key)
            continue
        collection = getattr(instantiate(node), "collection", None)  # RetrievalEvaluation loads it on first use
        if collection is not None:
            check_collection(collection, trec_ids=True)
            out.append(collection)
            log.info(
                "%s: %s checked before the run (%d queries over %d documents)",
                key,
                collection.name,
                len(collection.queries),
                len(collection.corpus),
            )
    return out


def check_dev_path(cfg: DictConfig) -> Collection | None:
    """A dev set given as data.dev_path parses (the data module reads it again after the model loads); returns it."""
    dev_path = OmegaConf.select(cfg, "data.dev_path", default=None)
    if not dev_path:
        return None
    return load_beir(
        str(Path(str(dev_path)).expanduser()), split=str(OmegaConf.select(cfg, "data.dev_split", default="dev"))
    )


def _dir_of(path: Any) -> Path | None:
    """The BEIR directory a path names (the directory itself, or the one holding its corpus.jsonl), resolved."""
    if not path:
        return None
    p = Path(str(path)).expanduser()
    return (p.parent if p.name.startswith("corpus.jsonl") else p).resolve()


def warn_vocab_on_eval_corpus(cfg: DictConfig) -> None:
    """A vocabulary learned from the collection the run is evaluated on (vocab.corpus.path = eval.path, as for a
    domain WordPiece on your own data) is transductive: legitimate, but to be said when the result is reported."""
    corpus = _dir_of(OmegaConf.select(cfg, "vocab.corpus.path", default=None))
    evaluated = _dir_of(OmegaConf.select(cfg, "eval.path", default=None))
    if corpus is not None and corpus == evaluated:
        log.warning(
            "vocab.corpus.path and eval.path are the same collection (%s): the vocabulary is learned from the passages "
            "the run is evaluated on; report it as such, or point vocab.corpus.path at other texts of the domain",
            corpus,
        )


def warn_dev_overlap(dev: Collection, evaluated: list[Collection], dev_path: str) -> None:
    """One warning per evaluation set that shares passages or questions with the dev set (one BEIR directory with a
    dev and a test qrels file is a common layout): what is chosen on dev has then seen the evaluation's texts."""
    dev_docs, dev_queries = set(map(normalize, dev.corpus.values())), set(map(normalize, dev.queries.values()))
    for coll in evaluated:
        docs = sum(normalize(t) in dev_docs for t in set(coll.corpus.values()))
        queries = sum(normalize(t) in dev_queries for t in set(coll.queries.values()))
        if docs or queries:
            log.warning(
                "data.dev_path=%s shares %d of the evaluation set %s's %d passages and %d of its %d questions: "
                "checkpoints chosen on dev see the evaluation's texts; give dev its own corpus for a clean evaluation",
                dev_path,
                docs,
                coll.name,
                len(set(coll.corpus.values())),
                queries,
                len(set(coll.queries.values())),
            )
