"""Fuzzing with oracles (issue 50 item 3): a model of each user-input reader's content, files rendered from it, and
checks that compare what the reader returns with what the model says it must return.

- `READERS`: one `Reader` per file format a user hands vtlab (a BEIR collection and a dev set, triplets with inline
  or separate teacher scores, a vocabulary corpus as .txt / .jsonl / a directory of them / a BEIR directory, a
  `reuse_runs` target's status.json, a run's metrics.json). A reader has a hypothesis strategy of valid inputs
  (`FileModel`s: one per file, each line a record), the call that reads them, a view of its result as plain data,
  and `expected`: what a correct reader returns for those files (the documented rules, applied to valid records).
- `check_round_trip`: write, read, compare with `expected` (ids stay strings, every record kept, grades as
  written); nothing is written where the inputs are.
- `MUTATIONS`: each makes one invalid (or documented-as-accepted) variant of a valid input by one named change
  (bad JSON on line k, a truncated last line, a missing field, a wrong type, a key twice in one object, a duplicate
  id with other content, a conflicting grade, a BOM, UTF-16 or Latin-1 bytes, an empty file, nesting too deep,
  a number too long) and says what must happen: `Refused(needles)` (one `vtlab: error:` line naming the file and,
  where there is one, the line or the field) or `Accepted()` (the content `expected` computes for the variant).
- `check_refused`: the one-line error, naming what it must.
- `replace_file`: a directory, a named pipe, a link (inside or outside), a hard link, a dangling link or an
  unreadable file in place of an input file; `call_bounded` reads with a time limit (a pipe must never hang a read).

Everything is seeded (`fuzz_settings`, `seeded`): the same examples on every machine."""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import re
import shutil
import stat
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from vtlab.core.errors import one_line, user_error
from vtlab.core.integrity import sha256_file

# ---- settings -------------------------------------------------------------------------------------------------------


def fuzz_settings(max_examples: int, shrink: bool = True) -> settings:
    """Bounded, no example database (nothing remembered between runs), one failure reported (the shrunk one; not
    shrunk with `shrink=False`, where each failing example costs a time limit)."""
    return settings(
        max_examples=max_examples,
        phases=[Phase.explicit, Phase.reuse, Phase.generate, *([Phase.shrink] if shrink else [])],
        deadline=None,
        database=None,
        report_multiple_bugs=False,
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.filter_too_much,
            HealthCheck.large_base_example,
        ],
    )


def seeded(name: str) -> Callable:
    """hypothesis' seed, from a stable name (the test id): each test its own examples, the same on every run."""
    return seed(int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big"))


# ---- content: ids, texts -----------------------------------------------------------------------------------------
_WS = re.compile(r"\s")
# ids that look like numbers, JSON literals, TREC fields, the qrels header; quotes and escapes; other scripts
TRICKY_IDS = (
    "007", "7", "0", "-1", "1e3", "1.0", "0x1F", "NaN", "true", "null", "query-id", "corpus-id", "Q0",
    '"', "'", "a\\b", "ß", "日本", "😀", "٣",
)  # fmt: skip
_ID_CHARS = st.characters(codec="utf-8", exclude_categories=("Cs",), exclude_characters="\ufeff").filter(
    lambda c: not _WS.match(c)
)
ids = st.sampled_from(TRICKY_IDS) | st.text(_ID_CHARS, min_size=1, max_size=8)
# texts: any character (a BOM is one only before the first line); tabs, quotes, JSON-looking text, separators
_TEXT_CHARS = st.characters(codec="utf-8", exclude_categories=("Cs",), exclude_characters="\ufeff")
TRICKY_TEXTS = (
    'say "hi"', "tab\there", "back\\slash", "ünïcödé ✓", "日本語のテキスト", "emoji 😀", "line\u2028sep",
    "nul\x00byte", '{"_id": "d1"}', "  padded  ", "007",
)  # fmt: skip
texts = st.sampled_from(TRICKY_TEXTS) | st.text(_TEXT_CHARS, max_size=24)
nonblank = texts.filter(lambda t: t.strip() != "")
# a line of a .txt file: no newline in it, not ending in a carriage return (a CRLF's \r is not part of the text)
# and no NUL (a NUL in a .txt line means UTF-16 or binary bytes: refused)
txt_lines = nonblank.filter(lambda t: "\n" not in t and "\0" not in t and not t.endswith("\r"))
finite = st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(10**6), 10**6)


def _canonical_int(text: str) -> bool:
    return re.fullmatch(r"-?[1-9][0-9]{0,15}|0", text) is not None


def id_value(draw: Callable, text: str) -> str | int:
    """How an id is written in JSON: as the string, or (BEIR dumps do this, and vtlab reads it as its decimal string)
    as a number when it is one."""
    return int(text) if _canonical_int(text) and draw(st.booleans()) else text


# ---- files as records -----------------------------------------------------------------------------------------------
@dataclass
class Raw:
    """A line written as it is: a header, or what a mutation made of a record."""

    text: str


@dataclass
class FileModel:
    """One input file: `lines`, one per physical line: a dict (a JSON object line), a list (a JSON list line in
    jsonl; the columns of a TSV line), a str (a text line of a .txt file), Raw, or None (a blank line).

    kind: "jsonl", "tsv", "txt" or "json" (a whole-file JSON document: lines holds one dict). `data` overrides the
    rendering (a mutation's bytes: an encoding, a BOM)."""

    kind: str
    lines: list[Any]
    eol: str = "\n"
    final_eol: bool = True
    ascii: bool = False
    blank: str = ""
    indent: int | None = None
    data: bytes | None = None

    def render(self, line: Any) -> str:
        if line is None:
            return self.blank
        if isinstance(line, Raw):
            return line.text
        if self.kind == "tsv":
            return "\t".join(line)
        if self.kind == "txt":
            return line
        return json.dumps(line, ensure_ascii=self.ascii, indent=self.indent if self.kind == "json" else None)

    def text(self) -> str:
        body = self.eol.join(self.render(line) for line in self.lines)
        return body + (self.eol if self.final_eol and self.lines else "")

    def bytes(self) -> bytes:
        return self.data if self.data is not None else self.text().encode("utf-8")

    def records(self) -> list[Any]:
        """The records, in order: every line but blanks and Raw lines."""
        return [line for line in self.lines if line is not None and not isinstance(line, Raw)]

    def record_indexes(self) -> list[int]:
        return [i for i, line in enumerate(self.lines) if line is not None and not isinstance(line, Raw)]


