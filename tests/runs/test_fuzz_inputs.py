"""Fuzzing every reader of a user's files (hypothesis, seeded, a bounded number of examples per reader): BEIR corpus,
queries and qrels, triplet JSONL, a vocabulary corpus (.txt / .jsonl), a recorded run config, a model directory, a
sealed cache entry. Inputs are built from valid lines, then broken the ways files break: truncated, wrong types, bad
bytes, a byte order mark, duplicates that agree or conflict, control characters, numbers JSON does not have.

The properties, for every input: the reader returns, or raises an error the entry point reports as one
`vtlab: error:` line and exit 2 (`vtlab.core.errors.user_error`) — never another exception, which would be a traceback
and exit 1; the line names the file read; and nothing is written into the input's folder (nor anywhere else: the folder
is the only place the reader is given). When a data reader returns, what it returned is what the file says: every line
it accepted was valid, so the documented rules applied to the decoded lines (tests/fuzz.py's `expected` of each reader)
must give the same collection, examples or texts — a dropped line, a coerced id or a grade resolved silently fails.

Valid inputs from a model of their content, each broken by one named mutation, non-regular files and the CLI:
test_fuzz_oracles.py, test_fuzz_files.py, test_fuzz_models.py, test_fuzz_cli.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from fuzz import FileModel, Raw, beir_expected, beir_view, triplets_expected, triplets_view, vocab_expected
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from vtlab.core.errors import one_line, user_error

# seeded and bounded: the same examples on every machine, within `make test`'s time
FUZZ = settings(
    max_examples=300,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20)
_scalar = st.one_of(st.none(), st.booleans(), st.integers(-(10**20), 10**20), st.floats(), _text)
_value = st.recursive(_scalar, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3))


def _json_line(fields: dict[str, st.SearchStrategy]) -> st.SearchStrategy[bytes]:
    """A JSON object line: the expected fields (each sometimes missing or of another type) plus stray ones."""
    obj = st.fixed_dictionaries({}, optional={k: v | _value for k, v in fields.items()}).flatmap(
        lambda d: st.dictionaries(_text, _value, max_size=2).map(lambda extra: {**extra, **d})
    )
    return obj.map(lambda d: json.dumps(d, ensure_ascii=False, allow_nan=True).encode("utf-8"))


def _broken(line: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    """A line as it is, or broken: cut short, bad UTF-8 inside, a BOM or NUL in front, not an object, random bytes."""
    return st.one_of(
        line,
        line,
        line.flatmap(lambda b: st.integers(0, max(len(b) - 1, 0)).map(lambda n: b[:n])),
        line.map(lambda b: b[: len(b) // 2] + b"\xff\xfe" + b[len(b) // 2 :]),
        line.map(lambda b: b"\xef\xbb\xbf" + b),
        line.map(lambda b: b"\x00" + b),
        _value.map(lambda v: json.dumps(v, allow_nan=True).encode()),
        st.binary(max_size=20),
        st.just(b"\r"),
    )


def _file(line: st.SearchStrategy[bytes], max_lines: int = 12) -> st.SearchStrategy[bytes]:
    """Lines joined (some repeated: identical duplicates), newline-terminated or not, \\r\\n or \\n."""
    lines = st.lists(_broken(line), max_size=max_lines).flatmap(
        lambda ls: st.sampled_from([ls, ls + ls[:1], ls[:1] + ls])
    )
    return st.tuples(lines, st.sampled_from([b"\n", b"\r\n"]), st.booleans()).map(
        lambda t: t[1].join(t[0]) + (t[1] if t[2] else b"")
    )


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.lstat().st_size, p.lstat().st_mtime_ns) for p in sorted(root.rglob("*"))}


def _expect_clean(read, folder: Path, names: list[str]):
    """`read()` returns (its result) or fails as a one-line user error naming one of `names` (files in `folder`;
    then None); nothing written."""
    before = _snapshot(folder)
    result = None
    try:
        result = read()
    except BaseException as exc:  # noqa: BLE001 - what is raised is the property under test
        shown = user_error(exc)
        assert shown is not None, f"{type(exc).__name__} would be a traceback: {exc!r}"
        line = one_line(shown)
        assert "\n" not in line and "Traceback" not in line
        assert any(name in line for name in names), f"the line names none of {names}: {line}"
    assert _snapshot(folder) == before, "a reader wrote into its input's folder"
    return result


def _lines(data: bytes, bom: bool = True) -> list[str]:
    """The non-blank lines of an accepted file, as a line reader decodes them (a BOM before the first is no data)."""
    out = []
    for n, raw in enumerate(data.split(b"\n"), start=1):
        line = raw.decode("utf-8-sig" if n == 1 and bom else "utf-8").rstrip("\r\n")
        if line.strip():
            out.append(line)
    return out


def _integral(text: str) -> bool:
    try:
        return float(text).is_integer()
    except ValueError:
        return False


def _accepted(kind: str, data: bytes, bom: bool = True) -> FileModel:
    """An accepted file as records, for tests/fuzz.py's `expected`: every line of it was valid."""
    lines = _lines(data, bom)
    if kind == "jsonl":
        return FileModel("jsonl", [json.loads(line) for line in lines])
    if kind == "tsv":  # the header: a first line 'query-id' whose grade is not an integer (else a judgment)
        cols = lines[0].split("\t") if lines else []
        head = (
            lines[:1] if cols and cols[0].strip() == "query-id" and (len(cols) != 3 or not _integral(cols[2])) else []
        )
        return FileModel("tsv", [*(Raw(h) for h in head), *(line.split("\t") for line in lines[len(head) :])])
    return FileModel("txt", lines)


