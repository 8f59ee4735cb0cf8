"""The fuzz oracles through `python -m vtlab` (tests/fuzz.py): a seeded sample of generated BEIR collections, one
valid, one with a conflicting judgment, one with a named pipe for queries.jsonl, one whose corpus.jsonl is a link
out of the collection's folder, each evaluated by a tiny model (stage=evaluate eval=beir). Checked: the exit code,
status.json, the run's TREC file against the collection written (ids as written, every judged query), the one
error line and what it names; and that nothing outside the run directories changed: the whole temporary tree (the
inputs, the link's target, the working directory) is compared path by path, size, mtime and sha256."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from fuzz import MUTATIONS, READERS, Refused, beir_expected, explore, replace_file, snapshot, write_files
from helpers import one_error_line, run_vtlab_together

from vtlab.data.collections import judged_queries

EVAL = [
    "stage=evaluate",
    "eval=beir",
    "backbone=splade-tiny",
    "vocab=native",
    "logger=none",
    "baseline=false",
    "model.encoder.precision=fp32",
    "data.doc_max_length=64",
    "data.query_max_length=24",
]
TIMEOUT_S = 300
pytestmark = [pytest.mark.cli, pytest.mark.slow]


def _cases(draw) -> dict:
    """case → (files, what must happen, a change after writing: a pipe or a link in place of a file)."""
    beir = READERS["beir"]
    valid = draw(beir.model)
    conflict = copy.deepcopy(draw(beir.model))
    refused = MUTATIONS["duplicate_id_other_content"].apply(draw, beir, conflict, "qrels/test.tsv")
    assert isinstance(refused, Refused)
    return {
        "valid": (valid, None, None),
        "conflicting_grade": (conflict, refused.needles, None),
        "fifo_queries": (draw(beir.model), ["queries.jsonl"], ("queries.jsonl", "fifo")),
        "corpus_links_outside": (draw(beir.model), None, ("corpus.jsonl", "symlink_outside")),
    }


def _trec(run: Path) -> list[list[str]]:
    (trec,) = run.glob("eval/*/run.trec")
    return [line.split(" ") for line in trec.read_text(encoding="utf-8").split("\n") if line]


def test_generated_collections_through_the_cli(tmp_path: Path, shared_cache: Path) -> None:
    drawn: list[dict] = []
    explore("cli sample", 3, lambda draw: drawn.append(_cases(draw)), shrink=False)
    cases = drawn[-1]  # the last drawn (the first is hypothesis' simplest example)

    inputs, runs, work = tmp_path / "inputs", tmp_path / "runs", tmp_path / "work"
    work.mkdir()
    for name, (files, _, change) in cases.items():
        write_files(inputs / name, files)
        if change is not None:
            replace_file(inputs / name / change[0], change[1], tmp_path / "outside")
    before = snapshot(tmp_path)

    done = run_vtlab_together(
        {name: [*EVAL, f"eval.path={inputs / name}", f"hydra.run.dir={runs / name}"] for name in cases},
        cwd=work,  # anything written relative to the working directory lands in the compared tree
        timeout=TIMEOUT_S,
    )

    for name, (files, needles, _) in cases.items():
        run, err, rc = runs / name, done[name].stderr, done[name].returncode
        status = json.loads((run / "status.json").read_text())
        if needles is None:
            assert rc == 0, f"{name}: exit {rc}\n{err[-3000:]}"
            assert status["status"] == "done" and status["error"] is None, status
            want = beir_expected(files)
            rows = _trec(run)  # ids exactly as written ("007" is not "7"); a query no document matches ranks none
            assert {r[0] for r in rows} <= set(want["queries"]), f"{name}: run.trec holds other queries"
            assert {r[2] for r in rows} <= set(want["corpus"]), f"{name}: a document id not written in corpus.jsonl"
            assert len({(r[0], r[2]) for r in rows}) == len(rows), f"{name}: a document twice in one ranking"
            (per_query,) = run.glob("eval/*/per_query.json")  # measured: the queries with a positive grade
            for measure, values in json.loads(per_query.read_text(encoding="utf-8")).items():
                assert set(values) == set(judged_queries(want["qrels"])), f"{name}: {measure} over other queries"
        else:
            assert rc == 2, f"{name}: exit {rc}\n{err[-3000:]}"
            line = one_error_line(err, needles)
            assert status["status"] == "failed" and status["error"] == line.removeprefix("vtlab: error: "), status
            assert not list(run.glob("eval/*/metrics.json"))

    after = snapshot(tmp_path)
    outside_runs = {k: v for k, v in after.items() if not k.startswith("runs")}
    assert outside_runs == {k: v for k, v in before.items() if not k.startswith("runs")}, (
        "a run changed something outside its run directory: "
        f"{sorted(set(outside_runs.items()) ^ {(k, v) for k, v in before.items() if not k.startswith('runs')})[:5]}"
    )