Files = dict[str, FileModel]  # path under the input root → its model


def write_files(root: Path, files: Files) -> None:
    for rel, fm in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(fm.bytes())


def with_blanks(draw: Callable, records: list[Any]) -> list[Any]:
    """`records` with blank lines drawn between them (blank lines are skipped by every line reader)."""
    out: list[Any] = []
    for record in records:
        if draw(st.integers(0, 5)) == 0:
            out.append(None)
        out.append(record)
    return out


@st.composite
def file_model(draw: Callable, kind: str, records: list[Any], head: list[Raw] | None = None) -> FileModel:
    """A file of `records` (blank lines between some), with drawn line endings, final newline, ASCII escapes and
    what a blank line holds."""
    return FileModel(
        kind=kind,
        lines=[*(head or []), *with_blanks(draw, records)] if kind != "json" else records,
        eol=draw(st.sampled_from(["\n", "\r\n"])),
        final_eol=draw(st.booleans()),
        ascii=draw(st.booleans()),
        blank=draw(st.sampled_from(["", " ", "\t ", "  "])),
        indent=draw(st.sampled_from([None, 2])),
    )


def _shuffled(draw: Callable, d: dict[str, Any]) -> dict[str, Any]:
    keys = draw(st.permutations(list(d)))
    return {k: d[k] for k in keys}


# ---- readers ------------------------------------------------------------------------------------------------------
@dataclass
class Field:
    """A field of a record: in a JSON object line (`name`, and `aliases` it may be written as), or a TSV column
    (`column`). `bad`: values a reader must refuse here, naming the field (a callable gets the record and the files:
    a value that depends on them). `text`: a string field a Latin-1 byte can be written into."""

    name: str
    required: bool = True
    bad: tuple[Any, ...] = ()
    aliases: tuple[str, ...] = ()
    column: int | None = None
    text: bool = False


@dataclass
class FileSpec:
    """What the records of one input file are: their fields, their key (a second record with the key and other
    content is refused, one with the same content is a repeat), and how to give a record other content."""

    kind: str
    fields: tuple[Field, ...] = ()
    key: Callable[[Any], Any] | None = None
    other_content: Callable[[Any], Any] | None = None
    repeats_kept: bool = False  # a repeated record is a record of its own (triplets, texts), not a repeat of a key
    may_be_empty: bool = False  # the reader has other files to read (a directory of corpora)
    records_are_objects: bool = True  # jsonl records are JSON objects (a teacher-score file's are lists)


@dataclass
class Reader:
    """A user-input reader: its input files, a strategy of valid inputs, the call, a plain-data view of its result
    and what that view must be for given (valid) files."""

    name: str
    specs: dict[str, FileSpec]
    model: st.SearchStrategy[Files]
    read: Callable[[Path], Any]
    view: Callable[[Any], Any]
    expected: Callable[[Files], Any]
    bom_accepted: bool = True
    refusals: Callable[[Path], None] | None = None  # more checks when it refuses (the reuse readers agree)
    mutated_files: tuple[str, ...] | None = None  # only these files get mutations (None: all)
    nonregular: str = "refused"  # what a directory / pipe / dangling link in place of an input is: "refused", "absent"


def _join(title: Any, text: str) -> str:
    """BEIR: the title, when it is a non-blank string, joined to the text with a space."""
    return f"{title} {text}" if isinstance(title, str) and title.strip() else text


# ---- BEIR -------------------------------------------------------------------------------------------------------
_CORPUS = FileSpec(
    "jsonl",
    fields=(
        Field("_id", bad=(None, "", "a b", "tab\there", 1.5, True, [], {})),
        Field("text", bad=(5, [], {"t": 1}, True), text=True),
        Field("title", required=False, bad=(5, ["t"])),
    ),
    key=lambda r: str(r["_id"]),
    other_content=lambda r: {**r, "text": r["text"] + " other"},
)
_QUERIES = FileSpec(
    "jsonl",
    fields=(Field("_id", bad=(None, "", "q 1", 2.5, False, ["q"])), Field("text", bad=("", "   ", 5, None), text=True)),
    key=lambda r: str(r["_id"]),
    other_content=lambda r: {**r, "text": r["text"] + " other"},
)


def _unknown_id(known: list[str]) -> str:
    return next(f"unknown-{n}" for n in range(len(known) + 1) if f"unknown-{n}" not in known)


_QRELS = FileSpec(
    "tsv",
    fields=(
        Field(
            "query-id",
            column=0,
            bad=(lambda r, f: _unknown_id([str(q["_id"]) for q in f["queries.jsonl"].records()]),),
            text=True,
        ),
        Field(
            "corpus-id", column=1, bad=(lambda r, f: _unknown_id([str(d["_id"]) for d in f["corpus.jsonl"].records()]),)
        ),
        Field(
            "score",
            column=2,
            bad=("high", "1.5", "nan", "inf", "", "1e400", "0x1", "2 3", "1000001", "-1e7", str(2**63)),
        ),
    ),
    key=lambda r: (r[0].strip(), r[1].strip()),
    other_content=lambda r: [r[0], r[1], str(grade_of(r[2]) + (1 if grade_of(r[2]) < 10**6 else -1))],
)


def grade_of(text: str) -> int:
    text = text.strip()
    return int(text) if re.fullmatch(r"-?\d+", text) else int(float(text))


@st.composite
def grades(draw: Callable) -> tuple[int, str]:
    """(grade, how it is written): small grades, graded relevance, the largest ones accepted (vtlab.data.collections
    MAX_GRADE), "2.0", padding spaces."""
    g = draw(st.integers(-1, 3) | st.sampled_from([0, 1, 4, 10**6, -(10**6)]))
    shown = f"{g}.0" if abs(g) < 100 and draw(st.integers(0, 4)) == 0 else str(g)
    return g, draw(st.sampled_from(["", " "])) + shown + draw(st.sampled_from(["", " ", "  "]))


