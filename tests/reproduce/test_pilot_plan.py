"""The real-case pilot (vtlab/reproduce/learning.py, mlm_rate.py): the MLM rate chosen by the held-out loss alone, the
gate arms selected on dev as the table selects them, the primary's extra seeds at their chosen rate, and the seed plan
from the upper 80% bound of the measured per-seed SD — every number checked against a hand computation. The sweeps
are written to disk as `python -m vtlab -m` leaves them (tests/reproduce/test_report.py); nothing is trained."""

import json
import math
from pathlib import Path

import pytest
from scipy import stats as scipy_stats
from test_report import write_job, write_multirun

from vtlab.evaluation import stats
from vtlab.reproduce import learning, mlm_rate
from vtlab.reproduce.tables import selection_spec

# the hand case: dev nDCG@10 by arm, fine-tuning rate and seed
DEV = {
    "testbed-e5-vt": {(3e-05, 0): 0.850, (6e-05, 0): 0.860, (6e-05, 1): 0.845, (6e-05, 2): 0.872},
    "testbed-e5-lowercase-masked": {(3e-05, 0): 0.852, (6e-05, 0): 0.840, (3e-05, 1): 0.838, (3e-05, 2): 0.851},
    "testbed-e5-native": {(3e-05, 0): 0.845, (6e-05, 0): 0.841},
}
BM25 = 0.8351
SQUAD_GAP = 0.004  # e5-vt's dev SQuAD score below its BoolQ one; the other arms' are equal
HELD_OUT = {0.0003: 6.41, 0.001: 6.27}  # the held-out MLM loss of e5-vt after the steps, by rate
NAMES = {
    "testbed/real-case/e5-vt": "testbed-e5-vt",
    "testbed/real-case/e5-lowercase-masked": "testbed-e5-lowercase-masked",
    "testbed/real-case/e5-native": "testbed-e5-native",
    "testbed/references/bm25": "testbed-bm25",
}


def _values(overrides: list[str], key: str) -> list[str]:
    return next(o.split("=", 1)[1].split(",") for o in overrides if o.startswith(key + "="))


