"""`python -m vtlab.report RUN_DIR RUN_DIR ...`: single runs side by side, from hand-written run directories (the files
`python -m vtlab` writes, in their format: vtlab.evaluation.outputs.write_outputs), against the hand-written numbers."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import matplotlib.image
import pytest
import yaml

from vtlab.report.cli import main
from vtlab.report.comparison import build_comparison

# per run: {collection: (nDCG@10, query active dims, doc active dims)}, and per-query nDCG@10 whose means are those
A_METRICS = {"scifact": (0.6, 20.0, 150.0), "nfcorpus": (0.3, 18.0, 120.0)}
B_METRICS = {"scifact": (0.65, 25.0, 170.0), "nfcorpus": (0.32, 22.5, 131.25)}
A_QUERIES = {"scifact": {"q1": 0.5, "q2": 0.7}, "nfcorpus": {"n1": 0.2, "n2": 0.4, "n3": 0.3}}
B_QUERIES = {"scifact": {"q1": 0.6, "q2": 0.7}, "nfcorpus": {"n1": 0.1, "n2": 0.5, "n3": 0.36}}


def write_run(
    root: Path,
    name: str,
    metrics: dict[str, tuple[float, float, float]] | None,
    per_query: dict[str, dict[str, float]] | None = None,
    status: str = "done",
) -> Path:
    """A run directory as `python -m vtlab` leaves it: outputs/runs/<date>/<time>-<name>/ with .hydra/, status.json
    and eval/<collection>/metrics.json (+ per_query.json {measure: {query id: value}}, where given; eval/summary.json
    with several collections)."""
    run = root / "outputs" / "runs" / "2026-01-01" / f"10-00-00-{name}"
    (run / ".hydra").mkdir(parents=True)
    config = f"name: {name}\nseed: 0\npaths:\n  run_dir: ${{hydra:runtime.output_dir}}\n"  # unresolvable, as recorded
    (run / ".hydra" / "config.yaml").write_text(config)
    (run / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([f"name={name}"]))
    status_record = {"status": status, "name": name, "overrides": [f"name={name}"], "error": None}
    (run / "status.json").write_text(json.dumps(status_record))
    for dataset, (ndcg, q, d) in (metrics or {}).items():
        out = run / "eval" / dataset
        out.mkdir(parents=True)
        if per_query is not None and dataset in per_query:
            values = per_query[dataset]
            (out / "per_query.json").write_text(json.dumps({"nDCG@10": values, "RR@10": values}))
        report = {
            "collection": {"name": dataset, "n_docs": 10, "n_queries": 3, "n_judged_queries": 3},
            "measures": ["nDCG@10", "RR@10"],
            "top_k": 100,
            "budgets": [],
            "metrics": {"nDCG@10": ndcg, "RR@10": ndcg, "query_active_dims": q, "doc_active_dims": d, "flops": 1.5},
            "index": {"type": "InvertedIndex", "backend": None},
        }
        (out / "metrics.json").write_text(json.dumps(report))
    if len(metrics or {}) > 1:  # the suite's order (vtlab.stages.evaluate), which the table keeps
        results = {ds: json.loads((run / "eval" / ds / "metrics.json").read_text())["metrics"] for ds in metrics}
        (run / "eval" / "summary.json").write_text(json.dumps({"datasets": results, "average": {}}))
    return run


@pytest.fixture
def runs(tmp_path: Path) -> list[Path]:
    """native and vt with per-query values; old: an earlier run without per_query.json, evaluated on scifact only."""
    return [
        write_run(tmp_path, "native", A_METRICS, A_QUERIES),
        write_run(tmp_path, "vt", B_METRICS, B_QUERIES),
        write_run(tmp_path, "old", {"scifact": (0.55, 30.0, 200.0)}),
    ]


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")}


def test_runs_side_by_side_table_png_and_per_query_differences(runs: list[Path], tmp_path: Path, capsys) -> None:
    before = [_files(r) for r in runs]
    out = tmp_path / "cmp"
    assert main([*map(str, runs), "--out", str(out), "--permutations", "200"]) == 0
    assert [_files(r) for r in runs] == before  # nothing written into a compared run

    with open(out / "compare.csv", newline="") as f:
        rows = {r["run"]: r for r in csv.DictReader(f)}
    assert list(rows) == ["native", "vt", "old"]
    for label, metrics in (("native", A_METRICS), ("vt", B_METRICS)):
        for dataset, (ndcg, q, d) in metrics.items():
            assert float(rows[label][f"{dataset} nDCG@10"]) == ndcg
            assert float(rows[label][f"{dataset} q dims"]) == q
            assert float(rows[label][f"{dataset} d dims"]) == d
        assert float(rows[label]["avg nDCG@10"]) == pytest.approx(sum(m[0] for m in metrics.values()) / 2)
    assert float(rows["old"]["scifact nDCG@10"]) == 0.55 and rows["old"]["nfcorpus nDCG@10"] == ""
    assert rows["old"]["avg nDCG@10"] == ""  # not evaluated on every collection: no average
    assert rows["vt"]["path"] == str(runs[1]) and rows["vt"]["status"] == "done"

    with open(out / "per_query.csv", newline="") as f:
        deltas = {(r["run"], r["set"], r["query"]): float(r["delta"]) for r in csv.DictReader(f)}
    expected = {("vt", ds, q): B_QUERIES[ds][q] - A_QUERIES[ds][q] for ds in A_QUERIES for q in A_QUERIES[ds]}
    assert deltas == pytest.approx(expected)

    md = (out / "compare.md").read_text()
    assert "| native | 0.6000 | 20.0 | 150.0 | 0.3000 | 18.0 | 120.0 | 0.4500 | 19.0 | 135.0 |" in md
    assert "| vt | scifact | 2 | 0.6000 | 0.6500 | +0.0500 |" in md  # Δ = run − first over the paired queries
    assert "| 1/1/0 |" in md and "| 2/0/1 |" in md  # better/same/worse: scifact, nfcorpus
    assert "| old | scifact |" in md and "no per-query nDCG@10" in md  # named, not dropped
    assert capsys.readouterr().out == md + "\n"  # the markdown is also printed

    assert (out / "compare.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    image = matplotlib.image.imread(out / "compare.png")
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100


def test_it_says_what_it_read_and_wrote(runs: list[Path], tmp_path: Path, capsys) -> None:
    out = tmp_path / "cmp"
    assert main([str(runs[0]), str(runs[1]), "--out", str(out), "--permutations", "50"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[:2] == [
        f"read native: {runs[0]} (done; scifact, nfcorpus)",
        f"read vt: {runs[1]} (done; scifact, nfcorpus)",
    ]
    written = [out / n for n in ("compare.md", "compare.csv", "per_query.csv", "compare.png")]
    assert err[2:] == [f"wrote {', '.join(map(str, written))}"]
    assert all(p.is_file() for p in written)


def test_default_out_is_outputs_compare_date_time(runs: list[Path], tmp_path: Path, monkeypatch) -> None:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    assert main([str(runs[0]), str(runs[1]), "--permutations", "50"]) == 0
    [png] = (work / "outputs" / "compare").glob("*/*/compare.png")
    assert png.stat().st_size > 0


def test_runs_sharing_a_name_are_told_apart_by_directory(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a", "same", A_METRICS)
    b = write_run(tmp_path / "b", "same", B_METRICS)
    assert build_comparison([a, b], "nDCG@10").labels == ["same (10-00-00-same) #1", "same (10-00-00-same) #2"]


def _refused(argv: list[str], capsys) -> str:
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and captured.out == "", captured.err
    return lines[0]


def test_one_run_is_refused(runs: list[Path], tmp_path: Path, capsys) -> None:
    line = _refused([str(runs[0]), "--out", str(tmp_path / "cmp")], capsys)
    assert line.startswith(f"vtlab: error: {runs[0]}: one run directory; a comparison needs two or more")
    assert not (tmp_path / "cmp").exists()


def test_a_run_with_a_directory_that_is_no_run_is_refused(runs: list[Path], tmp_path: Path, capsys) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    line = _refused([str(runs[0]), str(notes), "--out", str(tmp_path / "cmp")], capsys)
    assert line.startswith(f"vtlab: error: {notes}: not a run directory (.hydra/ or status.json")
    assert not (tmp_path / "cmp").exists()


def test_a_path_that_is_no_directory_is_named(runs: list[Path], tmp_path: Path, capsys) -> None:
    line = _refused([str(runs[0]), str(tmp_path / "nope"), "--out", str(tmp_path / "cmp")], capsys)
    assert line == f"vtlab: error: {tmp_path / 'nope'}: no such directory"


def test_a_run_mixed_with_a_sweep_is_refused(runs: list[Path], tmp_path: Path, capsys) -> None:
    sweep = tmp_path / "multirun" / "2026-01-01" / "10-00-00"
    sweep.mkdir(parents=True)
    (sweep / "multirun.yaml").write_text("hydra: {}\n")
    line = _refused([str(sweep), str(runs[0]), str(runs[1])], capsys)
    assert line.startswith(f"vtlab: error: {sweep}: not a run directory")
    assert "give Hydra sweep directories (multirun.yaml) on their own" in line


def test_a_run_that_evaluated_nothing_is_refused(runs: list[Path], tmp_path: Path, capsys) -> None:
    failed = write_run(tmp_path / "f", "broken", None, status="failed")
    line = _refused([str(runs[0]), str(failed), "--out", str(tmp_path / "cmp")], capsys)
    assert line == (
        f"vtlab: error: {failed}: no eval/<collection>/metrics.json (expected a run that evaluated a collection; "
        "its status: failed)"
    )
    assert not (tmp_path / "cmp").exists()


@pytest.mark.parametrize("where", ["inside", "itself"])
def test_out_inside_a_compared_run_is_refused(runs: list[Path], capsys, where: str) -> None:
    out = runs[1] / "cmp" if where == "inside" else runs[1]
    before = _files(runs[1])
    line = _refused([str(runs[0]), str(runs[1]), "--out", str(out)], capsys)
    assert line.startswith(f"vtlab: error: --out {out}: inside the compared run {runs[1]}")
    assert _files(runs[1]) == before


def test_the_same_run_twice_and_an_unknown_measure_are_refused(runs: list[Path], tmp_path: Path, capsys) -> None:
    line = _refused([str(runs[0]), str(runs[0]), "--out", str(tmp_path / "cmp")], capsys)
    assert line.startswith(f"vtlab: error: {runs[0]}: given twice")
    line = _refused([str(runs[0]), str(runs[1]), "--measure", "P@5", "--out", str(tmp_path / "cmp")], capsys)
    assert line.startswith("vtlab: error: --measure 'P@5': no metrics.json of the runs has it (available: RR@10,")
    assert not (tmp_path / "cmp").exists()


def test_a_malformed_metrics_json_names_the_file(runs: list[Path], tmp_path: Path, capsys) -> None:
    bad = runs[1] / "eval" / "scifact" / "metrics.json"
    bad.write_text('{"metrics": {"nDCG@10": 0.5')
    line = _refused([str(runs[0]), str(runs[1]), "--out", str(tmp_path / "cmp")], capsys)
    assert line.startswith(f"vtlab: error: {bad}: malformed metrics.json")


def test_per_query_values_for_other_queries_are_named_not_paired(runs: list[Path], tmp_path: Path) -> None:
    (runs[1] / "eval" / "scifact" / "per_query.json").write_text(json.dumps({"nDCG@10": {"q1": 0.6, "zz": 0.7}}))
    comparison = build_comparison(runs[:2], "nDCG@10", permutations=50)
    scifact = next(x for x in comparison.diffs if x.dataset == "scifact")
    assert scifact.result is None and "query sets differ" in scifact.note and not scifact.pairs
    assert next(x for x in comparison.diffs if x.dataset == "nfcorpus").result is not None


def test_compare_csv_is_one_line_per_run(runs: list[Path], tmp_path: Path) -> None:
    assert main([*map(str, runs[:2]), "--out", str(tmp_path / "cmp"), "--permutations", "50"]) == 0
    lines = list(csv.reader(io.StringIO((tmp_path / "cmp" / "compare.csv").read_text())))
    assert len(lines) == 3 and lines[0][:3] == ["run", "path", "status"]