@st.composite
def beir_files(draw: Callable, split: str = "test") -> Files:
    doc_ids = draw(st.lists(ids, min_size=1, max_size=12, unique=True))
    query_ids = draw(st.lists(ids, min_size=1, max_size=8, unique=True))
    docs = []
    for did in doc_ids:
        doc: dict[str, Any] = {"_id": id_value(draw, did), "text": draw(texts)}
        title = draw(st.none() | texts | st.just("missing"))
        if title != "missing":
            doc["title"] = title
        if draw(st.integers(0, 3)) == 0:
            doc["metadata"] = {"url": draw(texts), "n": draw(st.integers())}
        docs.append(_shuffled(draw, doc))
    queries = [_shuffled(draw, {"_id": id_value(draw, q), "text": draw(nonblank)}) for q in query_ids]
    pairs = draw(
        st.lists(st.tuples(st.sampled_from(query_ids), st.sampled_from(doc_ids)), min_size=1, max_size=16, unique=True)
    )
    judged = [(q, d, *draw(grades())) for q, d in pairs]
    if not any(g > 0 for _, _, g, _ in judged):
        q, d, _, _ = judged[0]
        judged[0] = (q, d, 1, "1")
    pad = st.sampled_from(["", " "])
    rows = [[draw(pad) + q, d + draw(pad), shown] for q, d, _, shown in judged]
    head = [Raw("query-id\tcorpus-id\tscore")] if draw(st.booleans()) else []
    return {
        "corpus.jsonl": draw(file_model("jsonl", docs)),
        "queries.jsonl": draw(file_model("jsonl", queries)),
        f"qrels/{split}.tsv": draw(file_model("tsv", rows, head)),
    }


def beir_expected(files: Files) -> dict[str, Any]:
    """A BEIR collection as docs/bad-inputs.md and vtlab.data.collections say: `_id` a string (a number: its decimal
    string), the title joined to the text, only the queries with judgments, grades as written."""
    qrels_file = next(k for k in files if k.startswith("qrels/"))
    corpus = {str(d["_id"]): _join(d.get("title"), d["text"]) for d in files["corpus.jsonl"].records()}
    queries = {str(q["_id"]): q["text"] for q in files["queries.jsonl"].records()}
    qrels: dict[str, dict[str, int]] = {}
    for q, d, g in files[qrels_file].records():
        qrels.setdefault(q.strip(), {})[d.strip()] = grade_of(g)
    return {"corpus": corpus, "queries": {q: t for q, t in queries.items() if q in qrels}, "qrels": qrels}


def beir_view(collection: Any) -> dict[str, Any]:
    return {"corpus": collection.corpus, "queries": collection.queries, "qrels": collection.qrels}


def _load_beir(root: Path) -> Any:
    from vtlab.data.collections import load_beir

    return load_beir(str(root))


def _load_dev(root: Path) -> Any:
    from vtlab.data.datamodule import _beir_dev

    return _beir_dev(str(root), "dev")()


# ---- triplets -----------------------------------------------------------------------------------------------------
def _equal_to_positive(r: dict[str, Any], f: Files) -> list[str]:
    return [r.get("positive", r.get("pos"))]


def _scores_of_other_length(r: dict[str, Any], f: Files) -> list[float]:
    return [1.0] * (len(r.get("negatives", r.get("negs"))) + 2)


def _nan_scores(r: dict[str, Any], f: Files) -> list[float]:
    return [math.nan] * (len(r.get("negatives", r.get("negs"))) + 1)


_TRIPLET_FIELDS = (
    Field("query", bad=("", " ", 5, None, ["q"]), text=True),
    Field("positive", aliases=("pos",), bad=("", 5, None, {"t": "x"}), text=True),
    Field("negatives", aliases=("negs",), bad=("n", [], [""], [5], None, _equal_to_positive)),
    Field("query_id", required=False, bad=(1.5, True, ["q"])),
)
_TRIPLETS = FileSpec(
    "jsonl",
    fields=(*_TRIPLET_FIELDS, Field("scores", required=False, bad=("x", [True], _scores_of_other_length, _nan_scores))),
    repeats_kept=True,
)
_TRIPLETS_SCORED = FileSpec("jsonl", fields=_TRIPLET_FIELDS, repeats_kept=False)
_SCORES = FileSpec(
    "jsonl",
    fields=(
        Field(
            "", required=False, bad=("x", {"s": 1}, [], [math.inf], lambda r, f: r + [1.0], lambda r, f: ["1"] * len(r))
        ),
    ),
    records_are_objects=False,
)


@st.composite
def triplet(draw: Callable, inline_scores: bool) -> dict[str, Any]:
    positive = draw(nonblank)
    negatives = draw(st.lists(nonblank.filter(lambda t: t != positive), min_size=1, max_size=4))
    alias = draw(st.booleans())
    r: dict[str, Any] = {"query": draw(nonblank), "pos" if alias else "positive": positive}
    r["negs" if alias else "negatives"] = negatives
    if inline_scores:
        r["scores"] = draw(st.lists(finite, min_size=len(negatives) + 1, max_size=len(negatives) + 1))
    if draw(st.booleans()):
        r["query_id"] = id_value(draw, draw(ids))
    if draw(st.booleans()):
        r["positive_id"] = id_value(draw, draw(ids))
    if draw(st.booleans()):
        r["negative_ids"] = [id_value(draw, draw(ids)) if draw(st.integers(0, 4)) else None for _ in negatives]
    if draw(st.booleans()):
        r["source"] = draw(texts)
    return _shuffled(draw, r)


@st.composite
def triplet_files(draw: Callable) -> Files:
    records = draw(st.lists(triplet(inline_scores=draw(st.booleans())), min_size=1, max_size=10))
    if records and draw(st.booleans()):  # identical lines: two training examples, both kept
        records.insert(draw(st.integers(0, len(records))), copy.deepcopy(records[0]))
    return {"train.jsonl": draw(file_model("jsonl", records))}


@st.composite
def scored_triplet_files(draw: Callable) -> Files:
    records = draw(st.lists(triplet(inline_scores=False), min_size=1, max_size=10))
    scores = [draw(st.lists(finite, min_size=len(_negs(r)) + 1, max_size=len(_negs(r)) + 1)) for r in records]
    return {"train.jsonl": draw(file_model("jsonl", records)), "scores.jsonl": draw(file_model("jsonl", scores))}


def _negs(r: dict[str, Any]) -> list[str]:
    return r["negatives"] if "negatives" in r else r["negs"]


def _opt_id(v: Any) -> str | None:
    return None if v is None else str(v)


def triplets_expected(files: Files) -> list[dict[str, Any]]:
    """Every line one example, in order (repeats too); ids as strings; scores as floats (inline, or the score file's
    line of the same rank)."""
    records = files["train.jsonl"].records()
    scores = files["scores.jsonl"].records() if "scores.jsonl" in files else [r.get("scores") for r in records]
    return [
        {
            "query": r["query"],
            "positive": r.get("positive", r.get("pos")),
            "negatives": _negs(r),
            "scores": None if s is None else [float(x) for x in s],
            "query_id": _opt_id(r.get("query_id")),
            "positive_id": _opt_id(r.get("positive_id")),
            "negative_ids": None if r.get("negative_ids") is None else [_opt_id(x) for x in r["negative_ids"]],
        }
        for r, s in zip(records, scores, strict=True)
    ]