def _fresh(tmp_path: Path) -> Path:
    """A new, empty folder per example (hypothesis runs many examples in one test function)."""
    n = len(list(tmp_path.iterdir()))
    folder = tmp_path / f"ex{n}"
    folder.mkdir()
    return folder


# ---- BEIR ------------------------------------------------------------------------------------------------------
_ids = st.sampled_from(["d1", "d2", "q1", "q 1", "", "d\t1"]) | _text
_corpus_line = _json_line({"_id": _ids, "text": _text, "title": _text})
_query_line = _json_line({"_id": _ids, "text": _text})
_qrels_line = st.tuples(_ids, _ids, st.sampled_from(["1", "0", "2", "-1", "1.5", "x", "nan", "1e400", ""])).map(
    lambda t: "\t".join(t).encode("utf-8")
)


@pytest.mark.slow
@FUZZ
@given(corpus=_file(_corpus_line), queries=_file(_query_line), qrels=_file(_qrels_line, max_lines=6))
def test_a_beir_directory_reads_or_says_which_file_in_one_line(tmp_path: Path, corpus, queries, qrels) -> None:
    from vtlab.data.collections import load_beir

    root = _fresh(tmp_path)
    (root / "qrels").mkdir()
    (root / "corpus.jsonl").write_bytes(corpus)
    (root / "queries.jsonl").write_bytes(queries)
    (root / "qrels" / "test.tsv").write_bytes(qrels)
    got = _expect_clean(lambda: load_beir(str(root)), root, ["corpus.jsonl", "queries.jsonl", "test.tsv"])
    if got is not None:
        files = {
            "corpus.jsonl": _accepted("jsonl", corpus),
            "queries.jsonl": _accepted("jsonl", queries),
            "qrels/test.tsv": _accepted("tsv", qrels),
        }
        assert beir_view(got) == beir_expected(files)


# ---- triplets ----------------------------------------------------------------------------------------------------
_triplet_line = _json_line(
    {
        "query": _text,
        "positive": _text,
        "negatives": st.lists(_text, max_size=3),
        "scores": st.lists(st.floats(), max_size=4),
        "pos": _text,
        "negs": st.lists(_text, max_size=2),
    }
)


@pytest.mark.slow
@FUZZ
@given(content=_file(_triplet_line), scores=st.booleans())
def test_a_triplet_file_reads_or_says_where_in_one_line(tmp_path: Path, content: bytes, scores: bool) -> None:
    from vtlab.data.triplets import read_jsonl_triplets

    folder = _fresh(tmp_path)
    path = folder / "train.jsonl"
    path.write_bytes(content)
    got = _expect_clean(lambda: read_jsonl_triplets(str(path), require_scores=scores), folder, ["train.jsonl"])
    if got is not None:  # every line an example (repeats too), in order
        assert triplets_view(got) == triplets_expected({"train.jsonl": _accepted("jsonl", content, bom=False)})


# ---- a vocabulary corpus -----------------------------------------------------------------------------------------
@pytest.mark.slow
@FUZZ
@given(
    content=_file(_json_line({"text": _text, "title": _text})) | _file(_text.map(lambda t: t.encode("utf-8"))),
    suffix=st.sampled_from([".jsonl", ".txt"]),
)
def test_a_vocabulary_corpus_reads_or_says_where_in_one_line(tmp_path: Path, content: bytes, suffix: str) -> None:
    from vtlab.data.text_files import read_texts

    folder = _fresh(tmp_path)
    path = folder / f"corpus{suffix}"
    path.write_bytes(content)
    got = _expect_clean(lambda: read_texts(path, key="vocab.corpus.path"), folder, [path.name])
    if got is not None:
        assert got == vocab_expected({path.name: _accepted(suffix.lstrip("."), content)})


# ---- a recorded run config ----------------------------------------------------------------------------------------
_yaml_value = st.one_of(
    _scalar.map(json.dumps),
    st.sampled_from(
        [
            "${oc.env:HOME}",
            "${missing.key}",
            "${eval}",
            "{_target_: os.system, command: 'touch /tmp/vtlab-fuzz-ran'}",
            "{_target_: vtlab.data.collections.load_beir, path: /nonexistent}",
            "[1, 2",
            "!!python/object/apply:os.system ['true']",
            "&a [*a]",
            "'unterminated",
        ]
    ),
)
_yaml_doc = st.lists(
    st.tuples(st.sampled_from(["eval", "model", "model.encoder", "name", "x", "eval.path"]), _yaml_value), max_size=4
).map(lambda kv: "\n".join(f"{k}: {v}" for k, v in kv).encode("utf-8"))


