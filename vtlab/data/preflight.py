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
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from hydra.utils import get_method, instantiate
from omegaconf import DictConfig, OmegaConf

from vtlab.data.collections import HUB_LOADERS, Collection, check_collection, load_beir
from vtlab.data.overlap import normalize
from vtlab.runs.plan import RunPlan

log = logging.getLogger("vtlab")

# the stages, named (not imported: vtlab.stages sits above this layer)
EVALUATE_STEP = "vtlab.stages.evaluate.run"


def preflight(plan: RunPlan) -> None:
    """The checks this run's stages call for (the module docstring): DataError / RunDirError, one line each."""
    evaluates_late = EVALUATE_STEP in plan.steps[1:]
    evaluated = check_eval(plan.evaluations) if evaluates_late else []  # evaluation after another stage: checked now
    warn_vocab_on_eval_corpus(plan.vocab_corpus, plan.eval_path)
    if plan.trains:
        dev = check_dev_path(plan.dev_path, plan.dev_split)
        if dev is not None:
            warn_dev_overlap(dev, evaluated, str(plan.dev_path))


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


def check_eval(evaluations: Iterable[tuple[str, DictConfig]]) -> list[Collection]:
    """Load and check each evaluation collection that is not on the hub (DataError / Hydra's error naming the key);
    `evaluations`: (config key, node) of each (a RunPlan's). Returns them."""
    out = []
    for key, node in evaluations:
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


def check_dev_path(dev_path: Any, split: str = "dev") -> Collection | None:
    """A dev set given as data.dev_path parses (the data module reads it again after the model loads); returns it."""
    if not dev_path:
        return None
    return load_beir(str(Path(str(dev_path)).expanduser()), split=split)


def _dir_of(path: Any) -> Path | None:
    """The BEIR directory a path names (the directory itself, or the one holding its corpus.jsonl), resolved."""
    if not path:
        return None
    p = Path(str(path)).expanduser()
    return (p.parent if p.name.startswith("corpus.jsonl") else p).resolve()


def warn_vocab_on_eval_corpus(corpus_path: Any, eval_path: Any) -> None:
    """A vocabulary learned from the collection the run is evaluated on (vocab.corpus.path = eval.path, as for a
    domain WordPiece on your own data) is transductive: legitimate, but to be said when the result is reported."""
    corpus, evaluated = _dir_of(corpus_path), _dir_of(eval_path)
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