def triplets_view(examples: Any) -> list[dict[str, Any]]:
    import dataclasses

    return [dataclasses.asdict(ex) for ex in examples]


def _read_triplets(root: Path) -> Any:
    from vtlab.data.triplets import read_jsonl_triplets

    return read_jsonl_triplets(str(root / "train.jsonl"))


def _read_scored_triplets(root: Path) -> Any:
    from vtlab.data.triplets import read_jsonl_triplets

    return read_jsonl_triplets(str(root / "train.jsonl"), scores_path=str(root / "scores.jsonl"))


# ---- a vocabulary corpus (and the texts of an MLM adaptation) -------------------------------------------------
_TXT = FileSpec("txt", repeats_kept=True)
_VOCAB_JSONL = FileSpec("jsonl", fields=(Field("text", bad=(5, None, ["t"], {"t": 1}), text=True),), repeats_kept=True)


@st.composite
def vocab_jsonl_record(draw: Callable) -> dict[str, Any]:
    r: dict[str, Any] = {"text": draw(texts)}
    if draw(st.booleans()):
        r["title"] = draw(texts | st.integers() | st.none())  # a title not a string is not part of the text
    if draw(st.booleans()):
        r["_id"] = id_value(draw, draw(ids))
    return _shuffled(draw, r)


@st.composite
def vocab_files(draw: Callable, kind: str) -> Files:
    if kind == "txt":
        name = draw(st.sampled_from(["corpus.txt", "corpus.TXT"]))
        return {name: draw(file_model("txt", draw(st.lists(txt_lines, min_size=1, max_size=15))))}
    records = draw(st.lists(vocab_jsonl_record(), min_size=1, max_size=12))
    records.append({"text": draw(nonblank)})  # at least one text (a corpus of blank texts is refused)
    return {"corpus.jsonl": draw(file_model("jsonl", records))}


@st.composite
def vocab_dir_files(draw: Callable) -> Files:
    names = draw(st.lists(st.sampled_from(["a.txt", "b.jsonl", "C.TXT", "d.JSONL", "e.txt"]), min_size=1, unique=True))
    files: Files = {}
    for name in names:
        files[f"texts/{name}"] = _single(draw, name)
    if draw(st.booleans()):
        files["texts/notes.md"] = FileModel("txt", ["not a corpus file: never read"])
    return files


def _single(draw: Callable, name: str) -> FileModel:
    kind = "txt" if name.lower().endswith(".txt") else "jsonl"
    return next(iter(draw(vocab_files(kind)).values()))


def vocab_texts(fm: FileModel) -> list[str]:
    if fm.kind == "txt":
        texts_ = list(fm.records())
    else:
        texts_ = [_join(r.get("title"), r["text"]) for r in fm.records()]
    return [t for t in texts_ if t.strip()]


def vocab_expected(files: Files) -> list[str]:
    """Every non-blank text in file order; files of a directory in name order (.txt and .jsonl only)."""
    read = sorted(k for k in files if k.lower().endswith((".txt", ".jsonl")))
    return [t for k in read for t in vocab_texts(files[k])]


def _read_vocab_dir_of(folder: str) -> Callable[[Path], Any]:
    def read(root: Path) -> Any:
        from vtlab.data.text_files import read_texts

        return read_texts(root / folder, key="vocab.corpus.path")

    return read


def _read_vocab_file(root: Path) -> Any:
    from vtlab.data.text_files import read_texts

    name = next(p.name for p in sorted(root.iterdir()) if p.suffix.lower() in (".txt", ".jsonl"))
    return read_texts(root / name, key="vocab.corpus.path")


# ---- a reuse_runs target's status.json; a run's metrics.json -------------------------------------------------------
JOB_CONFIG = "seed: 3\nname: earlier\nmodel:\n  lr: 0.001\n"
_STATUS_STATES = {"done": "no metrics", "failed": "failed"}  # vtlab.report: a done job without metrics.json


@st.composite
def status_files(draw: Callable) -> Files:
    record = {
        "status": draw(st.sampled_from(["done", "failed", "running", "interrupted"])),
        "name": draw(texts),
        "overrides": draw(st.lists(texts, max_size=3)),
        "seconds": draw(finite),
        "error": draw(st.none() | texts),
    }
    return {
        "job/status.json": draw(file_model("json", [_shuffled(draw, record)])),
        "job/.hydra/config.yaml": FileModel("txt", JOB_CONFIG.splitlines()),  # the job's record, to compare with
    }


def status_expected(files: Files) -> dict[str, Any]:
    record = files["job/status.json"].records()[0]
    done = record["status"] == "done"
    return {
        "record": record,
        "state": record["status"],
        "done": done,
        "report": _STATUS_STATES.get(record["status"], "incomplete"),
        "reused": done,
    }


def _read_status(root: Path) -> dict[str, Any]:
    from omegaconf import OmegaConf

    from vtlab.report.discovery import read_job
    from vtlab.runs import reuse, status

    job = root / "job"
    equal = OmegaConf.create({"seed": 3, "name": "this one", "model": {"lr": 0.001}})
    report = read_job(job, 0).state.value  # raises (one line) when status.json is unreadable
    return {
        "record": status.read_status(job),
        "state": status._state(job),
        "done": reuse._is_done(job),
        "report": report,
        "reused": reuse.find_equal_run(equal, [job]) == job,
    }


def _status_refused(root: Path) -> None:
    """An unreadable status.json: the job is not finished to `vtlab.runs` (never reused, its state says so)."""
    from omegaconf import OmegaConf

    from vtlab.runs import reuse, status

    job = root / "job"
    assert status._state(job) in ("unreadable status.json", "no status.json"), status._state(job)
    assert reuse._is_done(job) is False
    assert reuse.find_equal_run(OmegaConf.create({"seed": 3, "model": {"lr": 0.001}}), [job]) is None


_STATUS = FileSpec("json")
_METRICS = FileSpec("json", fields=(Field("metrics", bad=([1.0], "x", None, 3)),))


