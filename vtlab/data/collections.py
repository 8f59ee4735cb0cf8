"""Retrieval test collections in BEIR layout (corpus, queries, qrels)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Collection:
    """An IR test collection held in memory.

    corpus: doc_id -> text (title and body already joined with a space when the source has a title)
    queries: query_id -> text (only queries that have at least one judged document)
    qrels: query_id -> {doc_id: relevance grade (int)}; a grade > 0 is relevant. Only a query with a relevant document
        is measured (`judged_queries`): one whose documents are all graded 0 can score nothing but 0.
    source: the settings it was built from ({"path": ..., "split": ...} for a BEIR directory, {"dev_size": ...,
        "seed": ...} for a BoolQ dev split), named by errors about it (vtlab.data.overlap); empty when unknown.
    """

    name: str
    corpus: dict[str, str]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]] = field(default_factory=dict)
    source: dict[str, Any] = field(default_factory=dict, compare=False)


def judged_queries(qrels: dict[str, dict[str, int]]) -> list[str]:
    """The query ids with at least one positive grade: the queries a retrieval measure can score (ir_measures scores a
    query whose judgments are all 0 as 0 on every measure, which would only pull the means toward 0)."""
    return [q for q, rels in qrels.items() if any(g > 0 for g in rels.values())]


# ---------------------------------------------------------------------------------------------------------
# Loaders. Kept below the dataclass so importing Collection stays cheap (datasets is imported lazily).

import gzip  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from pathlib import Path  # noqa: E402

from vtlab.core import hub  # noqa: E402
from vtlab.core.atomic import atomic_write_text  # noqa: E402
from vtlab.core.errors import AssetError, DataError  # noqa: E402
from vtlab.data.text_files import iter_lines, json_line  # noqa: E402

log = logging.getLogger(__name__)


def _corpus_records(
    path: Path, ids: Callable[[dict[str, Any], str], str] | None = None
) -> Iterator[tuple[str, str, str]]:
    """("path:lineno", doc id, text) of a BEIR corpus.jsonl, title joined to the text with a space; `ids` reads the
    doc id (default `_id`)."""
    read_id = ids or _id
    for where, line in iter_lines(path):
        obj = _json_obj(where, line)
        yield (
            where,
            read_id(obj, where),
            _join(_str_field(obj, "title", where, False), _str_field(obj, "text", where, True)),
        )


def iter_corpus_jsonl(path: str | os.PathLike[str]) -> Iterator[tuple[str, str]]:
    """(doc id, text) of a BEIR corpus.jsonl, read line by line (for corpora too large to hold)."""
    for _, did, text in _corpus_records(Path(path)):
        yield did, text


def _json_obj(where: str, line: str) -> dict[str, Any]:
    obj = json_line(where, line)
    if not isinstance(obj, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    return obj


def _id(obj: dict[str, Any], where: str) -> str:
    v = obj.get("_id")
    # Some BEIR dumps store numeric ids; they are compared as strings everywhere else.
    if isinstance(v, int) and not isinstance(v, bool):
        v = str(v)
    if not isinstance(v, str) or not v:
        raise DataError(f"{where}: field '_id' must be a non-empty string, got {v!r}")
    return v


def _str_field(obj: dict[str, Any], name: str, where: str, required: bool) -> str:
    v = obj.get(name)
    if v is None and not required:
        return ""
    if v is None:
        raise DataError(f"{where}: missing field '{name}' (expected a string)")
    if not isinstance(v, str):
        raise DataError(f"{where}: field '{name}' must be a string, got {type(v).__name__}")
    return v


def _join(title: str, text: str) -> str:
    return f"{title} {text}" if title.strip() else text


_WHITESPACE = re.compile(r"\s")


def _run_id(obj: dict[str, Any], where: str) -> str:
    """An `_id` that can stand in a TREC run line, whose fields are separated by whitespace."""
    v = _id(obj, where)
    if _WHITESPACE.search(v):
        raise DataError(
            f"{where}: field '_id'={v!r} contains whitespace: expected an id without spaces, tabs or "
            "newlines (a TREC run line separates its fields by whitespace)"
        )
    return v


class _Records:
    """The records of one file by key (a doc id, a query id, a judged (query, doc) pair). The same key again with
    another value is an error naming both lines; with the same value it is a repeat, counted and reported once."""

    def __init__(self, what: str, value: str) -> None:
        self.what, self.value = what, value  # e.g. "doc id", "text"
        self.items: dict[Any, Any] = {}
        self._first: dict[Any, str] = {}
        self.repeats = 0

    def add(self, key: Any, value: Any, where: str, shown: str) -> None:
        if key not in self.items:
            self.items[key], self._first[key] = value, where
        elif self.items[key] == value:
            self.repeats += 1
        else:
            raise DataError(
                f"{where}: duplicate {self.what} {shown} with another {self.value} than at line "
                f"{self._first[key].rsplit(':', 1)[1]} ({self.items[key]!r} there, {value!r} here): expected each "
                f"{self.what} once"
            )

    def warn(self, path: Path) -> None:
        if self.repeats:
            log.warning("%s: %d line(s) repeat an earlier %s identically: ignored", path, self.repeats, self.what)


MAX_GRADE = 10**6  # a larger qrels grade is no relevance grade; trec_eval would take 8 bytes per level up to it


def _grade(score: str) -> int | None:
    """A qrels grade: an integer, written as one or as an integral float ("2.0"); else None."""
    try:
        return int(float(score)) if float(score).is_integer() else None
    except ValueError:
        return None


def load_beir(path: str, split: str = "test") -> Collection:
    """Load a BEIR-layout directory: corpus.jsonl, queries.jsonl, qrels/<split>.tsv.

    Only queries with at least one qrels line are kept. Titles are joined to the text with a space.
    """
    root = Path(path)
    qrels_path = root / "qrels" / f"{split}.tsv"
    for p in (root / "corpus.jsonl", root / "queries.jsonl"):
        if not p.is_file():
            raise DataError(
                f"{p}: missing BEIR file (expected corpus.jsonl, queries.jsonl and qrels/{split}.tsv under {root})"
            )
    if not qrels_path.is_file():
        have = sorted(p.stem for p in (root / "qrels").glob("*.tsv")) if (root / "qrels").is_dir() else []
        raise DataError(f"{qrels_path}: missing qrels for split '{split}' (available splits: {have or 'none'})")

    docs = _Records("doc id", "text")
    for where, did, text in _corpus_records(root / "corpus.jsonl", ids=_run_id):
        docs.add(did, text, where, f"'_id'={did!r}")
    docs.warn(root / "corpus.jsonl")
    corpus: dict[str, str] = docs.items

    queries_read = _Records("query id", "text")
    for where, line in iter_lines(root / "queries.jsonl"):
        obj = _json_obj(where, line)
        qid = _run_id(obj, where)
        text = _str_field(obj, "text", where, True)
        if not text.strip():
            raise DataError(f"{where}: field 'text' of query {qid!r} is an empty string (expected the query text)")
        queries_read.add(qid, text, where, f"'_id'={qid!r}")
    queries_read.warn(root / "queries.jsonl")
    all_queries: dict[str, str] = queries_read.items

    judged = _Records("judgment", "grade")
    for n, (where, line) in enumerate(iter_lines(qrels_path)):
        cols = line.split("\t")
        if n == 0 and cols[0].strip() == "query-id" and (len(cols) != 3 or _grade(cols[2]) is None):
            continue  # header (a judgment of a query called 'query-id' has an integer grade: it is kept)
        if len(cols) != 3:
            raise DataError(f"{where}: expected 3 tab-separated columns 'query-id corpus-id score', got {len(cols)}")
        qid, did, score = (c.strip() for c in cols)
        grade = _grade(score)
        if grade is None:
            raise DataError(f"{where}: column 'score' must be an integer relevance grade, got {score!r}")
        if abs(grade) > MAX_GRADE:  # the evaluator (trec_eval) allocates a slot per grade level up to the largest
            raise DataError(
                f"{where}: column 'score' {score!r} is out of range: expected a relevance grade such as 0-3 "
                f"(at most {MAX_GRADE:,} either way)"
            )
        if qid not in all_queries:
            raise DataError(f"{where}: 'query-id' {qid!r} is not in queries.jsonl")
        if did not in corpus:
            raise DataError(f"{where}: 'corpus-id' {did!r} is not in corpus.jsonl")
        judged.add((qid, did), grade, where, f"of ({qid!r}, {did!r})")
    judged.warn(qrels_path)
    qrels: dict[str, dict[str, int]] = {}
    for (qid, did), grade in judged.items.items():
        qrels.setdefault(qid, {})[did] = grade

    if not qrels:
        raise DataError(
            f"{qrels_path}: no judgments (expected lines 'query-id<TAB>corpus-id<TAB>score' for the "
            f"{len(all_queries)} queries of queries.jsonl)"
        )
    if not judged_queries(qrels):
        raise DataError(
            f"{qrels_path}: no query has a positive grade (all {len(judged.items)} judged (query, doc) pairs "
            "have a 'score' of 0 or less), so no measure can score anything: expected at least "
            "one relevant document (score >= 1)"
        )
    queries = {qid: t for qid, t in all_queries.items() if qid in qrels}
    if len(queries) < len(all_queries):
        # BEIR keeps one queries.jsonl for all splits: queries judged only in another split are expected here
        log.info(
            "%s: %d of %d queries have no judgments in %s and are left out",
            root.name,
            len(all_queries) - len(queries),
            len(all_queries),
            qrels_path.name,
        )
    return Collection(
        name=root.name, corpus=corpus, queries=queries, qrels=qrels, source={"path": path, "split": split}
    )


def save_beir(collection: Collection, path: str | os.PathLike[str], split: str = "test") -> Path:
    """Write `collection` in BEIR layout under `path` (each file atomically). Returns the directory."""
    root = Path(path)
    atomic_write_text(
        root / "corpus.jsonl",
        (
            json.dumps({"_id": d, "title": "", "text": t}, ensure_ascii=False) + "\n"
            for d, t in collection.corpus.items()
        ),
    )
    atomic_write_text(
        root / "queries.jsonl",
        (json.dumps({"_id": q, "text": t}, ensure_ascii=False) + "\n" for q, t in collection.queries.items()),
    )
    for qid, rel in collection.qrels.items():
        for did in rel:
            # Tabs/newlines in ids would corrupt the TSV silently; refuse them at write time.
            if any(c in s for s in (qid, did) for c in "\t\n\r"):
                raise DataError(f"save_beir: id {qid!r}/{did!r} contains a tab or newline")
    atomic_write_text(
        root / "qrels" / f"{split}.tsv",
        ["query-id\tcorpus-id\tscore\n"]
        + [f"{q}\t{d}\t{g}\n" for q, rel in collection.qrels.items() for d, g in rel.items()],
    )
    return root


# ---- Hugging Face hub collections (network needed) ----------------------------------------------------------


def _hf_load(repo: str, config: str | None, split: str) -> Any:
    """A hub dataset through vtlab.core.hub, any hub/offline failure turned into one-line AssetError naming the
    dataset."""
    try:
        return hub.load_dataset(repo, config, split=split)
    except hub.HubUnavailable as e:
        hint = (
            " (HF offline mode is on and it is not cached)"
            if e.flagged
            else " (needs network access to the Hugging Face hub or a cached copy)"
        )
        raise AssetError(
            f"cannot load HF dataset '{repo}' config={config!r} split={split!r}{hint}: {e.reason}"
        ) from None


def _from_hf(name: str, corpus_ds: Any, queries_ds: Any, qrels_ds: Any) -> Collection:
    corpus = {str(r["_id"]): _join(r.get("title") or "", r["text"]) for r in corpus_ds}
    qrels: dict[str, dict[str, int]] = {}
    for r in qrels_ds:
        qrels.setdefault(str(r["query-id"]), {})[str(r["corpus-id"])] = int(r["score"])
    all_q = {str(r["_id"]): r["text"] for r in queries_ds}
    missing = [q for q in qrels if q not in all_q]
    if missing:
        raise DataError(f"{name}: {len(missing)} qrels query ids are not in the queries (e.g. {missing[0]!r})")
    queries = {q: all_q[q] for q in qrels}
    # Qrels pointing outside the corpus are dropped with the pair (some BEIR sets have a few); warn-free by design.
    qrels = {q: {d: g for d, g in rel.items() if d in corpus} for q, rel in qrels.items()}
    return Collection(name=name, corpus=corpus, queries=queries, qrels=qrels)


def load_hf_beir(name: str, split: str = "test") -> Collection:
    """BEIR dataset from the hub: `BeIR/<name>` (configs corpus, queries) + `BeIR/<name>-qrels` (split)."""
    repo = f"BeIR/{name}"
    corpus = _hf_load(repo, "corpus", "corpus")
    queries = _hf_load(repo, "queries", "queries")
    qrels = _hf_load(f"{repo}-qrels", None, split)
    return _from_hf(name, corpus, queries, qrels)


def load_mteb(name: str, split: str = "test") -> Collection:
    """MTEB retrieval dataset from the hub: `mteb/<name>` configs corpus, queries and default (qrels per split)."""
    repo = f"mteb/{name}"
    corpus = _hf_load(repo, "corpus", "corpus")
    queries = _hf_load(repo, "queries", "queries")
    qrels = _hf_load(repo, "default", split)
    return _from_hf(name, corpus, queries, qrels)


# The loaders that read the Hugging Face hub: what they load may be gigabytes to download, so a preflight does not
# load them ahead of the run (vtlab.data.preflight); their errors come when the collection is used.
HUB_LOADERS: frozenset[Callable[..., Collection]] = frozenset({load_hf_beir, load_mteb})


def subsampled(
    load: Any,
    max_docs: int | None = None,
    max_queries: int | None = None,
    seed: int = 0,
    distractors_per_gold: float = 0.0,
) -> Collection:
    """`load()`'s collection cut to a seeded sample of `max_queries` queries and `max_docs` documents (None: all):
    every judged document of a kept query stays, the other documents are a seeded random sample. Every system
    evaluated on it sees the same collection, so comparisons between them hold (absolute numbers rise with fewer
    distractors). `distractors_per_gold`: keep at least this many unjudged documents per judged one within `max_docs`
    — queries are dropped (the last of the seeded sample first) until their judged documents leave that room, so a
    sample is never mostly its own answers."""
    coll = load() if callable(load) else load
    for key, value in (("max_docs", max_docs), ("max_queries", max_queries)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise DataError(f"subsampled: {key}={value!r} must be a positive integer or null")
    if (
        isinstance(distractors_per_gold, bool)
        or not isinstance(distractors_per_gold, (int, float))
        or not 0 <= distractors_per_gold < float("inf")
    ):
        raise DataError(f"subsampled: distractors_per_gold={distractors_per_gold!r} must be a number >= 0")
    rng = random.Random(f"subsample-{coll.name}-{seed}")
    queries = list(coll.queries)
    if max_queries is not None and max_queries < len(queries):
        queries = [queries[i] for i in sorted(rng.sample(range(len(queries)), max_queries))]
    if max_docs is not None and distractors_per_gold > 0:
        queries = _leave_room_for_distractors(coll, queries, max_docs / (1 + distractors_per_gold), rng)
    qrels = {q: coll.qrels[q] for q in queries if q in coll.qrels}
    judged = _judged(coll, qrels)
    judged_set = set(judged)
    others = [d for d in coll.corpus if d not in judged_set]
    if max_docs is not None and max(0, max_docs - len(judged)) < len(others):
        others = [others[i] for i in sorted(rng.sample(range(len(others)), max(0, max_docs - len(judged))))]
    keep = judged_set | set(others)
    corpus = {d: t for d, t in coll.corpus.items() if d in keep}
    return Collection(name=coll.name, corpus=corpus, queries={q: coll.queries[q] for q in queries}, qrels=qrels)


def _judged(coll: Collection, qrels: dict[str, dict[str, int]]) -> list[str]:
    """The relevant documents of `qrels` that the corpus holds, in first-seen order."""
    return [d for d in dict.fromkeys(d for rel in qrels.values() for d, g in rel.items() if g > 0) if d in coll.corpus]


def _leave_room_for_distractors(
    coll: Collection, queries: list[str], max_judged: float, rng: random.Random
) -> list[str]:
    """The longest prefix of a seeded order of `queries` whose judged documents number at most `max_judged`, in the
    original order."""
    order = list(queries)
    rng.shuffle(order)
    seen: set[str] = set()
    kept: set[str] = set()
    for q in order:
        new = {d for d, g in coll.qrels.get(q, {}).items() if g > 0 and d in coll.corpus} - seen
        if len(seen) + len(new) > max_judged:
            break
        seen |= new
        kept.add(q)
    return [q for q in queries if q in kept]


def iter_oe_eval_docs(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """("path:lineno", the row's `doc` object) for each non-blank line of an OE-eval requests.jsonl(.gz)."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            for lineno, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                where = f"{path}:{lineno}"
                try:
                    doc = json.loads(line)["doc"]
                except (json.JSONDecodeError, KeyError, TypeError) as e:
                    raise DataError(
                        f"{where}: expected a JSON object with a 'doc' object ({type(e).__name__}: {e})"
                    ) from None
                if not isinstance(doc, dict):
                    raise DataError(f"{where}: field 'doc' must be an object, got {type(doc).__name__}")
                yield where, doc
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: cannot read OE-eval requests ({type(e).__name__}: {e})") from None


def bad_trec_field(value: str) -> bool:
    """Whether an id or tag cannot be a TREC run field: empty, or holding whitespace (the format's separator)."""
    return not value or _WHITESPACE.search(value) is not None


def check_collection(collection: Collection, trec_ids: bool) -> list[str]:
    """The judged query ids of a collection evaluate() can measure, checked before any encoding (a collection from
    any loader; load_beir refuses the same problems with file:line). `trec_ids`: the ids go to run.trec, so each
    must be non-empty and free of whitespace."""
    name = collection.name
    if not collection.queries or not collection.corpus:
        raise DataError(f"collection {name!r} has {len(collection.queries)} queries and {len(collection.corpus)} docs")
    judged = judged_queries(collection.qrels)
    if not judged:
        raise DataError(
            f"collection {name!r}: no query has a positive relevance grade in its qrels "
            f"({len(collection.qrels)} queries in them, every grade 0 or less): nothing can be measured"
        )
    if trec_ids:
        for what, ids in (("query id", collection.queries), ("document id", collection.corpus)):
            bad = next((i for i in ids if bad_trec_field(str(i))), None)
            if bad is not None:
                raise DataError(
                    f"collection {name!r}: {what} {bad!r} is empty or contains whitespace: expected ids "
                    "without spaces, tabs or newlines (run.trec separates its fields by whitespace)"
                )
    if len(judged) < len(collection.qrels):
        log.warning(
            "%s: %d of the %d queries in the qrels have no positive grade; they are left out of the measures",
            name,
            len(collection.qrels) - len(judged),
            len(collection.qrels),
        )
    return judged
