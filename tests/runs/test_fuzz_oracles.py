"""Round-trip and mutation oracles over every user-input reader (tests/fuzz.py): what a reader returns for valid
files equals what was written, and each named way of breaking a file is refused in one line naming the file and the
line or field (or, where docs/bad-inputs.md accepts it, read correctly). The harness's own test: it fails on readers
planted with silent wrong answers (a dropped last line, conflicting grades resolved last-wins, ids made numbers)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from fuzz import (
    MUTATIONS,
    READERS,
    FileModel,
    Raw,
    Refused,
    check_outcome,
    check_round_trip,
    fresh,
    mutate,
    mutation_cases,
    round_trip,
)

ROUND_TRIPS = 30  # examples per reader
MUTANTS = 6  # examples per (reader, file, mutation)


@pytest.mark.parametrize("name", list(READERS))
def test_a_reader_returns_what_was_written(tmp_path: Path, name: str) -> None:
    round_trip(READERS[name], tmp_path, ROUND_TRIPS)


CASES = mutation_cases()


@pytest.mark.parametrize("reader,file,mutation", CASES, ids=["-".join(c) for c in CASES])
def test_one_named_mutation_is_refused_in_one_line_or_read_as_documented(
    tmp_path: Path, reader: str, file: str, mutation: str
) -> None:
    mutate(READERS[reader], file, MUTATIONS[mutation], tmp_path, MUTANTS)


def test_every_reader_and_mutation_is_exercised() -> None:
    """The table covers each reader, and each mutation applies somewhere (a typo in a kind would drop one)."""
    assert {c[0] for c in CASES} == {name for name, r in READERS.items() if r.mutated_files != ()}
    assert {c[2] for c in CASES} == set(MUTATIONS)
    assert len(CASES) >= 80


# ---- sizes: a 5 MB line, many lines -------------------------------------------------------------------------------
_BIG = 5 * 2**20


def _sized(reader: str) -> dict[str, FileModel]:
    """A valid input of `reader` with one 5 MB text and 20,000 records in its largest file."""
    n = 20_000
    if reader == "beir":
        docs = [{"_id": f"{i:05d}", "text": f"doc {i}"} for i in range(n)]
        docs[n // 2]["text"] = "x" * _BIG
        return {
            "corpus.jsonl": FileModel("jsonl", docs),
            "queries.jsonl": FileModel("jsonl", [{"_id": str(i), "text": f"q{i}"} for i in range(100)]),
            "qrels/test.tsv": FileModel(
                "tsv", [Raw("query-id\tcorpus-id\tscore"), *([str(i), f"{i * 7:05d}", "1"] for i in range(100))]
            ),
        }
    if reader == "triplets":
        rows = [{"query": f"q{i}", "positive": f"p{i}", "negatives": [f"n{i}", "n"]} for i in range(n)]
        rows[-1]["positive"] = "p" * _BIG
        return {"train.jsonl": FileModel("jsonl", rows)}
    if reader == "vocab-txt":
        lines = [f"text {i}" for i in range(n)]
        lines[0] = "t" * _BIG
        return {"corpus.txt": FileModel("txt", lines)}
    raise ValueError(reader)


@pytest.mark.parametrize("reader", ["beir", "triplets", "vocab-txt"])
def test_a_5mb_line_and_20000_lines_are_read_whole(tmp_path: Path, reader: str) -> None:
    t0 = time.perf_counter()
    check_round_trip(READERS[reader], tmp_path, _sized(reader))
    assert time.perf_counter() - t0 < 30


# ---- the harness can see a wrong answer -----------------------------------------------------------------------------
def _planted(monkeypatch: pytest.MonkeyPatch, bug: str) -> None:
    """A reader with a silent wrong answer, as earlier rounds had (or could have)."""
    from vtlab.data import collections, text_files

    if bug == "drops the last line":
        real = text_files.iter_lines

        def iter_lines(path):
            lines = list(real(path))
            return iter(lines[:-1] if len(lines) > 1 else lines)

        monkeypatch.setattr(collections, "iter_lines", iter_lines)
        monkeypatch.setattr(text_files, "iter_lines", iter_lines)
    elif bug == "last grade wins":

        class LastWins(collections._Records):
            def add(self, key, value, where, shown):
                if self.what == "judgment":
                    self.items[key] = value  # a conflicting grade silently replaces the earlier one
                else:
                    super().add(key, value, where, shown)

        monkeypatch.setattr(collections, "_Records", LastWins)
    elif bug == "ids become numbers":
        real_id = collections._run_id

        def run_id(obj, where):
            v = real_id(obj, where)
            return int(v) if v.isdigit() and v.isascii() else v

        monkeypatch.setattr(collections, "_run_id", run_id)
    elif bug == "keeps the first of a key twice":
        monkeypatch.setattr(
            text_files,
            "json_line",
            lambda where, line: json.loads(line, object_pairs_hook=lambda pairs: dict(reversed(pairs))),
        )
        monkeypatch.setattr(collections, "json_line", text_files.json_line)
    else:
        raise ValueError(bug)


@pytest.mark.parametrize(
    "bug,oracle",
    [
        ("drops the last line", "round trip"),
        ("drops the last line", "duplicate_record_same_content"),
        ("last grade wins", "duplicate_id_other_content"),
        ("ids become numbers", "round trip"),
        ("keeps the first of a key twice", "key_twice_in_an_object"),
    ],
)
def test_the_oracles_fail_on_a_planted_silent_wrong_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bug: str, oracle: str
) -> None:
    """Each oracle, run as the suite runs it (same examples), fails on a reader planted with the bug it is for."""
    _planted(monkeypatch, bug)
    beir = READERS["beir"]
    with pytest.raises(
        AssertionError,
        match="read back other content|refused (a valid input|the input after)|accepted(, but read| an invalid input)",
    ):
        if oracle == "round trip":
            round_trip(beir, tmp_path, ROUND_TRIPS, shrink=False)  # the suite's examples; the first failure will do
        else:
            file = "qrels/test.tsv" if bug == "last grade wins" else "corpus.jsonl"
            mutate(beir, file, MUTATIONS[oracle], tmp_path, MUTANTS, shrink=False)


def test_a_planted_conflicting_grade_is_caught_on_a_known_input(tmp_path: Path, monkeypatch) -> None:
    """Last round's bug, by hand: q1/d1 judged 1, then 2. The oracle says refused; the planted reader reads 2."""
    files = {
        "corpus.jsonl": FileModel("jsonl", [{"_id": "d1", "text": "a"}]),
        "queries.jsonl": FileModel("jsonl", [{"_id": "q1", "text": "b"}]),
        "qrels/test.tsv": FileModel("tsv", [["q1", "d1", "1"], ["q1", "d1", "2"]]),
    }
    check_outcome(READERS["beir"], fresh(tmp_path), files, Refused(["test.tsv:2", "line 1"]), "conflict")
    _planted(monkeypatch, "last grade wins")
    with pytest.raises(AssertionError, match=r"accepted an invalid input, returned .*'q1': \{'d1': 2\}"):
        check_outcome(READERS["beir"], fresh(tmp_path), files, Refused(["test.tsv:2", "line 1"]), "conflict")


# ---- a reuse_runs target whose recorded config is damaged: not reused, never a traceback ---------------------------
@pytest.mark.parametrize(
    "config",
    [b"seed: [3\n", b"- a list\n- not a mapping\n", b"\xff\xfe\x00s", b"7\n", b"a: " + b"[" * 5000 + b"\n", b""],
    ids=["truncated", "a_list", "utf16_bytes", "a_scalar", "nested_deep", "empty"],
)
def test_a_done_job_whose_config_is_damaged_is_not_reused(tmp_path: Path, config: bytes) -> None:
    from omegaconf import OmegaConf

    from vtlab.runs.reuse import find_equal_run

    job = tmp_path / "job"
    (job / ".hydra").mkdir(parents=True)
    (job / "status.json").write_text('{"status": "done"}')
    (job / ".hydra" / "config.yaml").write_bytes(config)
    assert find_equal_run(OmegaConf.create({"seed": 3}), [job]) is None
    (job / ".hydra" / "config.yaml").write_text("seed: 3\n")  # the same job, its config readable: reused
    assert find_equal_run(OmegaConf.create({"seed": 3}), [job]) == job
