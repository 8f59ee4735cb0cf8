"""vtlab.report: tables from hand-written Hydra sweep directories, against hand-computed means and sample stds."""

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from vtlab.report.cli import main
from vtlab.report.render import to_csv, to_latex, to_markdown
from vtlab.report.tables import build_table

EXPERIMENT = "+experiment=testbed/ablation-init"


def write_multirun(sweep: Path, task: list[str], params: dict | None = None, config_dir: Path | None = None) -> None:
    """The parts of a real multirun.yaml the report reads (BasicSweeper, params, task overrides, config sources)."""
    sources = [{"path": "hydra.conf", "schema": "pkg", "provider": "hydra"}]
    if config_dir is not None:
        sources.append({"path": str(config_dir), "schema": "file", "provider": "main"})
    multirun = {
        "hydra": {
            "sweeper": {
                "_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper",
                "max_batch_size": None,
                "params": params,
            },
            "overrides": {"hydra": ["hydra.mode=MULTIRUN"], "task": task},
            "runtime": {"output_dir": "???", "config_sources": sources},
        },
        "name": "quickstart",
        "run_dir": "${hydra:runtime.output_dir}",
    }
    sweep.mkdir(parents=True, exist_ok=True)
    (sweep / "multirun.yaml").write_text(yaml.safe_dump(multirun, sort_keys=False))