@st.composite
def metrics_files(draw: Callable) -> Files:
    measures = draw(st.dictionaries(st.sampled_from(["nDCG@10", "RR@10", "R@100", "flops", "encode_s"]), finite))
    record = {"metrics": measures, "collection": draw(texts), "queries": draw(st.integers(0, 10**6))}
    return {"job/eval/c/metrics.json": draw(file_model("json", [_shuffled(draw, record)]))}


def _read_metrics(root: Path) -> Any:
    from vtlab.report.discovery import read_metrics

    return read_metrics(root / "job" / "eval" / "c" / "metrics.json")


# ---- the table ----------------------------------------------------------------------------------------------
def _identity(x: Any) -> Any:
    return x


READERS: dict[str, Reader] = {
    r.name: r
    for r in (
        Reader(
            "beir",
            {"corpus.jsonl": _CORPUS, "queries.jsonl": _QUERIES, "qrels/test.tsv": _QRELS},
            beir_files(),
            _load_beir,
            beir_view,
            beir_expected,
        ),
        Reader(
            "dev",
            {"corpus.jsonl": _CORPUS, "queries.jsonl": _QUERIES, "qrels/dev.tsv": _QRELS},
            beir_files(split="dev"),
            _load_dev,
            beir_view,
            beir_expected,
            mutated_files=("qrels/dev.tsv",),  # the same reader as "beir": its split's file only
        ),
        Reader(
            "triplets",
            {"train.jsonl": _TRIPLETS},
            triplet_files(),
            _read_triplets,
            triplets_view,
            triplets_expected,
            bom_accepted=False,  # docs/bad-inputs.md accepts a BOM in a BEIR collection; a triplet file says line 1
        ),
        Reader(
            "triplets+scores",
            {"train.jsonl": _TRIPLETS_SCORED, "scores.jsonl": _SCORES},
            scored_triplet_files(),
            _read_scored_triplets,
            triplets_view,
            triplets_expected,
            bom_accepted=False,
        ),
        Reader("vocab-txt", {"corpus.txt": _TXT}, vocab_files("txt"), _read_vocab_file, _identity, vocab_expected),
        Reader(
            "vocab-jsonl",
            {"corpus.jsonl": _VOCAB_JSONL},
            vocab_files("jsonl"),
            _read_vocab_file,
            _identity,
            vocab_expected,
        ),
        Reader(
            "vocab-dir",
            {"texts/a.txt": FileSpec("txt", repeats_kept=True, may_be_empty=True)},
            vocab_dir_files(),
            _read_vocab_dir_of("texts"),
            _identity,
            vocab_expected,
        ),
        Reader(
            "vocab-beir",  # vocab.corpus.path=a BEIR directory: its corpus.jsonl's texts, titles joined
            {"corpus.jsonl": _CORPUS},
            beir_files(),
            _read_vocab_dir_of("."),
            _identity,
            lambda files: vocab_texts(files["corpus.jsonl"]),
            mutated_files=(),  # its corpus.jsonl reader is vocab-jsonl's
        ),
        Reader(
            "status",
            {"job/status.json": _STATUS},
            status_files(),
            _read_status,
            _identity,
            status_expected,
            bom_accepted=False,  # vtlab writes it: a BOM is damage
            refusals=_status_refused,
            nonregular="absent",  # no status.json: a job that did not finish
        ),
        Reader(
            "metrics",
            {"job/eval/c/metrics.json": _METRICS},
            metrics_files(),
            _read_metrics,
            _identity,
            lambda files: files["job/eval/c/metrics.json"].records()[0]["metrics"],
            bom_accepted=False,
        ),
    )
}


def spec_file(reader: Reader, files: Files, name: str) -> str:
    """The file of `files` that `reader.specs[name]` describes (a vocabulary file's name varies: corpus.TXT)."""
    if name in files:
        return name
    if reader.name == "vocab-dir":
        return next(k for k in sorted(files) if k.lower().endswith((".txt", ".jsonl")))
    return next(k for k in files if k.lower() == name.lower())


# ---- the oracles -------------------------------------------------------------------------------------------------
def snapshot(root: Path) -> dict[str, tuple]:
    """Every path under `root`: its type, and for a regular file its size, mtime and sha256 (a pipe is not opened)."""
    out: dict[str, tuple] = {}
    for p in sorted(root.rglob("*")):
        st_ = p.lstat()
        if stat.S_ISREG(st_.st_mode):
            if not os.access(p, os.R_OK) and os.geteuid() != 0:
                out[str(p.relative_to(root))] = ("unreadable", st_.st_size, st_.st_mtime_ns)
                continue
            out[str(p.relative_to(root))] = ("file", st_.st_size, st_.st_mtime_ns, sha256_file(p))
        elif stat.S_ISLNK(st_.st_mode):
            out[str(p.relative_to(root))] = ("link", os.readlink(p))
        else:
            out[str(p.relative_to(root))] = (stat.S_IFMT(st_.st_mode), st_.st_mtime_ns)
    return out


def strings_only(value: Any, where: str = "result") -> None:
    """Every mapping key of the result is a string (an id never becomes a number)."""
    if isinstance(value, dict):
        for k, v in value.items():
            assert isinstance(k, str), f"{where}: key {k!r} is a {type(k).__name__}, expected a string id"
            strings_only(v, f"{where}[{k!r}]")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            strings_only(v, f"{where}[{i}]")


def read_valid(reader: Reader, root: Path, what: str = "a valid input") -> Any:
    """`reader.read(root)`; an error from it fails the oracle (it refused an input it must read)."""
    try:
        return reader.read(root)
    except Exception as exc:  # noqa: BLE001 - any refusal of a valid input is the finding
        shown = user_error(exc)
        raise AssertionError(f"{reader.name} refused {what}: {one_line(shown) if shown else repr(exc)}"[:2000]) from exc


def _diff(got: Any, want: Any) -> str:
    if isinstance(got, dict) and isinstance(want, dict):
        for k in [*want, *got]:
            if k not in got:
                return f"{k!r} missing (expected {want[k]!r})"
            if k not in want:
                return f"{k!r} not expected (got {got[k]!r})"
            if got[k] != want[k]:
                return f"[{k!r}]: {_diff(got[k], want[k])}"
    if isinstance(got, list) and isinstance(want, list):
        if len(got) != len(want):
            return f"{len(got)} items, expected {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            if g != w:
                return f"[{i}]: {_diff(g, w)}"
    return f"{got!r} != {want!r}"