class FakeSweeps:
    """Writes each asked sweep's jobs as a finished `python -m vtlab -m` would, with the hand case's scores."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], Path]] = []

    def __call__(self, overrides: list[str], sweep: Path) -> None:
        self.calls.append((overrides, sweep))
        write_multirun(sweep, overrides)
        experiments = _values(overrides, "experiment")
        seeds = [int(s) for s in _values(overrides, "seed")]
        if "stage=mlm" in overrides:
            for num, rate in enumerate(_values(overrides, "mlm.lr")):
                job = write_job(sweep, num, [f"mlm.lr={rate}", "stage=mlm", "seed=0"], "mlm-e5-vt")
                entry = job / "mlm" / "model"
                entry.mkdir(parents=True)
                held = {"before": {"loss": 9.0}, "after": {"loss": HELD_OUT[float(rate)]}}
                (entry / mlm_rate.DONE).write_text(json.dumps({"held_out": held}))
            return
        rates = _values(overrides, "model.optimizer.lr") if any("optimizer.lr" in o for o in overrides) else [None]
        num = 0
        for rate in rates:
            for experiment in experiments:
                name = NAMES.get(experiment) or "testbed-" + experiment.rsplit("/", 1)[1]
                for seed in seeds:
                    if name == "testbed-bm25":
                        score = BM25
                    elif rate is None:  # a selected config: the arm's chosen rate
                        score = DEV[name][(6e-05 if name == "testbed-e5-vt" else 3e-05, seed)]
                    else:  # the extension's rates (a 2-rate grid's choice is always at an edge) score lower
                        score = DEV[name].get((float(rate), seed), 0.80)
                    job_overrides = [f"experiment={experiment}", f"seed={seed}"]
                    job_overrides += [f"model.optimizer.lr={rate}"] if rate is not None else []
                    # the dev suite: BoolQ-clean's dev split, and SQuAD's leftover scoring SQUAD_GAP lower for vt
                    squad = score - (SQUAD_GAP if name == "testbed-e5-vt" else 0.0)
                    metrics = {"boolq-clean-dev": {"nDCG@10": score}, "squad-dev": {"nDCG@10": squad}}
                    write_job(sweep, num, job_overrides, name, metrics=metrics)
                    num += 1


def test_the_mlm_rate_is_the_lowest_held_out_loss_and_is_written(tmp_path):
    runs = FakeSweeps()
    assert mlm_rate.choose("testbed", "real-case", 0, tmp_path, runs) == ["mlm.lr=0.001"]
    (overrides, sweep), *_ = runs.calls
    assert "stage=mlm" in overrides and "experiment=testbed/real-case/e5-vt" in overrides
    record = json.loads((tmp_path / "mlm-rate-real-case.json").read_text())
    assert record["chosen"] == 0.001 and record["at_edge"] is True  # the grid's top: said, not hidden


def test_a_rate_without_a_held_out_loss_is_named_not_guessed(tmp_path):
    with pytest.raises(Exception, match=r"mlm.lr=\[0.001\]"):
        mlm_rate.pick({0.0003: 6.4, 0.001: None}, tmp_path)


@pytest.mark.slow
def test_the_pilot_selects_the_gate_arms_and_plans_the_seeds_from_the_upper_bound_of_the_spread(tmp_path, capsys):
    spec = selection_spec("testbed", "real-case")
    runs = FakeSweeps()
    result = learning.pilot("testbed", "real-case", spec, tmp_path, runs)
    # each arm's own best rate at seed 0, as the table's selection reads it
    assert result["chosen"]["testbed-e5-vt"] == {"model.optimizer.lr": 6e-05}
    assert result["chosen"]["testbed-e5-lowercase-masked"] == {"model.optimizer.lr": 3e-05}
    assert result["rows"] == {"testbed-e5-vt": 0.860, "testbed-e5-lowercase-masked": 0.852, "testbed-e5-native": 0.845}
    # the primary's arms at seeds 1 and 2 ran from their selected configs, on dev
    seeds_call = next(o for o, d in runs.calls if d.name == "pilot-real-case-seeds")
    assert "seed=1,2" in seeds_call and "eval=testbed-dev" in seeds_call
    # per-seed differences vt − masked of the dev-suite average: 0.860 − 0.852, 0.845 − 0.838, 0.872 − 0.851 on
    # BoolQ, each less SQUAD_GAP / 2 (the average over the two dev collections)
    diffs = [0.008 - 0.002, 0.007 - 0.002, 0.021 - 0.002]
    assert result["plan"]["per_seed"] == pytest.approx(diffs)
    sd = math.sqrt(sum((d - sum(diffs) / 3) ** 2 for d in diffs) / 2)
    bound = sd * math.sqrt(2 / scipy_stats.chi2.ppf(0.2, 2))  # the one-sided upper 80% bound, df 2
    assert result["plan"]["sd"] == pytest.approx(sd) and result["plan"]["sd_bound"] == pytest.approx(bound)
    assert result["plan"]["seeds"] == stats.seeds_for_power(bound, 0.03, 0.05, 0.8)
    # every gate arm above BM25 and a seed count reached: go
    assert result["verdict"] == "go" and result["passed"] is True
    out = capsys.readouterr().out
    assert "pilot real-case: go" in out and f"{result['plan']['seeds']} seeds for 80% power" in out


def test_the_seed_plan_bound_and_its_seed_count_by_hand():
    # s = 0.01 over 3 seeds: bound = 0.01 * sqrt(2 / chi2.ppf(0.2, 2)) = 0.01 * sqrt(2 / 0.4463) = 0.02117
    plan = stats.seed_plan([0.00, 0.01, 0.02], effect=0.03)
    assert plan.sd == pytest.approx(0.01)
    assert plan.sd_bound == pytest.approx(0.01 * math.sqrt(2 / 0.44629), rel=1e-4)
    # the power at the planned n reaches 0.8 and at n − 1 does not
    assert stats.power_of(plan.seeds, plan.sd_bound, 0.03) >= 0.8 > stats.power_of(plan.seeds - 1, plan.sd_bound, 0.03)
    with pytest.raises(stats.StatsError):
        stats.seed_plan([0.01], effect=0.03)  # one seed has no spread
