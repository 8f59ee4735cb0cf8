"""The collapse rule's declared floor (report.collapse_floor, vtlab/report/collapse.py): a seed that ends under it
counts as collapsed though the collapse detector never fired (a late collapse, or a model that ends with a handful of
active dims), on sweep directories written the way `python -m vtlab -m` leaves them; its contrast without it by hand."""

import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as scipy_stats
from test_report import write_job

from vtlab.report.collapse import WITHOUT, collapsed_seeds
from vtlab.report.contrasts import build_contrasts
from vtlab.report.discovery import CollapseFloor
from vtlab.report.lines import FULL, POOLED
from vtlab.report.render import to_markdown
from vtlab.report.tables import build_table

QIDS = {"boolq": [f"b{i}" for i in range(6)], "scifact": [f"s{i}" for i in range(4)]}
CONTRAST = "  contrasts: [[vt, masked]]\n  primary: [vt, masked]\n"
LATE = 3  # the masked seed that collapsed late: no collapse.json, final doc dims and score near nothing
LATE_REASON = (
    "final doc dims 3.1 under the floor 10; final avg nDCG@10 0.004 under the floor 0.05 (report.collapse_floor)"
)


def _sweep(tmp_path: Path, floor: str | None, detector: bool = False) -> tuple[Path, np.ndarray]:
    """Two rows × 5 seeds on two collections, `report.collapse_floor: <floor>` in every job's config (absent for
    None); masked seed LATE ends with 3.1 active doc dims and nDCG@10 0.004 everywhere, its collapse.json written only
    with `detector`. Returns the sweep and the per-seed avg-column differences vt − masked, by hand."""
    rng = np.random.default_rng(5)
    extra = "report:\n" + CONTRAST + (f"  collapse_floor: {floor}\n" if floor is not None else "")
    sweep, num, avg = tmp_path / "sweep", 0, {}
    for name, level in (("vt", 0.6), ("masked", 0.55)):
        avg[name] = []
        for seed in range(5):
            late = name == "masked" and seed == LATE
            per_query = {
                d: {"nDCG@10": {q: 0.004 if late else float(level + rng.normal(0, 0.1)) for q in qs}}
                for d, qs in QIDS.items()
            }
            means = {d: float(np.mean(list(v["nDCG@10"].values()))) for d, v in per_query.items()}
            avg[name].append(np.mean(list(means.values())))
            metrics = {
                d: {"nDCG@10": v, "doc_active_dims": 3.1 if late else 80.0 + seed, "query_active_dims": 20.0}
                for d, v in means.items()
            }
            job = write_job(
                sweep, num, [f"experiment={name}", f"seed={seed}"], name, metrics=metrics, per_query=per_query,
                config_extra=extra,
            )  # fmt: skip
            if late and detector:
                (job / "collapse.json").write_text(json.dumps({"kind": "dead", "side": "doc", "step": 41}))
            num += 1
    return sweep, np.array(avg["vt"]) - np.array(avg["masked"])


def _late_job(table):
    return next(j for j in table.row("masked").jobs if j.seed == str(LATE))


def test_a_seed_under_the_declared_floor_counts_as_collapsed_and_is_left_out_of_the_without_line(tmp_path):
    sweep, diffs = _sweep(tmp_path, "{doc_dims: 10, score: 0.05}")
    table = build_table(sweep)
    assert table.collapse_floor == CollapseFloor(doc_dims=10.0, score=0.05)
    assert _late_job(table).collapse == LATE_REASON
    assert collapsed_seeds(table, "masked") == {"3"} and collapsed_seeds(table, "vt") == set()
    assert table.row("masked").status == f"collapsed (seed=3): {LATE_REASON}" and table.row("vt").status == "ok"
    assert table.row("masked").n == 5  # the collapsed seed still counts in the cells
    assert "collapse floor (report.collapse_floor)" in to_markdown(table) and not table.problems

    contrasts = build_contrasts(table, n_permutations=200)
    head = next(
        x for x in contrasts.lines if x.dataset == POOLED and x.budget == FULL and not x.note.startswith(WITHOUT)
    )
    assert head.seed.n == 5 and np.isclose(head.seed.delta, diffs.mean())  # the headline keeps the collapsed seed
    (line,) = [x for x in contrasts.lines if x.note.startswith(WITHOUT)]
    kept = np.delete(diffs, LATE)
    assert line.seed.seeds == ("0", "1", "2", "4") and np.allclose(line.seed.per_seed, kept)
    assert np.isclose(line.seed.delta, kept.mean())
    assert np.isclose(line.seed.p_t, scipy_stats.ttest_1samp(kept, 0.0).pvalue)
    half = scipy_stats.t.ppf(0.975, 3) * kept.std(ddof=1) / 2
    assert np.allclose(line.seed.ci, (kept.mean() - half, kept.mean() + half))
    assert line.exploratory and "seed 3 left out" in line.note and line.p_seed_holm is None