def check_round_trip(reader: Reader, root: Path, files: Files) -> Any:
    """Write `files`, read them back: the result is what `reader.expected` says (counts, content, ids as strings);
    the read wrote nothing under `root`."""
    write_files(root, files)
    before = snapshot(root)
    got = reader.view(read_valid(reader, root))
    want = reader.expected(files)
    assert got == want, f"{reader.name} read back other content than written: {_diff(got, want)}"
    strings_only(got)
    assert snapshot(root) == before, f"{reader.name} wrote into its inputs' folder"
    return got


@dataclass
class Refused:
    """The reader must fail with one `vtlab: error:` line holding each of `needles` (the file, `file:line`, the
    field)."""

    needles: list[str]


@dataclass
class Accepted:
    """The reader must return what `expected` computes for the (mutated) files."""


Outcome = Refused | Accepted


def check_refused(reader: Reader, root: Path, needles: list[str], what: str = "") -> str:
    """`reader` refuses the files under `root` with one line naming each of `needles`; nothing written."""
    before = snapshot(root)
    try:
        result = reader.read(root)
    except BaseException as exc:  # noqa: BLE001 - what is raised is the property under test
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        shown = user_error(exc)
        assert shown is not None, f"{reader.name} {what}: {type(exc).__name__} would be a traceback: {exc!r}"[:2000]
        line = one_line(shown)
        assert "\n" not in line and "Traceback" not in line, line
        for needle in needles:
            assert needle in line, f"{reader.name} {what}: the line does not name {needle!r}: {line}"[:2000]
        if reader.refusals is not None:
            reader.refusals(root)
        assert snapshot(root) == before, f"{reader.name} wrote into its inputs' folder"
        return line
    raise AssertionError(f"{reader.name} {what}: accepted an invalid input, returned {reader.view(result)!r}"[:2000])


def check_outcome(reader: Reader, root: Path, files: Files, outcome: Outcome, what: str) -> None:
    write_files(root, files)
    if isinstance(outcome, Refused):
        check_refused(reader, root, outcome.needles, what)
    else:
        got = reader.view(read_valid(reader, root, f"the input after {what}, which it must accept"))
        want = reader.expected(files)
        assert got == want, f"{reader.name} {what}: accepted, but read {_diff(got, want)}"


def fresh(parent: Path) -> Path:
    return Path(tempfile.mkdtemp(dir=parent))


# ---- mutations: one named change each ------------------------------------------------------------------------------
Draw = Callable[[st.SearchStrategy], Any]


def _base(rel: str) -> str:
    return rel.rsplit("/", 1)[-1]


def _at(rel: str, fm: FileModel, index: int) -> str:
    """`name:lineno` as a reader names the physical line `index` of the file."""
    return f"{_base(rel)}:{index + 1}"


def _line_needles(rel: str, fm: FileModel, index: int) -> list[str]:
    if fm.kind == "json":
        return [_base(rel)]
    return [_at(rel, fm, index)]


def _pick(draw: Draw, fm: FileModel) -> int:
    return draw(st.sampled_from(fm.record_indexes()))


def _field_of(record: dict[str, Any], f: Field) -> str | None:
    return next((n for n in (f.name, *f.aliases) if n in record), None)


def _bad_value(value: Any, record: Any, files: Files) -> Any:
    return value(record, files) if callable(value) else value


@dataclass
class Mutation:
    name: str
    kinds: tuple[str, ...]
    apply: Callable[[Draw, Reader, Files, str], Outcome]
    when: Callable[[FileSpec], bool] = lambda spec: True


def m_bad_json(draw: Draw, reader: Reader, files: Files, rel: str) -> Outcome:
    """A record cut short mid-line (every proper prefix of a JSON value is invalid)."""
    fm = files[rel]
    i = _pick(draw, fm)
    text = fm.render(fm.lines[i])
    cut = draw(st.integers(1, len(text.rstrip()) - 1))
    fm.lines[i] = Raw(text[:cut] if fm.kind != "json" else text[:cut].replace("\n", " "))
    return Refused(_line_needles(rel, fm, i))


def m_truncated_last_line(draw: Draw, reader: Reader, files: Files, rel: str) -> Outcome:
    """The file ends inside its last record (a copy cut short): no newline after it."""
    fm = files[rel]
    i = fm.record_indexes()[-1]
    text = fm.render(fm.lines[i])
    if fm.kind == "tsv":  # cut before the grade is complete: a shorter grade would be another valid grade
        cut = draw(st.integers(1, text.rindex("\t") + 1))
    else:
        cut = draw(st.integers(1, len(text.rstrip()) - 1))
    fm.lines[i : len(fm.lines)] = [Raw(text[:cut])]
    fm.final_eol = False
    first = not any(line is not None for line in fm.lines[:i])  # a first line starting 'query-id' is the header
    header_like = fm.kind == "tsv" and first and text[:cut].split("\t")[0].strip() == "query-id"
    return Refused([_base(rel)] if header_like or fm.kind == "json" else [_at(rel, fm, i)])


def m_not_an_object(draw: Draw, reader: Reader, files: Files, rel: str) -> Outcome:
    fm = files[rel]
    i = _pick(draw, fm)
    fm.lines[i] = Raw(json.dumps(draw(st.sampled_from([[1, 2], "text", 3, None, True, []]))))
    return Refused(_line_needles(rel, fm, i))


def m_missing_field(draw: Draw, reader: Reader, files: Files, rel: str) -> Outcome:
    spec = reader.specs.get(rel) or next(iter(reader.specs.values()))
    fm = files[rel]
    i = _pick(draw, fm)
    f = draw(st.sampled_from([f for f in spec.fields if f.required and f.column is None]))
    record = dict(fm.lines[i])
    for name in (f.name, *f.aliases):
        record.pop(name, None)
    fm.lines[i] = record
    return Refused([*_line_needles(rel, fm, i), f.name])


def m_bad_value(draw: Draw, reader: Reader, files: Files, rel: str) -> Outcome:
    """A field (a column) given a value of the wrong type or out of range."""
    spec = _spec(reader, rel)
    fm = files[rel]
    i = _pick(draw, fm)
    f = draw(st.sampled_from([f for f in spec.fields if f.bad]))
    value = _bad_value(draw(st.sampled_from(f.bad)), fm.lines[i], files)
    if f.column is not None:
        row = list(fm.lines[i])
        row[f.column] = value
        fm.lines[i] = row
        # a first line whose first column is 'query-id' and whose grade is not an integer is the header
        first = fm.record_indexes()[0] == i and not any(isinstance(x, Raw) for x in fm.lines[:i])
        if first and row[0].strip() == "query-id" and f.name == "score":
            return Refused([_base(rel)])
        return Refused([_at(rel, fm, i), f.name])
    if not spec.records_are_objects:
        fm.lines[i] = value
        return Refused(_line_needles(rel, fm, i))
    record = dict(fm.lines[i])
    record[_field_of(record, f) or f.name] = value
    fm.lines[i] = record
    return Refused([*_line_needles(rel, fm, i), f.name])