@FUZZ
@given(document=st.one_of(_yaml_doc, st.binary(max_size=40)))
def test_a_recorded_run_config_is_read_as_data_or_refused_in_one_line(tmp_path: Path, document: bytes) -> None:
    from vtlab.export.run_config import RunConfig

    run = _fresh(tmp_path)
    (run / ".hydra").mkdir()
    (run / ".hydra" / "config.yaml").write_bytes(document)
    command = OmegaConf.create({"eval": {"name": "x"}, "model": {"encoder": {"precision": "fp32"}}})

    def read() -> None:
        config = RunConfig(command, run)
        config.node("eval")
        config.node("model.encoder")

    _expect_clean(read, run, ["config.yaml"])
    assert not Path("/tmp/vtlab-fuzz-ran").exists()


# ---- a model directory -------------------------------------------------------------------------------------------
_config_json = _json_line(
    {
        "model_type": st.sampled_from(["bert", "modernbert", "roberta", "nonsense"]),
        "vocab_size": st.integers(-5, 10**12),
        "hidden_size": st.integers(-5, 10**9),
        "num_hidden_layers": st.integers(-1, 4),
    }
)


@FUZZ
@given(
    config=_broken(_config_json),
    weights=st.sampled_from(["model.safetensors", "pytorch_model.bin", "model.safetensors.index.json", None]),
    weight_bytes=st.binary(max_size=64),
    tokenizer=st.sampled_from(["tokenizer.json", "vocab.txt", None]),
    tokenizer_bytes=st.binary(max_size=32) | _value.map(lambda v: json.dumps(v, allow_nan=True).encode()),
)
def test_a_model_directory_is_checked_before_it_is_loaded(
    tmp_path: Path, config, weights, weight_bytes, tokenizer, tokenizer_bytes
) -> None:
    from vtlab.backbones.pretrained import check_model_dir, check_tokenizer_dir

    model = _fresh(tmp_path)
    (model / "config.json").write_bytes(config)
    if weights is not None:
        (model / weights).write_bytes(weight_bytes)
    if tokenizer is not None:
        (model / tokenizer).write_bytes(tokenizer_bytes)

    def check() -> None:
        check_model_dir(str(model), "backbone.name_or_path", memory=1 << 34)
        check_tokenizer_dir(str(model), "backbone.name_or_path")

    _expect_clean(check, model, [n for n in (model.name, "config.json", weights, tokenizer) if n])


# ---- a sealed cache entry ----------------------------------------------------------------------------------------
@pytest.mark.slow
@FUZZ
@given(
    change=st.sampled_from(["none", "add", "remove", "edit", "truncate", "link", "marker", "marker-json"]),
    data=st.binary(min_size=1, max_size=64),
    marker=_value.map(lambda v: json.dumps(v, allow_nan=True).encode()),
)
def test_a_sealed_cache_entry_is_usable_only_exactly_as_built(tmp_path: Path, change, data, marker) -> None:
    from vtlab.core import integrity

    entry = _fresh(tmp_path) / "entry"
    (entry / "sub").mkdir(parents=True)
    (entry / "model.safetensors").write_bytes(data)
    (entry / "sub" / "tokenizer.json").write_bytes(data[::-1])
    integrity.seal(entry)
    if change == "add":
        (entry / "added_tokens.json").write_bytes(data)
    elif change == "remove":
        (entry / "sub" / "tokenizer.json").unlink()
    elif change == "edit":
        (entry / "model.safetensors").write_bytes(data + b"!")
    elif change == "truncate":
        (entry / "model.safetensors").write_bytes(data[:-1])
    elif change == "link":
        os.symlink(tmp_path, entry / "sub" / "elsewhere")
    elif change == "marker":
        (entry / integrity.MARKER).write_bytes(data)
    elif change == "marker-json":
        (entry / integrity.MARKER).write_bytes(marker)
    found = integrity.problem(entry)  # a reason, never an exception
    assert (found is None) == (change == "none"), (change, found)


def test_the_harness_finds_what_it_is_for(tmp_path: Path) -> None:
    """The property fails on a reader that raises a bare exception: the harness can fail."""
    folder = _fresh(tmp_path)
    with pytest.raises(AssertionError, match="would be a traceback"):
        _expect_clean(lambda: {}["_id"], folder, ["x"])  # a KeyError: exit 1 and a traceback
    with pytest.raises(AssertionError, match="names none of"):
        _expect_clean(lambda: json.loads("{"), folder, ["corpus.jsonl"])  # one line, but not where
    with pytest.raises(AssertionError, match="wrote into its input"):
        _expect_clean(lambda: (folder / "new").write_text("x"), folder, ["x"])