def write_job(
    sweep: Path,
    num: int,
    overrides: list[str],
    name: str,
    status: str | None = "done",
    error: str | None = None,
    metrics: dict[str, dict[str, float]] | None = None,
    per_query: dict[str, dict[str, dict[str, float]]] | None = None,
    config_extra: str = "",
) -> Path:
    """A job directory as `python -m vtlab -m` leaves it: .hydra/, status.json, eval/<collection>/metrics.json (and
    per_query.json, {measure key: {query id: value}}, for the collections in `per_query`)."""
    job = sweep / str(num)
    (job / ".hydra").mkdir(parents=True)
    seed = next((int(o.split("=")[1]) for o in overrides if o.startswith("seed=")), 0)
    # unresolvable outside Hydra, as in real job configs: the report must not resolve the whole config
    (job / ".hydra" / "config.yaml").write_text(
        f"name: {name}\nseed: {seed}\npaths:\n  run_dir: ${{hydra:runtime.output_dir}}\n{config_extra}"
    )
    for dataset, values in (per_query or {}).items():
        (job / "eval" / dataset).mkdir(parents=True, exist_ok=True)
        (job / "eval" / dataset / "per_query.json").write_text(json.dumps(values))
    (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    (job / ".hydra" / "hydra.yaml").write_text(yaml.safe_dump({"hydra": {"job": {"num": num, "name": "__main__"}}}))
    if status is not None:
        (job / "status.json").write_text(
            json.dumps(
                {
                    "status": status,
                    "name": name,
                    "overrides": overrides,
                    "started": "2026-01-01T00:00:00+00:00",
                    "finished": None,
                    "seconds": None,
                    "error": error,
                }
            )
        )
    for dataset, values in (metrics or {}).items():
        (job / "eval" / dataset).mkdir(parents=True, exist_ok=True)
        (job / "eval" / dataset / "metrics.json").write_text(
            json.dumps(
                {
                    "collection": {"name": dataset, "n_docs": 10, "n_queries": 5},
                    "measures": ["nDCG@10", "RR@10"],
                    "top_k": 100,
                    "metrics": values,
                    "index": None,
                }
            )
        )
    return job


def m(ndcg: float, flops: float, q: float, d: float, rr: float = 0.5) -> dict[str, float]:
    return {
        "nDCG@10": ndcg,
        "RR@10": rr,
        "R@100": 0.9,
        "query_active_dims": q,
        "doc_active_dims": d,
        "flops": flops,
        "encode_query_s": 1.0,
    }


@pytest.fixture
def ablation(tmp_path: Path) -> Path:
    """`python -m vtlab -m +experiment=testbed/ablation-init seed=0,1`, whose config sweeps init over 3 values.

    BasicSweeper order: sweeper params first, then the command line → jobs 0..5 =
    (mean,0) (mean,1) (subword,0) (subword,1) (semantic,0) (semantic,1).
    Job 3 failed, job 5 never started (no directory).
    """
    sweep = tmp_path / "multirun" / "2026-01-01" / "10-00-00-ablation-init"
    write_multirun(sweep, [EXPERIMENT, "seed=0,1"], params={"init": "mean,subword,semantic"})

    def job(num: int, init: str, seed: int, **kw) -> None:
        write_job(sweep, num, [f"init={init}", EXPERIMENT, f"seed={seed}"], "ablation-init", **kw)

    job(0, "mean", 0, metrics={"boolq": m(0.80, 1.0, 10, 100, rr=0.70), "scifact": m(0.60, 3.0, 14, 140, rr=0.50)})
    job(1, "mean", 1, metrics={"boolq": m(0.82, 2.0, 12, 120, rr=0.74), "scifact": m(0.64, 4.0, 16, 160, rr=0.52)})
    job(2, "subword", 0, metrics={"boolq": m(0.75, 0.5, 8, 80), "scifact": m(0.55, 1.5, 10, 100)})
    job(3, "subword", 1, status="failed", error="RuntimeError: CUDA out of memory | tried 2 GiB")
    job(4, "semantic", 0, metrics={"boolq": m(0.84, 2.0, 20, 200), "scifact": m(0.66, 2.0, 20, 200)})
    return sweep


# Hand arithmetic for row init=mean (seeds 0 and 1), sample std (ddof=1) of two values = |a - b| / √2:
#   boolq nDCG@10   0.80, 0.82          → 0.8100 ± 0.0141 (0.02/√2 = 0.01414)
#   scifact nDCG@10 0.60, 0.64          → 0.6200 ± 0.0283 (0.04/√2 = 0.02828)
#   avg nDCG@10     seed0 (0.80+0.60)/2 = 0.70, seed1 (0.82+0.64)/2 = 0.73 → 0.7150 ± 0.0212 (0.03/√2)
#   avg FLOPS       seed0 (1+3)/2 = 2,  seed1 (2+4)/2 = 3           → 2.500 ± 0.707
#   avg q dims      seed0 (10+14)/2 = 12, seed1 (12+16)/2 = 14      → 13.0 ± 1.4
#   avg d dims      seed0 120, seed1 140                             → 130.0 ± 14.1
# init=subword: seed 0 only (seed 1 failed): 0.7500, 0.5500, avg 0.6500, FLOPS 1.000, q 9.0, d 90.0, no std
# init=semantic: seed 0 only (seed 1 missing): 0.8400, 0.6600, avg 0.7500, FLOPS 2.000, q 20.0, d 200.0
HEADER = [
    "run",
    "n",
    "boolq nDCG@10",
    "scifact nDCG@10",
    "avg nDCG@10",
    "avg FLOPS",
    "avg q dims",
    "avg d dims",
    "status",
]
EXPECTED_ROWS = [
    [
        "init=mean",
        "2",
        "0.8100 ± 0.0141",
        "0.6200 ± 0.0283",
        "0.7150 ± 0.0212",
        "2.500 ± 0.707",
        "13.0 ± 1.4",
        "130.0 ± 14.1",
        "ok",
    ],
    [
        "init=subword",
        "1",
        "0.7500",
        "0.5500",
        "0.6500",
        "1.000",
        "9.0",
        "90.0",
        "failed (seed=1): RuntimeError: CUDA out of memory \\| tried 2 GiB",
    ],
    ["init=semantic", "1", "0.8400", "0.6600", "0.7500", "2.000", "20.0", "200.0", "missing (seed=1)"],
]


def md_rows(markdown: str) -> list[list[str]]:
    """Table lines → cells (an escaped `\\|` stays inside its cell)."""
    lines = [ln for ln in markdown.splitlines() if ln.startswith("| ")]
    return [[c.strip() for c in ln.strip("|").replace("\\|", "\0").split(" | ")] for ln in lines]


def test_markdown_cells_against_hand_arithmetic(ablation: Path) -> None:
    table = build_table(ablation)
    assert table.title == "ablation-init"  # the jobs' common name
    md = to_markdown(table)
    rows = [[c.replace("\0", "\\|") for c in r] for r in md_rows(md)]
    assert rows[0] == HEADER
    assert rows[1:] == EXPECTED_ROWS  # sweep order; failed and missing seeds shown, not dropped
    assert "sample std (ddof=1)" in md
    assert "jobs: 6 expected from multirun.yaml, 5 present" in md


def test_rows_numbers(ablation: Path) -> None:
    table = build_table(ablation)
    mean, subword, semantic = table.rows
    avg = mean.cells[2]
    assert avg.values == pytest.approx([0.70, 0.73])
    assert avg.mean == pytest.approx(0.715) and avg.std == pytest.approx(0.03 / 2**0.5)
    assert subword.n == 1 and subword.cells[0].std is None
    assert subword.notes == ["failed (seed=1): RuntimeError: CUDA out of memory | tried 2 GiB"]
    assert semantic.notes == ["missing (seed=1)"]


def test_csv_parses(ablation: Path) -> None:
    rows = list(csv.reader(io.StringIO(to_csv(build_table(ablation)))))
    assert rows[0][:5] == ["run", "n", "boolq nDCG@10", "boolq nDCG@10 std", "boolq nDCG@10 n"]
    assert rows[0][-1] == "status" and len(rows[0]) == 2 + 6 * 3 + 1
    assert [r[0] for r in rows[1:]] == ["init=mean", "init=subword", "init=semantic"]
    mean = dict(zip(rows[0], rows[1]))
    assert float(mean["boolq nDCG@10"]) == pytest.approx(0.81)
    assert float(mean["boolq nDCG@10 std"]) == pytest.approx(0.02 / 2**0.5)
    assert float(mean["avg FLOPS"]) == pytest.approx(2.5) and mean["avg FLOPS n"] == "2"
    subword = dict(zip(rows[0], rows[2]))
    assert subword["n"] == "1" and subword["boolq nDCG@10 std"] == ""
    assert subword["status"] == "failed (seed=1): RuntimeError: CUDA out of memory | tried 2 GiB"  # whole, unescaped
    assert dict(zip(rows[0], rows[3]))["status"] == "missing (seed=1)"


def test_latex_has_the_same_rows(ablation: Path) -> None:
    tex = to_latex(build_table(ablation))
    body = tex.split(r"\midrule")[1].split(r"\bottomrule")[0].strip().splitlines()
    assert r"\begin{tabular}{lrrrrrrrl}" in tex and r"\toprule" in tex and r"\end{tabular}" in tex
    assert body[0] == (
        r"init=mean & 2 & 0.8100 $\pm$ 0.0141 & 0.6200 $\pm$ 0.0283 & 0.7150 $\pm$ 0.0212 & "
        r"2.500 $\pm$ 0.707 & 13.0 $\pm$ 1.4 & 130.0 $\pm$ 14.1 & ok \\"
    )
    assert body[1].startswith("init=subword & 1 & 0.7500 &")
    assert body[1].endswith(r"& failed (seed=1): RuntimeError: CUDA out of memory \textbar{} tried 2 GiB \\")
    assert body[2].endswith(r"& missing (seed=1) \\")
    assert len(body) == 3
    header = tex.split(r"\toprule")[1].split(r"\midrule")[0].strip()
    assert header.startswith(r"run & n & boolq nDCG@10") and "avg q dims" in header


def test_latex_escapes() -> None:
    from vtlab.report.render import latex_escape

    assert latex_escape("a_b 50% R&D #1 {x} ~^\\ a|b $") == (
        r"a\_b 50\% R\&D \#1 \{x\} \textasciitilde{}\textasciicircum{}\textbackslash{} a\textbar{}b \$"
    )


def test_cli_writes_files_and_prints_markdown(ablation: Path, tmp_path: Path, capsys) -> None:
    assert main([str(ablation)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("### ablation-init") and "| init=semantic | 1 |" in out
    assert (ablation / "table.md").read_text() == to_markdown(build_table(ablation))
    assert (ablation / "table.csv").is_file() and (ablation / "table.tex").is_file()
    assert not list(ablation.glob(".table*"))  # no temp files left
    # --measure: another column set; --out with several sweeps: one sub-directory each
    out_dir = tmp_path / "tables"
    assert main([str(ablation), str(ablation), "--measure", "RR@10", "--out", str(out_dir)]) == 0
    written = sorted(p.relative_to(out_dir).as_posix() for p in out_dir.rglob("table.md"))
    assert written == ["2026-01-01_10-00-00-ablation-init_0/table.md", "2026-01-01_10-00-00-ablation-init_1/table.md"]
    md = (out_dir / written[0]).read_text()
    # RR@10 of init=mean: boolq 0.70, 0.74 → 0.7200 ± 0.0283; avg per seed 0.60, 0.63 → 0.6150 ± 0.0212
    assert "| init=mean | 2 | 0.7200 ± 0.0283 | 0.5100 ± 0.0141 | 0.6150 ± 0.0212 |" in md


@pytest.mark.cli
def test_cli_not_a_sweep_dir_exits_2_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("x")
    proc = subprocess.run(
        [sys.executable, "-m", "vtlab.report", str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"vtlab: error: {tmp_path}: not a Hydra sweep directory (expected multirun.yaml or <n>/.hydra/) nor a run "
        "directory (.hydra/ or status.json)"
    ]
    assert proc.stdout == ""


def test_malformed_metrics_names_the_file(ablation: Path, capsys) -> None:
    bad = ablation / "2" / "eval" / "scifact" / "metrics.json"
    bad.write_text('{"metrics": {"nDCG@10": 0.5')
    assert main([str(ablation)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"vtlab: error: {bad}: malformed metrics.json")
    assert not (ablation / "table.md").exists()


def test_unknown_measure_exits_2(ablation: Path, capsys) -> None:
    assert main([str(ablation), "--measure", "P@5"]) == 2
    assert "no metrics.json has the measure 'P@5'" in capsys.readouterr().err


def test_no_multirun_yaml_incomplete_and_names(tmp_path: Path) -> None:
    """Without multirun.yaml the present job dirs are the table; names differ across jobs → rows are labelled by name.
    Job 1 is still running (its boolq metrics are not aggregated), job 2 has no status.json and no metrics, job 3 has
    no status.json but metrics (a run from before status.json: done)."""
    sweep = tmp_path / "sweep"
    write_job(sweep, 0, ["experiment=a", "seed=0"], "exp-a", metrics={"boolq": m(0.5, 1.0, 10, 100)})
    write_job(sweep, 1, ["experiment=a", "seed=1"], "exp-a", status="running", metrics={"boolq": m(0.9, 9, 90, 900)})
    write_job(sweep, 2, ["experiment=b", "seed=0"], "exp-b", status=None)
    write_job(sweep, 3, ["experiment=c", "seed=0"], "exp-c", status=None, metrics={"boolq": m(0.7, 2.0, 20, 200)})
    table = build_table(sweep)
    assert table.title == "tmp_path_dir/sweep".replace("tmp_path_dir", tmp_path.name)  # names differ: the dir name
    rows = md_rows(to_markdown(table))[1:]
    assert rows == [
        ["exp-a", "1", "0.5000", "0.5000", "1.000", "10.0", "100.0", "incomplete (seed=1)"],
        ["exp-b", "0", "–", "–", "–", "–", "–", "incomplete (seed=0)"],
        ["exp-c", "1", "0.7000", "0.7000", "2.000", "20.0", "200.0", "ok"],
    ]
    assert "jobs: the 4 job directories present (no multirun.yaml)" in to_markdown(table)


def test_a_seed_stopped_by_the_collapse_detector_is_counted_and_named(tmp_path: Path) -> None:
    """A job whose training the collapse detector stopped (collapse.json beside status.json "done") is evaluated and
    counted like any seed, and the row's status names it, so a collapsed seed cannot hide inside a mean ± std."""
    sweep = tmp_path / "sweep"
    write_job(sweep, 0, ["experiment=a", "seed=0"], "exp-a", metrics={"boolq": m(0.8, 1.0, 10, 100)})
    dead = write_job(sweep, 1, ["experiment=a", "seed=1"], "exp-a", metrics={"boolq": m(0.0, 0.0, 0, 0)})
    (dead / "collapse.json").write_text(json.dumps({"kind": "dead", "side": "query", "step": 24}))
    write_job(sweep, 2, ["experiment=b", "seed=0"], "exp-b", metrics={"boolq": m(0.7, 1.0, 10, 100)})
    rows = md_rows(to_markdown(build_table(sweep)))[1:]
    assert rows[0][:3] == ["exp-a", "2", "0.4000 ± 0.5657"]
    assert rows[0][-1] == "collapsed (seed=1): dead collapse on the query side at step 24, training stopped there"
    assert rows[1][-1] == "ok"
    (dead / "collapse.json").write_text("{not json")
    assert (
        "collapsed (seed=1): the collapse detector fired, its record unreadable"
        in md_rows(to_markdown(build_table(sweep)))[1][-1]
    )


def test_glob_over_a_config_group_and_collection_sweep(tmp_path: Path) -> None:
    """`experiment=glob(*) eval=boolq,scifact` expanded with Hydra's parser against the sweep's config dir: 2 rows ×
    2 collections = 4 jobs; only experiment a ran (jobs 0, 1), so b's two jobs are missing. Jobs that differ only in
    the collection fill the columns of one row."""
    conf = tmp_path / "conf"
    (conf / "experiment").mkdir(parents=True)
    for exp in ("a", "b"):
        (conf / "experiment" / f"{exp}.yaml").write_text(f"# @package _global_\nname: exp-{exp}\n")
    sweep = tmp_path / "sweep"
    write_multirun(sweep, ["experiment=glob(*)", "eval=boolq,scifact"], config_dir=conf)
    write_job(sweep, 0, ["experiment=a", "eval=boolq"], "exp-a", metrics={"boolq": m(0.8, 1.0, 10, 100)})
    write_job(sweep, 1, ["experiment=a", "eval=scifact"], "exp-a", metrics={"scifact": m(0.6, 3.0, 30, 300)})
    rows = md_rows(to_markdown(build_table(sweep)))
    assert rows[0][2:5] == ["boolq nDCG@10", "scifact nDCG@10", "avg nDCG@10"]
    # names are all exp-a where known, so rows are labelled by the varying overrides; avg = (0.8 + 0.6) / 2
    assert rows[1:] == [
        ["experiment=a", "1", "0.8000", "0.6000", "0.7000", "2.000", "20.0", "200.0", "ok"],
        ["experiment=b", "0", "–", "–", "–", "–", "–", "–", "missing (eval=boolq); missing (eval=scifact)"],
    ]


def test_expansion_that_disagrees_with_the_jobs_falls_back(tmp_path: Path) -> None:
    """A config dir changed since the sweep (or gone) must not invent missing rows: trust the directories."""
    sweep = tmp_path / "sweep"
    write_multirun(sweep, ["experiment=glob(*)"], config_dir=tmp_path / "gone")
    write_job(sweep, 0, ["experiment=a"], "exp-a", metrics={"boolq": m(0.8, 1.0, 10, 100)})
    md = to_markdown(build_table(sweep))
    assert "jobs: the 1 job directories present (multirun.yaml expands to no job)" in md
    assert [r[0] for r in md_rows(md)[1:]] == ["exp-a"]


def test_columns_follow_the_suite_order(tmp_path: Path) -> None:
    """A run evaluated on a suite writes eval/summary.json; its dataset order (the paper's) orders the columns."""
    sweep = tmp_path / "sweep"
    job = write_job(
        sweep, 0, ["seed=0"], "suite", metrics={"boolq": m(0.8, 1.0, 10, 100), "scifact": m(0.6, 3.0, 30, 300)}
    )
    (job / "eval" / "summary.json").write_text(json.dumps({"datasets": {"scifact": {}, "boolq": {}}, "average": {}}))
    rows = md_rows(to_markdown(build_table(sweep)))
    assert rows[0][2:4] == ["scifact nDCG@10", "boolq nDCG@10"]
    assert rows[1][:4] == ["suite", "1", "0.6000", "0.8000"]  # one row: nothing varies, labelled by the name


def test_shared_names_get_their_overrides_and_no_metrics_is_shown(tmp_path: Path) -> None:
    """Names differ across the sweep but exp-a covers two rows: those rows say which (lr=…). A job that finished
    without evaluating anything (stage=transfer, eval=none) is not silently a row of blanks: "no metrics"."""
    sweep = tmp_path / "sweep"
    write_job(sweep, 0, ["experiment=a", "lr=1"], "exp-a", metrics={"boolq": m(0.8, 1.0, 10, 100)})
    write_job(sweep, 1, ["experiment=a", "lr=2"], "exp-a", metrics={"boolq": m(0.6, 1.0, 10, 100)})
    write_job(sweep, 2, ["experiment=b", "lr=1"], "exp-b")
    rows = md_rows(to_markdown(build_table(sweep)))[1:]
    assert [r[0] for r in rows] == ["exp-a (lr=1)", "exp-a (lr=2)", "exp-b"]
    assert rows[2][1] == "0" and rows[2][-1] == "no metrics (job 2)"


# ------------------------------------------------------------------------------------------------ contrasts

import itertools  # noqa: E402

import numpy as np  # noqa: E402
from scipy import stats as scipy_stats  # noqa: E402

from vtlab.report.contrasts import build_contrasts  # noqa: E402
from vtlab.report.plot import tradeoff_points  # noqa: E402

QUERIES = {"boolq": [f"b{i}" for i in range(12)], "scifact": [f"s{i}" for i in range(8)]}
ROWS = {"bpe-vt": (0.55, 3), "bpe-native": (0.50, 2), "bpe-lowercase": (0.53, 2)}  # name: (level, seeds)
CONTRASTS_YAML = "report:\n  contrasts: [[bpe-vt, bpe-native]]\n"


@pytest.fixture
def contrast_sweep(tmp_path: Path) -> tuple[Path, dict]:
    """Three rows (experiments) × seeds, two collections, per-query nDCG@10 at full sparsity and at budget q4-d8; the
    metrics.json means are the per-query means, as evaluate() writes them. Returns the sweep and its per-query data
    {row: [seed: {dataset: {key: {qid: value}}}]}."""
    rng = np.random.default_rng(5)
    sweep = tmp_path / "sweep"
    data: dict[str, list] = {}
    num = 0
    for name, (level, n_seeds) in ROWS.items():
        data[name] = []
        for seed in range(n_seeds):
            per_query, metrics = {}, {}
            for dataset, qids in QUERIES.items():
                full = {q: float(np.clip(level + rng.normal(0, 0.15), 0, 1)) for q in qids}
                pruned = {q: v * 0.9 for q, v in full.items()}
                per_query[dataset] = {"nDCG@10": full, "nDCG@10@q4-d8": pruned}
                metrics[dataset] = {
                    **m(float(np.mean(list(full.values()))), 1.0 + seed, 10, 100),
                    "nDCG@10@q4-d8": float(np.mean(list(pruned.values()))),
                }
            data[name].append(per_query)
            write_job(
                sweep,
                num,
                [f"experiment={name}", f"seed={seed}"],
                name,
                metrics=metrics,
                per_query=per_query,
                config_extra=CONTRASTS_YAML,
            )
            num += 1
    return sweep, data


def seed_mean(data: dict, row: str, dataset: str, key: str) -> np.ndarray:
    """Per query (in QUERIES order), the mean over the row's seeds: written out with numpy, independent of vtlab."""
    return np.array([[seed[dataset][key][q] for q in QUERIES[dataset]] for seed in data[row]]).mean(axis=0)


def exact_p(a: np.ndarray, b: np.ndarray) -> float:
    d = a - b
    flips = np.array(list(itertools.product((-1.0, 1.0), repeat=d.size))) @ d
    return float(np.mean(np.abs(flips) >= abs(d.sum()) - 1e-12))


def test_contrasts_against_seed_means_scipy_and_exact_enumeration(contrast_sweep) -> None:
    sweep, data = contrast_sweep
    table = build_table(sweep)
    assert [(a, b) for a, b, _ in table.contrasts] == [("bpe-vt", "bpe-native")]  # from report.contrasts, once
    contrasts = build_contrasts(table)
    got = {(x.dataset, x.budget): x for x in contrasts.lines}
    assert list(got) == [
        ("boolq", "full"),
        ("scifact", "full"),
        ("all (pooled)", "full"),
        ("boolq", "q4-d8"),
        ("scifact", "q4-d8"),
        ("all (pooled)", "q4-d8"),
    ]
    for (dataset, budget), line in got.items():
        key = "nDCG@10" if budget == "full" else f"nDCG@10@{budget}"
        sets = QUERIES if dataset == "all (pooled)" else [dataset]
        a = np.concatenate([seed_mean(data, "bpe-vt", d, key) for d in sets])
        b = np.concatenate([seed_mean(data, "bpe-native", d, key) for d in sets])
        r = line.result
        assert (line.seeds_a, line.seeds_b, r.n) == (3, 2, a.size)
        assert r.mean_a == pytest.approx(a.mean()) and r.delta == pytest.approx(a.mean() - b.mean())
        assert r.p_t == pytest.approx(scipy_stats.ttest_rel(a, b).pvalue, rel=1e-9)
        d = a - b
        half = scipy_stats.t.ppf(0.975, d.size - 1) * d.std(ddof=1) / np.sqrt(d.size)
        assert (r.ci_low, r.ci_high) == pytest.approx((d.mean() - half, d.mean() + half))
        if d.size <= 12:  # 4,096 sign vectors: enumerate them all
            assert r.p_randomization == pytest.approx(exact_p(a, b), abs=0.02)
    # pooled: every query weighs the same, so Δ is the query-weighted mean of the two sets' Δs (12 and 8 queries)
    deltas = [got[(d, "full")].result.delta for d in QUERIES]
    assert got[("all (pooled)", "full")].result.delta == pytest.approx((12 * deltas[0] + 8 * deltas[1]) / 20)


def test_cli_contrast_files_and_tradeoff_plot(contrast_sweep, capsys) -> None:
    sweep, _ = contrast_sweep
    assert main([str(sweep), "--contrast", "bpe-vt,bpe-lowercase", "--contrast", "bpe-vt,bpe-native"]) == 0
    out = capsys.readouterr().out
    assert f"### contrasts: {sweep.parent.name}/sweep" in out
    assert "| bpe-vt − bpe-lowercase | boolq | full | 12 | 3/2 |" in out
    assert (sweep / "contrasts.md").read_text() in out
    rows = list(csv.DictReader(io.StringIO((sweep / "contrasts.csv").read_text())))
    # config contrast first, then the new CLI one (the repeated one once); 2 budgets × (2 sets + pooled) each
    assert [(r["a"], r["b"]) for r in rows[::6]] == [("bpe-vt", "bpe-native"), ("bpe-vt", "bpe-lowercase")]
    assert len(rows) == 12 and all(0 < float(r["p_randomization"]) <= 1 and r["note"] == "" for r in rows)
    assert (sweep / "tradeoff.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_tradeoff_points_are_the_seeds(contrast_sweep) -> None:
    sweep, data = contrast_sweep
    points = tradeoff_points(build_table(sweep))
    # avg FLOPS of seed s is 1 + s on both sets; avg nDCG@10 is the mean of the two sets' per-query means
    want = [
        (1.0 + s, np.mean([np.mean(list(seed[d]["nDCG@10"].values())) for d in QUERIES]))
        for s, seed in enumerate(data["bpe-vt"])
    ]
    assert np.array(points["bpe-vt"]) == pytest.approx(np.array(want))
    assert list(points) == list(ROWS)


def test_contrast_bad_inputs_one_line(contrast_sweep, capsys) -> None:
    sweep, _ = contrast_sweep
    assert main([str(sweep), "--contrast", "bpe-vt,bpe-cased"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "--contrast 'bpe-vt,bpe-cased': no table has both rows 'bpe-vt' and 'bpe-cased'" in err[0]
    config = sweep / "0" / ".hydra" / "config.yaml"
    assert not (sweep / "table.md").exists()  # a command-line mistake: fix it and rerun, nothing written
    # a recorded config's mistake cannot be fixed after the run: the tables are written, then one line and exit 2
    config.write_text(config.read_text().replace(CONTRASTS_YAML, "report:\n  contrasts: [[bpe-vt, bpe-typo]]\n"))
    assert main([str(sweep)]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if not ln.startswith("wrote ")]
    problem = (
        f"{config}: report.contrasts: 'bpe-typo' is not a row label of the table of {sweep} "
        "(rows: bpe-vt, bpe-native, bpe-lowercase)"
    )
    assert err == [f"vtlab: error: {problem}"]
    assert (sweep / "table.md").is_file() and f"not computed: {problem}." in (sweep / "contrasts.md").read_text()
    assert "| bpe-vt − bpe-native | boolq | full | 12 |" in (sweep / "contrasts.md").read_text()  # the others' lines
    config.write_text(config.read_text().replace("[[bpe-vt, bpe-typo]]", "[bpe-vt, bpe-native]"))
    assert main([str(sweep)]) == 2
    assert "report.contrasts must be a list of [row A, row B] pairs" in capsys.readouterr().err


def test_contrast_query_sets_must_match_and_old_runs_are_a_note(contrast_sweep, capsys) -> None:
    sweep, _ = contrast_sweep
    # bpe-native seed 1 (job 4) from before per-query metrics: the contrast says so instead of using one seed
    (sweep / "4" / "eval" / "scifact" / "per_query.json").unlink()
    lines = {(x.dataset, x.budget): x for x in build_contrasts(build_table(sweep)).lines}
    scifact = lines[("scifact", "full")]
    assert scifact.result is None and "no per-query nDCG@10 on scifact" in scifact.note
    assert lines[("all (pooled)", "full")].note == "not pooled: no per-query values on scifact"
    assert lines[("boolq", "full")].result is not None
    # a row evaluated on other queries than the other: an error, not a silently smaller sample
    path = sweep / "3" / "eval" / "boolq" / "per_query.json"
    values = json.loads(path.read_text())
    values["nDCG@10"]["b99"] = values["nDCG@10"].pop("b0")
    path.write_text(json.dumps(values))
    (sweep / "4" / "eval" / "boolq" / "per_query.json").write_text(json.dumps(values))
    assert main([str(sweep)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "contrast bpe-vt vs bpe-native on boolq: query sets differ" in err[0]
    # one seed of a row on other queries than its other seeds: an error too, naming the sweep and the row
    path.write_text((sweep / "0" / "eval" / "boolq" / "per_query.json").read_text())
    (sweep / "4" / "eval" / "boolq" / "per_query.json").write_text(json.dumps(values))
    assert main([str(sweep)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"vtlab: error: {sweep}: contrast bpe-vt vs bpe-native: bpe-native on "
        "boolq: seed 1 has other queries than seed 0"
    )


# ------------------------------------------------------------------------------------------------ seed level, Holm

from vtlab.report.render import contrasts_csv, contrasts_markdown  # noqa: E402


def seed_values(data: dict, row: str, seed: int, key: str = "nDCG@10") -> dict:
    return {d: data[row][seed][d][key] for d in QUERIES}


def test_contrast_lines_show_both_levels_side_by_side(contrast_sweep) -> None:
    sweep, data = contrast_sweep
    contrasts = build_contrasts(build_table(sweep))
    md = contrasts_markdown(contrasts)
    header = next(ln for ln in md.splitlines() if ln.startswith("| A − B"))
    for column in (
        "p query (sign-flip)",
        "p query (t)",
        "matched seeds",
        "Δ seeds",
        "p seed (t)",
        "p seed (sign-flip)",
        "p seed Holm",
        "reading",
    ):
        assert f"| {column} |" in header
    got = {(x.dataset, x.budget): x for x in contrasts.lines}
    pooled = got[("all (pooled)", "full")]
    # bpe-vt has seeds 0-2, bpe-native 0-1: seeds 0 and 1 are matched; per seed the mean of the two sets' mean Δs
    per_seed = [
        np.mean(
            [
                np.mean(
                    [
                        seed_values(data, "bpe-vt", s)[d][q] - seed_values(data, "bpe-native", s)[d][q]
                        for q in QUERIES[d]
                    ]
                )
                for d in QUERIES
            ]
        )
        for s in (0, 1)
    ]
    assert pooled.seed.seeds == ("0", "1") and pooled.seed.delta == pytest.approx(np.mean(per_seed))
    flips = [abs(s0 * per_seed[0] + s1 * per_seed[1]) for s0 in (-1, 1) for s1 in (-1, 1)]
    assert pooled.seed.p == pytest.approx(np.mean([f >= abs(sum(per_seed)) - 1e-12 for f in flips]))
    boolq = got[("boolq", "full")].seed  # one set: the plain per-seed mean difference on it
    assert boolq.delta == pytest.approx(
        np.mean(
            [
                np.mean(
                    [
                        seed_values(data, "bpe-vt", s)["boolq"][q] - seed_values(data, "bpe-native", s)["boolq"][q]
                        for q in QUERIES["boolq"]
                    ]
                )
                for s in (0, 1)
            ]
        )
    )
    # Holm and the reading only on the headline line (pooled, full); one contrast: Holm leaves p as it is
    assert pooled.seed.n == 2 and pooled.p_seed_holm == pytest.approx(pooled.seed.p_t)
    others = [x for x in contrasts.lines if x is not pooled]
    assert all(x.p_seed_holm is None and x.seeds_to_decide is None for x in others)
    # per-collection lines at full sparsity break the headline down; the budget lines are exploratory, outside Holm
    assert [(x.reading, x.exploratory) for x in others if x.budget == "full"] == [("", False), ("", False)]
    assert [(x.reading, x.exploratory) for x in others if x.budget == "q4-d8"] == [
        ("exploratory (outside Holm)", True)
    ] * 3
    rows = list(csv.DictReader(io.StringIO(contrasts_csv(contrasts))))
    assert float(rows[2]["p_seed"]) == pooled.seed.p and rows[2]["matched_seeds"] == "2"


def seed_sweep(
    tmp_path: Path, n_seeds: int, report_yaml: str, levels: dict[str, float] | None = None, seed_sd: float = 0.01
) -> Path:
    """Rows A, B, C on one set of 10 queries, `n_seeds` seeds each: A better than B and C on every seed by ≈ 0.1;
    `seed_sd`: how much a whole seed shifts a row."""
    rng = np.random.default_rng(11)
    sweep = tmp_path / f"seeds{n_seeds}"
    num = 0
    for name, level in (levels or {"A": 0.6, "B": 0.5, "C": 0.5}).items():
        for seed in range(n_seeds):
            shift = rng.normal(0, seed_sd)
            per_query = {f"q{i}": float(np.clip(level + shift + rng.normal(0, 0.05), 0, 1)) for i in range(10)}
            write_job(
                sweep,
                num,
                [f"experiment={name}", f"seed={seed}"],
                name,
                metrics={"boolq": m(float(np.mean(list(per_query.values()))), 1.0, 10, 100)},
                per_query={"boolq": {"nDCG@10": per_query}},
                config_extra=report_yaml,
            )
            num += 1
    return sweep


def headlines(sweep: Path) -> dict[tuple[str, str], object]:
    return {(x.a, x.b): x for x in build_contrasts(build_table(sweep)).lines if x.reading and not x.exploratory}


def t_p_by_hand(per_seed: tuple[float, ...]) -> float:
    """Two-sided p of the one-sample t over seeds, from the t distribution's density integrated numerically."""
    x = np.asarray(per_seed)
    n, t = len(x), abs(x.mean() / (x.std(ddof=1) / np.sqrt(len(x))))
    grid = np.linspace(t, t + 2000, 2_000_001)
    density = (1 + grid**2 / (n - 1)) ** (-n / 2)
    norm = np.trapezoid(
        (1 + np.linspace(-2000, 2000, 4_000_001) ** 2 / (n - 1)) ** (-n / 2), np.linspace(-2000, 2000, 4_000_001)
    )
    return 2 * float(np.trapezoid(density, grid)) / norm


def test_confirmed_needs_the_holm_adjusted_seed_level_t(tmp_path: Path) -> None:
    # 3 seeds (the tables'), A ahead by ≈ 0.1 on every one, seeds shifting rows by 0.01: the seed-level t confirms it,
    # and the reading says what that rests on (the sign flip cannot go below 0.25 with 3 seeds)
    one = headlines(seed_sweep(tmp_path, 3, "report:\n  contrasts: [[A, B]]\n"))[("A", "B")]
    assert one.seed.p == 0.25 and one.seed.p_t == pytest.approx(t_p_by_hand(one.seed.per_seed), rel=1e-3)
    assert one.p_seed_holm == pytest.approx(one.seed.p_t) and one.p_seed_holm < 0.05
    assert one.reading.startswith("confirmed: A > B (seed-level t with 3 seeds assumes normal seed differences")
    # a second claimed contrast: Holm multiplies the smaller p by 2 (and keeps the order)
    two = headlines(seed_sweep(tmp_path / "two", 3, "report:\n  contrasts: [[A, B], [C, A]]\n"))
    ps = sorted([two[("A", "B")].seed.p_t, two[("C", "A")].seed.p_t])
    assert sorted([two[("A", "B")].p_seed_holm, two[("C", "A")].p_seed_holm]) == pytest.approx(
        [min(1, 2 * ps[0]), max(min(1, 2 * ps[0]), ps[1])]
    )
    # seeds that move rows as much as the method does: the query level still "sees" a difference, the seed level not
    noisy = headlines(
        seed_sweep(
            tmp_path / "noisy", 3, "report:\n  contrasts: [[A, B]]\n", levels={"A": 0.55, "B": 0.5}, seed_sd=0.08
        )
    )[("A", "B")]
    assert noisy.result.p_randomization < 0.05 and noisy.p_seed_holm >= 0.05
    assert noisy.reading.startswith("undecided at 3 seeds: seed-level 95% CI [")
    assert "; query level alone p " in noisy.reading
    # one seed: no seed-level test at all, and the reading says why
    single = headlines(seed_sweep(tmp_path / "one", 1, "report:\n  contrasts: [[A, B]]\n"))[("A", "B")]
    assert single.seed.p == 1.0 and single.p_seed_holm is None
    assert single.reading == "not testable at seed level (1 matched seed)"


def test_primary_contrast_is_marked_and_must_be_a_contrast(tmp_path: Path, capsys) -> None:
    yaml_ = "report:\n  contrasts: [[A, B], [A, C]]\n  primary: [A, C]\n"
    sweep = seed_sweep(tmp_path, 6, yaml_)
    table = build_table(sweep)
    assert table.primary == ("A", "C") and not table.problems
    md = contrasts_markdown(build_contrasts(table))
    assert "| A − C (primary) | boolq | full |" in md and "| A − B | boolq | full |" in md
    assert "(primary): the contrast the experiment config declares primary (report.primary: A − C)" in md
    for job in sweep.glob("*/.hydra/config.yaml"):
        job.write_text(job.read_text().replace("primary: [A, C]", "primary: [B, C]"))
    assert main([str(sweep)]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if not ln.startswith("wrote ")]
    assert len(err) == 1 and "report.primary of the jobs of" in err[0]
    assert "['B', 'C'] is not one of the table's contrasts" in err[0]
    assert "| A − C |" in (sweep / "contrasts.md").read_text()  # the contrasts are still written, unmarked


def test_testbed_tables_declare_a_primary_among_their_contrasts() -> None:
    conf = Path(__file__).resolve().parents[2] / "conf" / "experiment" / "testbed"
    for path in [conf / "base.yaml", *sorted(conf.glob("ablation-*.yaml"))]:
        report = yaml.safe_load(path.read_text())["report"]
        assert report["primary"] in report["contrasts"], path
    for path in sorted((conf / "references").glob("*.yaml")):  # no contrasts, so no primary inherited from base
        assert yaml.safe_load(path.read_text())["report"] == {"contrasts": [], "primary": None}, path


# ------------------------------------------------------------------------------------------------ readings, planning

import math  # noqa: E402

from scipy import integrate  # noqa: E402

from vtlab.evaluation.stats import SeedComparison, seed_t_test  # noqa: E402
from vtlab.report.discovery import EXPLORATORY_FILE, write_exploratory  # noqa: E402
from vtlab.report.lines import ContrastLine, Contrasts  # noqa: E402
from vtlab.report.readings import NOT_TESTED, adjust, format_signed  # noqa: E402

VERDICTS = ("confirmed", "refuted", "undecided")


def power_by_integral(n: int, sd: float, effect: float, alpha: float) -> float:
    """The power of the two-sided one-sample t-test from T = (Z + δ) / √(V/df), Z normal, V ~ χ²(df), δ = effect √n /
    sd: E_V[Φ̄(c √(V/df) − δ) + Φ(−c √(V/df) − δ)], integrated over V's quantiles (no non-central t involved)."""
    df, delta = n - 1, effect * math.sqrt(n) / sd
    c = scipy_stats.t.ppf(1 - alpha / 2, df)

    def given(u: float) -> float:
        s = c * math.sqrt(scipy_stats.chi2.ppf(u, df) / df)
        return scipy_stats.norm.sf(s - delta) + scipy_stats.norm.cdf(-s - delta)

    return integrate.quad(given, 0, 1, epsabs=1e-12, epsrel=1e-10, limit=200)[0]


def seeds_by_hand(per_seed: tuple[float, ...], alpha: float, effect: float = 0.01) -> int | None:
    """The smallest n ≥ 2 (up to 1000) whose seed-level t at `alpha` has 80% power against `effect` at the per-seed
    differences' sample SD: from the normal approximation's n, walked down and up with the integral."""
    sd = float(np.std(per_seed, ddof=1))
    n = max(2, math.ceil(((scipy_stats.norm.ppf(1 - alpha / 2) + scipy_stats.norm.ppf(0.8)) * sd / effect) ** 2))
    while n > 2 and power_by_integral(n - 1, sd, effect, alpha) >= 0.8:
        n -= 1
    while n <= 1000 and power_by_integral(n, sd, effect, alpha) < 0.8:
        n += 1
    return n if n <= 1000 else None


def ci_by_hand(per_seed: tuple[float, ...]) -> str:
    """The seed-level 95% t interval as the reading prints it, from numpy and the t quantile."""
    x = np.asarray(per_seed)
    half = scipy_stats.t.ppf(0.975, x.size - 1) * x.std(ddof=1) / np.sqrt(x.size)
    return f"[{x.mean() - half:+.4f}, {x.mean() + half:+.4f}]".replace("-", "−")


def column(md: str, header: str) -> dict[str, str]:
    """{A − B cell: the `header` cell} over the markdown table's lines."""
    rows = md_rows(md)
    i = rows[0].index(header)
    return {r[0]: r[i] for r in rows[1:]}


def test_readings_confirmed_refuted_undecided_with_seeds_for_power(tmp_path: Path) -> None:
    # A ahead of B and C by 0.2 on every seed, B and C alike: A − B holds, C − A goes against its claim (C > A), B − C
    # cannot be told apart at 3 seeds. No primary: Holm over the 3, seeds planned at 0.05 / 3 for an effect of 0.01
    sweep = seed_sweep(
        tmp_path, 3, "report:\n  contrasts: [[A, B], [C, A], [B, C]]\n", levels={"A": 0.7, "B": 0.5, "C": 0.5}
    )
    contrasts = build_contrasts(build_table(sweep))
    got = {(x.a, x.b): x for x in contrasts.lines}
    caveat = " (seed-level t with 3 seeds assumes normal seed differences; the sign flip cannot go below 0.25)"
    assert got[("A", "B")].reading == "confirmed: A > B" + caveat and got[("A", "B")].p_seed_holm < 0.05
    refuted = got[("C", "A")]
    assert refuted.seed.delta < 0 and refuted.p_seed_holm < 0.05 and refuted.reading == "refuted: A < B" + caveat
    undecided = got[("B", "C")]
    assert undecided.p_seed_holm >= 0.05
    want = seeds_by_hand(undecided.seed.per_seed, 0.05 / 3)  # Bonferroni over the table's 3 contrasts
    assert want is not None and want > 3 and undecided.seeds_to_decide == want
    assert undecided.reading.startswith(
        f"undecided at 3 seeds: seed-level 95% CI {ci_by_hand(undecided.seed.per_seed)}; "
        f"about {want} seeds give 80% power for an effect of 0.01 at this spread"
    )
    md = contrasts_markdown(contrasts)
    assert column(md, "seeds to decide") == {
        f"{a} − {b}": str(seeds_by_hand(x.seed.per_seed, 0.05 / 3)) for (a, b), x in got.items()
    }
    assert "p seed Holm: Holm's adjustment of p seed (t) over the table's 3 contrasts" in md
    assert "against a true mean difference of 0.01 nDCG@10 (the minimum effect of interest: report.min_effect" in md
    assert "at level 0.05 / 3 (Bonferroni over the table's contrasts, conservative for Holm)" in md
    assert "not confirmed" not in md and "no difference" not in md
    rows = {(r["a"], r["b"]): r for r in csv.DictReader(io.StringIO(contrasts_csv(contrasts)))}
    low, high = (float(rows[("B", "C")][k]) for k in ("ci_seed_low", "ci_seed_high"))
    assert f"[{low:+.4f}, {high:+.4f}]".replace("-", "−") == ci_by_hand(undecided.seed.per_seed)
    assert rows[("B", "C")]["seeds_to_decide"] == str(want)


def headline(per_seed: tuple[float, ...]) -> ContrastLine:
    """A one-collection headline line with the given per-seed differences, its seed-level tests from stats."""
    seeds = tuple(str(i) for i in range(len(per_seed)))
    seed = SeedComparison(seeds, per_seed, float(np.mean(per_seed)), 1.0, True, seed_t_test(np.array(per_seed)))
    return ContrastLine("A", "B", "boolq", "full", len(seeds), len(seeds), None, seed=seed)


def test_undecided_plans_for_the_minimum_effect_or_says_beyond_the_search() -> None:
    # d̄ = 0, s = 0.01: the CI is 0 ± t_(0.975, 2) · 0.01 / √3 = ± 4.302653 · 0.005774 = ± 0.0248; the plan does not use
    # the observed d̄ but the minimum effect, 0.01 at SD 0.01 (d = 1), at level 0.05 / 2 (two contrasts)
    zero, wide = headline((0.01, -0.01, 0.0)), headline((0.0011, -0.3, 0.3))
    adjust([zero, wide], 0.01)
    want = seeds_by_hand((0.01, -0.01, 0.0), 0.025)
    assert want is not None and zero.seeds_to_decide == want
    assert zero.reading == (
        f"undecided at 3 seeds: seed-level 95% CI [−0.0248, +0.0248]; about {want} seeds give 80% power for an effect "
        "of 0.01 at this spread"
    )
    # s ≈ 0.3: d = 0.01 / 0.3 needs about ((2.24 + 0.84) · 30)² ≈ 8,500 seeds (normal approximation), beyond 1000
    assert wide.seeds_to_decide is None
    assert wide.reading.endswith(
        "; more than 1000 seeds would be needed for 80% power for an effect of 0.01 at this spread"
    )
    nothing = headline((0.0, 0.0, 0.0))  # identical runs: p 1, no spread to plan with
    adjust([zero, wide, nothing], 0.02)  # a larger minimum effect (d = 2) and a family of 3: level 0.05 / 3
    assert zero.seeds_to_decide == seeds_by_hand((0.01, -0.01, 0.0), 0.05 / 3, effect=0.02) < want
    assert nothing.reading == (
        "undecided at 3 seeds: seed-level 95% CI [+0.0000, +0.0000]; no spread between seeds to plan with"
    )
    md = contrasts_markdown(Contrasts("t", "nDCG@10", [zero, wide, nothing], []))
    cells = [r[md_rows(md)[0].index("seeds to decide")] for r in md_rows(md)[1:]]
    assert cells == [str(zero.seeds_to_decide), "> 1000", "no spread"]
    same = headline((0.02, 0.02, 0.02))  # no spread: the t-test has no p-value, so no verdict either way
    adjust([same], 0.01)
    assert same.p_seed_holm is None and same.seeds_to_decide is None
    assert (
        same.reading
        == "not testable at seed level (3 matched seeds, every one with the same difference: no spread for a t-test)"
    )


# per-seed differences whose seed-level t p is known in closed form (df = 2: P(|T| ≥ t) = 1 − t / √(2 + t²)):
# (0.010, 0.014, 0.012): d̄ 0.012, s 0.002, t = 6√3, p = 1 − 6√3 / √110 = 0.00913
# (0.002, 0.014, 0.008): d̄ 0.008, s 0.006, t = (4/3)√3, p = 1 − (4/3)√3 / √(2 + 16/3) = 0.1472
STRONG, WEAK = (0.010, 0.014, 0.012), (0.002, 0.014, 0.008)
P_STRONG, P_WEAK = 1 - 6 * math.sqrt(3) / math.sqrt(110), 1 - 4 / 3 * math.sqrt(3) / math.sqrt(2 + 16 / 3)


def test_fixed_sequence_primary_first_then_holm_over_the_others() -> None:
    primary, weak, strong = headline(STRONG), headline(WEAK), headline(STRONG)
    primary.primary = True
    adjust([weak, primary, strong], 0.01)
    # the primary alone at 0.05 on its unadjusted p (plain Holm over 3 would have made it 3 · 0.00913 = 0.0274)
    assert primary.p_seed_holm == pytest.approx(P_STRONG, rel=1e-6) and primary.reading.startswith("confirmed: A > B")
    # rejected, so the other two are tested with Holm over those 2: sorted 0.00913 · 2 = 0.0183, max(0.1472, 0.0183)
    assert strong.p_seed_holm == pytest.approx(2 * P_STRONG, rel=1e-6) and strong.reading.startswith("confirmed")
    assert weak.p_seed_holm == pytest.approx(P_WEAK, rel=1e-6) and weak.reading.startswith("undecided at 3 seeds")
    # seeds for power: the primary planned at 0.05, the others at 0.05 / 2
    assert primary.seeds_to_decide == seeds_by_hand(STRONG, 0.05)
    assert weak.seeds_to_decide == seeds_by_hand(WEAK, 0.025) and weak.seeds_to_decide > seeds_by_hand(WEAK, 0.05)
    assert f"about {weak.seeds_to_decide} seeds give 80% power for an effect of 0.01" in weak.reading


def test_fixed_sequence_stops_behind_a_primary_not_rejected() -> None:
    primary, strong, weak = headline(WEAK), headline(STRONG), headline(WEAK)
    primary.primary = True
    adjust([primary, strong, weak], 0.01)
    assert primary.p_seed_holm == pytest.approx(P_WEAK, rel=1e-6)
    assert primary.reading.startswith("undecided at 3 seeds: seed-level 95% CI [")
    assert primary.reading.endswith(
        f"about {seeds_by_hand(WEAK, 0.05)} seeds give 80% power for an effect of 0.01 at this spread"
    )
    # the secondaries get no verdict, not even the one whose Holm p (2 · 0.00913 = 0.0183) is below 0.05; their Holm
    # p is still shown, and their plan still made
    assert strong.reading == weak.reading == NOT_TESTED == "not tested: the primary was not rejected (fixed sequence)"
    assert strong.p_seed_holm == pytest.approx(2 * P_STRONG, rel=1e-6) and weak.p_seed_holm == pytest.approx(P_WEAK)
    assert weak.seeds_to_decide == seeds_by_hand(WEAK, 0.025)
    # an untestable primary (one seed) stops the sequence too
    single = ContrastLine(
        "A", "B", "boolq", "full", 1, 1, None, seed=SeedComparison(("0",), (0.01,), 0.01, 1.0, True), primary=True
    )
    strong = headline(STRONG)
    adjust([single, strong], 0.01)
    assert single.reading == "not testable at seed level (1 matched seed)" and strong.reading == NOT_TESTED


def holm_by_hand(p1: float, p2: float) -> list[float]:
    """Holm over two p-values, in input order: the smaller times 2, the larger at least that."""
    low = min(1.0, 2 * min(p1, p2))
    return [low, max(low, p2)] if p1 <= p2 else [max(low, p1), low]


def test_fixed_sequence_in_a_table_and_its_footer(tmp_path: Path) -> None:
    # A ahead of B and C by 0.1 on every seed: A − B the primary, confirmed; A − C and C − B behind it, Holm over 2
    yaml_ = "report:\n  contrasts: [[A, B], [A, C], [C, B]]\n  primary: [A, B]\n"
    contrasts = build_contrasts(build_table(seed_sweep(tmp_path, 3, yaml_)))
    got = {(x.a, x.b): x for x in contrasts.lines}
    assert got[("A", "B")].p_seed_holm == pytest.approx(got[("A", "B")].seed.p_t)
    assert got[("A", "B")].reading.startswith("confirmed: A > B")
    secondary = (got[("A", "C")], got[("C", "B")])
    assert [x.p_seed_holm for x in secondary] == pytest.approx(holm_by_hand(*(x.seed.p_t for x in secondary)))
    md = contrasts_markdown(contrasts)
    assert (
        "fixed sequence (family-wise error ≤ 0.05), on each contrast's headline line (its collection, full), the only "
        "line of a contrast with a verdict: the primary contrast is tested first, alone, at 0.05 on its unadjusted p "
        "seed (t) (its p seed Holm column shows that p); only if it is rejected are the other 2 contrasts tested, at "
        "0.05 on p seed Holm, Holm's adjustment of p seed (t) over those 2; otherwise they get no verdict (reading "
        '"not tested: the primary was not rejected (fixed sequence)"), their p seed Holm still shown.'
    ) in md
    assert "at level 0.05 for the primary and 0.05 / 2 for the other contrasts (Bonferroni over their Holm family" in md
    assert "first in the fixed sequence, tested alone on its unadjusted p seed (t)" in md


def test_checks_are_reported_outside_the_family(tmp_path: Path, capsys) -> None:
    # B and C are the same method (A/A): a check, outside the family; A − B alone in the family, so Holm leaves it be
    yaml_ = "report:\n  contrasts: [[A, B]]\n  checks: [[B, C]]\n  min_effect: 0.02\n"
    sweep = seed_sweep(tmp_path, 3, yaml_)
    table = build_table(sweep)
    assert [(a, b) for a, b, _ in table.checks] == [("B", "C")] and table.min_effect == 0.02 and not table.problems
    contrasts = build_contrasts(table)
    got = {(x.a, x.b): x for x in contrasts.lines}
    ab, bc = got[("A", "B")], got[("B", "C")]
    assert ab.p_seed_holm == pytest.approx(ab.seed.p_t)  # a family of one: the check in it would have doubled it
    assert ab.seeds_to_decide == seeds_by_hand(ab.seed.per_seed, 0.05, effect=0.02)
    assert bc.check and bc.exploratory and bc.p_seed_holm is None and bc.seeds_to_decide is None
    assert bc.reading == (
        f"check (outside the family): Δ {format_signed(bc.seed.delta)}, seed-level 95% CI "
        f"{ci_by_hand(bc.seed.per_seed)}, p {bc.seed.p_t:.4f}"
    )
    md = contrasts_markdown(contrasts)
    header, lines = md_rows(md)[0], {r[0]: r for r in md_rows(md)[1:]}
    assert lines["B − C"][header.index("p seed (t)")] == f"{bc.seed.p_t:.4f} †"
    assert lines["A − B"][header.index("p seed (t)")] == f"{ab.seed.p_t:.4f}"
    assert "p seed Holm: Holm's adjustment of p seed (t) over the table's 1 contrasts" in md
    assert "check (outside the family): the contrasts of report.checks (1 here; A/A and equivalence checks)" in md
    assert "against a true mean difference of 0.02 nDCG@10 (the minimum effect of interest: report.min_effect" in md
    # a pair that is both a contrast and a check stays in the family, and the report says so
    for job in sweep.glob("*/.hydra/config.yaml"):
        job.write_text(job.read_text().replace("checks: [[B, C]]", "checks: [[A, B]]"))
    table = build_table(sweep)
    assert table.checks == [] and [(a, b) for a, b, _ in table.contrasts] == [("A", "B")]
    assert any("A − B is also one of the table's contrasts; it stays in the family" in p for p in table.problems)
    # asking on the command line for a check as a contrast is refused
    for job in sweep.glob("*/.hydra/config.yaml"):
        job.write_text(job.read_text().replace("checks: [[A, B]]", "checks: [[B, C]]"))
    assert main([str(sweep), "--contrast", "B,C"]) == 2
    assert "B − C is declared a check (report.checks), outside the family" in capsys.readouterr().err


def test_min_effect_and_checks_mistakes_are_problems(tmp_path: Path) -> None:
    sweep = seed_sweep(tmp_path, 2, "report:\n  contrasts: [[A, B]]\n  checks: [[B, Z]]\n  min_effect: -1\n")
    table = build_table(sweep)
    assert table.min_effect == 0.01 and table.checks == []  # the default kept, the unknown row refused
    assert any("report.min_effect must be a positive number, got -1" in p for p in table.problems)
    assert any("report.checks: 'Z' is not a row label" in p for p in table.problems)
    configs = sorted(sweep.glob("*/.hydra/config.yaml"))
    configs[0].write_text(
        configs[0].read_text().replace("min_effect: -1", "min_effect: 0.03").replace("[[B, Z]]", "[B, C]")
    )
    for job in configs[1:]:
        job.write_text(job.read_text().replace("min_effect: -1", "min_effect: 0.02").replace("[[B, Z]]", "[[B, C]]"))
    table = build_table(sweep)
    assert table.min_effect == 0.01  # the jobs disagree: the default, and a problem naming both
    assert any("the jobs declare different minimum effects [0.03, 0.02]" in p for p in table.problems)
    assert any("report.checks must be a list of [row A, row B] pairs" in p for p in table.problems)
    assert [(a, b) for a, b, _ in table.checks] == [("B", "C")]  # the other jobs' checks still count


def test_budget_lines_are_exploratory_outside_holm(contrast_sweep) -> None:
    sweep, _ = contrast_sweep
    md = contrasts_markdown(build_contrasts(build_table(sweep)))
    rows = md_rows(md)
    header, lines = rows[0], rows[1:]
    p_columns = [i for i, h in enumerate(header) if h.startswith("p ")]
    reading, budget = header.index("reading"), header.index("budget")
    for line in lines:
        ps = [line[i] for i in p_columns if line[i] != "–"]
        if line[budget] == "q4-d8":  # every p-value shown and marked, no verdict
            assert line[reading] == "exploratory (outside Holm)" and ps and all(p.endswith(" †") for p in ps)
            assert line[header.index("p seed Holm")] == line[header.index("seeds to decide")] == "–"
        else:
            assert line[budget] == "full" and not any("†" in p for p in ps)
            assert line[reading] in ("", "–") or line[reading].startswith(VERDICTS)
    assert "The budget lines are exploratory, outside the Holm family: no verdict" in md
    rows = list(csv.DictReader(io.StringIO(contrasts_csv(build_contrasts(build_table(sweep))))))
    assert [r["exploratory"] for r in rows] == ["False"] * 3 + ["True"] * 3


def test_exploratory_marker_takes_every_verdict_away(tmp_path: Path, contrast_sweep, capsys) -> None:
    sweep = seed_sweep(tmp_path, 3, "report:\n  contrasts: [[A, B], [A, C]]\n")
    plain = build_contrasts(build_table(sweep))
    assert [x.reading.split(":")[0] for x in plain.lines] == ["confirmed", "confirmed"]  # without the marker
    reason = "learning gate failed: A's training loss did not fall"
    write_exploratory(sweep, reason)
    assert json.loads((sweep / EXPLORATORY_FILE).read_text()) == {"reason": reason}
    table = build_table(sweep)
    marked = build_contrasts(table)
    assert table.exploratory == reason
    assert [x.reading for x in marked.lines] == [f"exploratory: {reason}"] * 2
    # the numbers are still shown, unchanged
    assert [(x.seed.p_t, x.p_seed_holm, x.result.delta) for x in marked.lines] == [
        (x.seed.p_t, x.p_seed_holm, x.result.delta) for x in plain.lines
    ]
    assert main([str(sweep)]) == 0
    out = capsys.readouterr().out
    assert not any(v in out for v in VERDICTS) and "| exploratory: learning gate failed" in out
    assert f"EXPLORATORY TABLE ({EXPLORATORY_FILE} in the sweep): {reason}; no line carries a verdict" in out
    assert f"EXPLORATORY TABLE ({EXPLORATORY_FILE}): {reason}" in (sweep / "table.md").read_text()
    # budget lines too; a marker without a readable reason still takes the verdicts away
    budgets, _ = contrast_sweep
    (budgets / EXPLORATORY_FILE).write_text('{"why": "gate"}')
    lines = build_contrasts(build_table(budgets)).lines
    assert len(lines) == 6 and all(
        x.exploratory and x.reading.startswith("exploratory: reason unreadable") for x in lines
    )
    (budgets / EXPLORATORY_FILE).write_text("not json")
    assert build_table(budgets).exploratory.startswith("reason unreadable: ")