def _spec(reader: Reader, rel: str) -> FileSpec:
    return reader.specs.get(rel) or next(iter(reader.specs.values()))


def m_key_twice(draw: Draw, reader: Reader, files: Files, rel: str) -> Outcome:
    """A key written twice in one object, the second time with another value (json.loads keeps the last)."""
    fm = files[rel]
    i = _pick(draw, fm)
    record = fm.lines[i]
    key = draw(st.sampled_from(sorted(record)))
    other = draw(st.sampled_from(["other", 7, None]).filter(lambda v: v != record[key]))
    text = json.dumps(record, ensure_ascii=fm.ascii)
    fm.lines[i] = Raw(f"{text[:-1]}, {json.dumps(key)}: {json.dumps(other)}}}")
    return Refused([*_line_needles(rel, fm, i), key])


def m_deep_nesting(draw: Draw, reader: Reader, files: Files, rel: str) -> Outcome:
    fm = files[rel]
    i = _pick(draw, fm)
    depth = 100_000
    text = json.dumps(fm.lines[i], ensure_ascii=fm.ascii)
    fm.lines[i] = Raw(f'{text[:-1]}{", " if len(text) > 2 else ""}"deep": {"[" * depth}{"]" * depth}}}')
    return Refused(_line_needles(rel, fm, i))


def m_huge_number(draw: Draw, reader: Reader, files: Files, rel: str) -> Outcome:
    """A number of 5000 digits (more than Python converts to an int)."""
    fm = files[rel]
    i = _pick(draw, fm)
    text = json.dumps(fm.lines[i], ensure_ascii=fm.ascii)
    if isinstance(fm.lines[i], list):
        fm.lines[i] = Raw(f"{text[:-1]}{', ' if len(text) > 2 else ''}{'7' * 5000}]")
    else:
        fm.lines[i] = Raw(f'{text[:-1]}{", " if len(text) > 2 else ""}"n": {"7" * 5000}}}')
    return Refused(_line_needles(rel, fm, i))


def m_duplicate_other(draw: Draw, reader: Reader, files: Files, rel: str) -> Outcome:
    """A second record with an earlier record's key and other content (another text; a conflicting grade)."""
    spec = _spec(reader, rel)
    fm = files[rel]
    idx = fm.record_indexes()
    first = draw(st.sampled_from(idx))
    at = draw(st.integers(first + 1, len(fm.lines)))
    fm.lines.insert(at, spec.other_content(copy.deepcopy(fm.lines[first])))
    return Refused([_at(rel, fm, at), f"line {first + 1}"])


def m_duplicate_same(draw: Draw, reader: Reader, files: Files, rel: str) -> Outcome:
    """A record repeated exactly (a key's repeat: one warning; a training example or text: one more)."""
    fm = files[rel]
    first = draw(st.sampled_from(fm.record_indexes()))
    at = draw(st.integers(first + 1, len(fm.lines)))
    fm.lines.insert(at, copy.deepcopy(fm.lines[first]))
    return Accepted()


def m_wrong_columns(draw: Draw, reader: Reader, files: Files, rel: str) -> Outcome:
    fm = files[rel]
    i = _pick(draw, fm)
    row = list(fm.lines[i])
    fm.lines[i] = row[:2] if draw(st.booleans()) else [*row, "extra"]
    first = fm.record_indexes()[0] == i and not any(isinstance(x, Raw) for x in fm.lines[:i])
    return Refused([_base(rel)] if first and row[0].strip() == "query-id" else [_at(rel, fm, i)])


def m_bom(draw: Draw, reader: Reader, files: Files, rel: str) -> Outcome:
    """A UTF-8 byte order mark first (Windows editors): documented as no error for a BEIR collection."""
    fm = files[rel]
    fm.data = b"\xef\xbb\xbf" + fm.bytes()
    return Accepted() if reader.bom_accepted else Refused([f"{_base(rel)}:1" if fm.kind != "json" else _base(rel)])


def m_utf16(draw: Draw, reader: Reader, files: Files, rel: str) -> Outcome:
    """The file saved as UTF-16 (with its BOM, or without: then ASCII comes out as valid UTF-8 with NULs between) or
    UTF-32: refused at its first line that holds anything."""
    fm = files[rel]
    fm.data = fm.text().encode(draw(st.sampled_from(["utf-16", "utf-16-le", "utf-16-be", "utf-32"])))
    return Refused([_base(rel) if fm.kind == "json" else f"{_base(rel)}:{first_nonblank_line(fm.data)}"])


def first_nonblank_line(data: bytes) -> int:
    """The number of the first line (split at b"\\n", as the readers do) that is not UTF-8 or not blank."""
    for n, raw in enumerate(data.split(b"\n"), start=1):
        try:
            if raw.decode("utf-8-sig" if n == 1 else "utf-8").strip():
                return n
        except UnicodeDecodeError:
            return n
    return 1


def m_latin1(draw: Draw, reader: Reader, files: Files, rel: str) -> Outcome:
    """One record saved in Latin-1 (a file put together from two sources): 'é' as the single byte 0xE9."""
    spec = _spec(reader, rel)
    fm = files[rel]
    i = _pick(draw, fm)
    line = fm.lines[i]
    if fm.kind == "txt":
        fm.lines[i] = "café " + line
    elif fm.kind == "tsv":
        fm.lines[i] = ["café" + line[0], *line[1:]]
    else:
        spots = [f for f in spec.fields if f.text and _field_of(line, f)] if isinstance(line, dict) else []
        if spots:
            record = dict(line)
            name = _field_of(record, spots[0])
            record[name] = "café " + record[name]
        else:
            record = {**line, "note": "café "} if isinstance(line, dict) else [*line, "café "]
        fm.lines[i] = record
    fm.ascii = False
    encoded = [fm.render(x).encode("latin-1" if j == i else "utf-8", "replace") for j, x in enumerate(fm.lines)]
    eol = fm.eol.encode()
    fm.data = eol.join(encoded) + (eol if fm.final_eol else b"")
    return Refused(_line_needles(rel, fm, i))


