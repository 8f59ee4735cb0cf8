"""The collapse rule (vtlab/report/collapse.py): a collapsed seed counts in the contrast, and the contrast is also
given without the matched seeds where either arm collapsed — its Δ, interval and t p computed here by hand."""

import json
from pathlib import Path

import numpy as np
from scipy import stats as scipy_stats
from test_report import write_job

from vtlab.report.collapse import WITHOUT
from vtlab.report.contrasts import build_contrasts
from vtlab.report.lines import FULL, POOLED
from vtlab.report.tables import build_table

QIDS = {"boolq": [f"b{i}" for i in range(6)], "scifact": [f"s{i}" for i in range(4)]}
YAML = "report:\n  contrasts: [[vt, masked]]\n  primary: [vt, masked]\n"


def _sweep(tmp_path: Path, collapsed: dict[str, int]) -> tuple[Path, np.ndarray]:
    """Two rows × 5 seeds; returns the sweep and the per-seed avg-column differences vt − masked, by hand."""
    rng = np.random.default_rng(11)
    sweep, num, avg = tmp_path / "sweep", 0, {}
    for name, level in (("vt", 0.6), ("masked", 0.55)):
        avg[name] = []
        for seed in range(5):
            dead = collapsed.get(name) == seed
            per_query = {
                d: {"nDCG@10": {q: 0.0 if dead else float(level + rng.normal(0, 0.1)) for q in qs}}
                for d, qs in QIDS.items()
            }
            means = {d: float(np.mean(list(v["nDCG@10"].values()))) for d, v in per_query.items()}
            avg[name].append(np.mean(list(means.values())))
            job = write_job(
                sweep,
                num,
                [f"experiment={name}", f"seed={seed}"],
                name,
                metrics={d: {"nDCG@10": v} for d, v in means.items()},
                per_query=per_query,
                config_extra=YAML,
            )
            if dead:
                (job / "collapse.json").write_text(json.dumps({"kind": "dead", "side": "query", "step": 5}))
            num += 1
    return sweep, np.array(avg["vt"]) - np.array(avg["masked"])


def test_a_contrast_touching_a_collapsed_seed_is_also_given_without_it(tmp_path):
    sweep, diffs = _sweep(tmp_path, {"masked": 2})
    contrasts = build_contrasts(build_table(sweep), n_permutations=200)
    head = next(
        x for x in contrasts.lines if x.dataset == POOLED and x.budget == FULL and not x.note.startswith(WITHOUT)
    )
    assert np.isclose(head.seed.delta, diffs.mean()) and head.seed.n == 5  # the collapsed seed counts
    (line,) = [x for x in contrasts.lines if x.note.startswith(WITHOUT)]
    kept = np.delete(diffs, 2)
    assert line.seed.seeds == ("0", "1", "3", "4") and np.allclose(line.seed.per_seed, kept)
    assert np.isclose(line.seed.delta, kept.mean())
    assert np.isclose(line.seed.p_t, scipy_stats.ttest_1samp(kept, 0.0).pvalue)
    half = scipy_stats.t.ppf(0.975, 3) * kept.std(ddof=1) / 2
    assert np.allclose(line.seed.ci, (kept.mean() - half, kept.mean() + half))
    assert line.exploratory and "seed 2 left out" in line.note and "outside the family" in line.reading
    assert line.p_seed_holm is None  # no verdict: the reading that decides is the headline's


def test_no_line_without_collapsed_seeds_when_none_collapsed(tmp_path):
    sweep, _ = _sweep(tmp_path, {})
    contrasts = build_contrasts(build_table(sweep), n_permutations=200)
    assert not [x for x in contrasts.lines if x.note.startswith(WITHOUT)]