@pytest.mark.parametrize(
    ("floor", "reason"),
    [
        ("{doc_dims: 10, score: null}", "final doc dims 3.1 under the floor 10 (report.collapse_floor)"),
        ("{score: 0.05}", "final avg nDCG@10 0.004 under the floor 0.05 (report.collapse_floor)"),
    ],
)
def test_each_side_of_the_floor_flags_on_its_own(tmp_path, floor, reason):
    table = build_table(_sweep(tmp_path, floor)[0])
    assert _late_job(table).collapse == reason and collapsed_seeds(table, "masked") == {"3"}


@pytest.mark.parametrize("floor", [None, "null", "{doc_dims: null, score: null}"])
def test_without_a_floor_only_the_detector_counts(tmp_path, floor):
    sweep, _ = _sweep(tmp_path, floor)
    table = build_table(sweep)
    assert table.collapse_floor is None and _late_job(table).collapse is None
    assert collapsed_seeds(table, "masked") == set() and table.row("masked").status == "ok"
    assert "collapse floor" not in to_markdown(table) and not table.problems
    assert not [x for x in build_contrasts(table, n_permutations=200).lines if x.note.startswith(WITHOUT)]


def test_the_detectors_record_wins_over_the_floor(tmp_path):
    table = build_table(_sweep(tmp_path, "{doc_dims: 10, score: 0.05}", detector=True)[0])
    assert _late_job(table).collapse == "dead collapse on the doc side at step 41, training stopped there"
    assert collapsed_seeds(table, "masked") == {"3"}


def _one_row(tmp_path: Path, floor: str, values: list[tuple[float, float]]) -> list:
    """One row, one seed per (nDCG@10, doc dims), the same on both collections (so the means are exact)."""
    sweep = tmp_path / "sweep"
    for seed, (score, dims) in enumerate(values):
        metrics = {d: {"nDCG@10": score, "doc_active_dims": dims} for d in QIDS}
        write_job(sweep, seed, ["experiment=a", f"seed={seed}"], "a", metrics=metrics,
                  config_extra=f"report:\n  collapse_floor: {floor}\n")  # fmt: skip
    return [j.collapse for j in build_table(sweep).row("a").jobs]


def test_a_value_exactly_at_the_floor_is_not_collapsed(tmp_path):
    assert _one_row(tmp_path, "{doc_dims: 10, score: 0.25}", [(0.25, 10.0), (0.5, 9.5), (0.125, 10.0)]) == [
        None,  # at both floors: not under
        "final doc dims 9.5 under the floor 10 (report.collapse_floor)",
        "final avg nDCG@10 0.125 under the floor 0.25 (report.collapse_floor)",
    ]


def test_floors_that_disagree_or_are_malformed_are_problems_and_flag_nothing(tmp_path):
    sweep = tmp_path / "sweep"
    for seed, floor in enumerate(["{doc_dims: 10}", "{doc_dims: 20}", "{dims: 5}", "{score: -1}"]):
        write_job(sweep, seed, ["experiment=a", f"seed={seed}"], "a",
                  metrics={"boolq": {"nDCG@10": 0.0, "doc_active_dims": 1.0}},
                  config_extra=f"report:\n  collapse_floor: {floor}\n")  # fmt: skip
    table = build_table(sweep)
    assert table.collapse_floor is None and not any(j.collapse for j in table.row("a").jobs)
    assert [p.split(": ", 1)[1] for p in table.problems] == [
        "report.collapse_floor must be {doc_dims: <number >= 0 or null>, score: <number >= 0 or null>}, got "
        "{'dims': 5}",
        "report.collapse_floor must be {doc_dims: <number >= 0 or null>, score: <number >= 0 or null>}, got "
        "{'score': -1}",
        "the jobs declare different floors {doc_dims: 10, score: null}, {doc_dims: 20, score: null}; only the "
        "collapse detector's rule applies",
    ]