def m_empty(draw: Draw, reader: Reader, files: Files, rel: str) -> Outcome:
    """An empty file, or one of blank lines only."""
    fm = files[rel]
    fm.lines = [None] * draw(st.integers(0, 3))
    fm.data = None
    if _spec(reader, rel).may_be_empty:  # one file of a directory: the others' texts, unless there are none
        return Accepted() if reader.expected(files) else Refused([rel.split("/")[0], "no text"])
    return Refused([_base(rel)])


_JSONISH = ("jsonl", "json")
_ALL = ("jsonl", "tsv", "txt", "json")


def _objects(s: FileSpec) -> bool:
    return s.records_are_objects


def _required(s: FileSpec) -> bool:
    return any(f.required and f.column is None for f in s.fields)


def _has_bad(s: FileSpec) -> bool:
    return any(f.bad for f in s.fields)


def _keyed(s: FileSpec) -> bool:
    return s.key is not None


def _repeatable(s: FileSpec) -> bool:
    return s.key is not None or s.repeats_kept


MUTATIONS: dict[str, Mutation] = {
    m.name: m
    for m in (
        Mutation("bad_json_line", _JSONISH, m_bad_json),
        Mutation("truncated_last_line", ("jsonl", "tsv", "json"), m_truncated_last_line),
        Mutation("not_an_object", _JSONISH, m_not_an_object, _objects),
        Mutation("missing_field", _JSONISH, m_missing_field, _required),
        Mutation("wrong_type_or_value", ("jsonl", "tsv", "json"), m_bad_value, _has_bad),
        Mutation("key_twice_in_an_object", ("jsonl",), m_key_twice, _objects),
        Mutation("nesting_too_deep", _JSONISH, m_deep_nesting),
        Mutation("number_too_long", _JSONISH, m_huge_number),
        Mutation("duplicate_id_other_content", ("jsonl", "tsv"), m_duplicate_other, _keyed),
        Mutation("duplicate_record_same_content", ("jsonl", "tsv", "txt"), m_duplicate_same, _repeatable),
        Mutation("wrong_column_count", ("tsv",), m_wrong_columns),
        Mutation("bom", _ALL, m_bom),
        Mutation("utf16_or_utf32", _ALL, m_utf16),
        Mutation("latin1_line", _ALL, m_latin1),
        Mutation("empty_file", _ALL, m_empty),
    )
}


def mutation_cases() -> list[tuple[str, str, str]]:
    """(reader, file, mutation) for every mutation that applies to a file of a reader."""
    cases = []
    for reader in READERS.values():
        for rel, spec in reader.specs.items():
            if reader.mutated_files is not None and rel not in reader.mutated_files:
                continue
            for m in MUTATIONS.values():
                if spec.kind in m.kinds and m.when(spec):
                    cases.append((reader.name, rel, m.name))
    return cases


def run_mutation(reader: Reader, rel: str, mutation: Mutation, parent: Path, draw: Draw) -> None:
    """One example: a valid input, `mutation` applied to its file `rel`, the outcome checked."""
    files = draw(reader.model)
    target = spec_file(reader, files, rel)
    outcome = mutation.apply(draw, reader, files, target)
    root = fresh(parent)
    check_outcome(reader, root, files, outcome, f"{mutation.name} of {target}")
    shutil.rmtree(root, ignore_errors=True)


def explore(name: str, max_examples: int, body: Callable[[Draw], None], shrink: bool = True) -> None:
    """Run `body(draw)` on `max_examples` seeded examples (hypothesis shrinks a failure to its smallest input)."""

    @fuzz_settings(max_examples, shrink)
    @seeded(name)
    @given(st.data())
    def run(data: st.DataObject) -> None:
        body(data.draw)

    run()


def round_trip(reader: Reader, parent: Path, max_examples: int, shrink: bool = True) -> None:
    """The round-trip oracle of `reader` over `max_examples` generated inputs."""

    def body(draw: Draw) -> None:
        root = fresh(parent)
        check_round_trip(reader, root, draw(reader.model))
        shutil.rmtree(root, ignore_errors=True)

    explore(f"round-trip {reader.name}", max_examples, body, shrink)


def mutate(reader: Reader, rel: str, mutation: Mutation, parent: Path, max_examples: int, shrink: bool = True) -> None:
    """The mutation oracle of `reader` for one mutation of one file over `max_examples` generated inputs."""
    explore(
        f"mutation {reader.name} {rel} {mutation.name}",
        max_examples,
        lambda draw: run_mutation(reader, rel, mutation, parent, draw),
        shrink,
    )


# ---- non-regular files ----------------------------------------------------------------------------------------------
REPLACEMENTS = ("directory", "fifo", "symlink_inside", "symlink_outside", "hardlink", "dangling_link", "unreadable")


def replace_file(path: Path, how: str, outside: Path) -> None:
    """Put something else where the regular file `path` is: a directory, a named pipe, a link to a copy of it inside
    its folder or outside (`outside`: a folder beyond the inputs' root), a hard link to such a copy, a link to
    nothing, the file made unreadable."""
    data = path.read_bytes()
    if how == "unreadable":
        path.chmod(0)
        return
    path.unlink()
    if how == "directory":
        path.mkdir()
    elif how == "fifo":
        os.mkfifo(path)
    elif how == "symlink_inside":
        copy_ = path.with_name(f".{path.name}.real")
        copy_.write_bytes(data)
        path.symlink_to(copy_.name)
    elif how in ("symlink_outside", "hardlink"):
        outside.mkdir(parents=True, exist_ok=True)
        copy_ = Path(tempfile.mkdtemp(dir=outside)) / path.name
        copy_.write_bytes(data)
        (path.symlink_to if how == "symlink_outside" else path.hardlink_to)(copy_)
    elif how == "dangling_link":
        path.symlink_to(outside / "no-such-file")
    else:
        raise ValueError(how)


@dataclass
class Bounded:
    result: Any = None
    error: BaseException | None = None
    done: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def call_bounded(fn: Callable[[], Any], seconds: float, fifos: tuple[Path, ...] = ()) -> Bounded:
    """`fn()` in a thread, waited on for `seconds`; a read still blocked after that is released by opening `fifos`
    for writing (and the caller fails the test: a pipe hung the reader)."""
    out = Bounded()

    def target() -> None:
        try:
            out.result = fn()
        except BaseException as exc:  # noqa: BLE001
            out.error = exc
        finally:
            out.done = True

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    if not out.done:
        for fifo in fifos:
            try:
                fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
                os.close(fd)
            except OSError:
                pass
        thread.join(5)
        out.extra["hung"] = True
    return out
