"""Equal selection budget (vtlab/report/selection.py): each arm keeps its own best setting by its dev score, every
setting tried is recorded, a hole in the grid is refused, and the written config composes to the arm plus its choice."""

from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf
from test_report import write_job, write_multirun

from vtlab.report.discovery import ReportError
from vtlab.report.selection import Choice, choose, override_text, refine, write_selected

DEV = {
    "wp": {"0.0005": 0.70, "0.001": 0.68},
    "bpe": {"0.0005": 0.61, "0.001": 0.64},
    "tie": {"0.0005": 0.5, "0.001": 0.5},
}


def _sweep(tmp_path: Path, drop: tuple[str, str] | None = None) -> Path:
    sweep = tmp_path / "select"
    arms = list(DEV)
    write_multirun(sweep, ["model.optimizer.lr=0.0005,0.001", f"experiment={','.join(arms)}", "seed=0"])
    num = 0
    for lr in ("0.0005", "0.001"):
        for arm in arms:
            done = (arm, lr) != drop
            write_job(
                sweep,
                num,
                [f"model.optimizer.lr={lr}", f"experiment={arm}", "seed=0"],
                f"testbed-{arm}",
                status="done" if done else "failed",
                metrics={"boolq-clean-dev": {"nDCG@10": DEV[arm][lr]}} if done else None,
            )
            num += 1
    return sweep


def test_each_arm_keeps_its_own_best_and_every_tried_setting(tmp_path):
    chosen = choose(_sweep(tmp_path), ["model.optimizer.lr"], "boolq-clean-dev", "nDCG@10")
    assert chosen["testbed-wp"].values == {"model.optimizer.lr": 0.0005} and chosen["testbed-wp"].score == 0.70
    assert chosen["testbed-bpe"].values == {"model.optimizer.lr": 0.001} and chosen["testbed-bpe"].score == 0.64
    assert chosen["testbed-tie"].values == {"model.optimizer.lr": 0.0005}  # a tie keeps the first tried
    assert [s for _, s in chosen["testbed-bpe"].tried] == [0.61, 0.64]


def test_an_arm_with_a_failed_setting_is_named_not_guessed(tmp_path):
    with pytest.raises(ReportError, match="testbed-bpe .*without a boolq-clean-dev nDCG@10"):
        choose(_sweep(tmp_path, drop=("bpe", "0.001")), ["model.optimizer.lr"], "boolq-clean-dev", "nDCG@10")


def test_the_written_config_is_the_arm_with_its_choice(tmp_path, compose):
    chosen = choose(_sweep(tmp_path), ["model.optimizer.lr"], "boolq-clean-dev", "nDCG@10")
    chosen = {"testbed-wp-native": chosen["testbed-bpe"]}  # the 1e-3 choice, on a real arm's config
    root = tmp_path / "selected"
    runs = write_selected(chosen, {"testbed-wp-native": "testbed/main/wp-native"}, root, "testbed/selected")
    assert runs == {"testbed-wp-native": "testbed/selected/wp-native"}
    base = compose(["experiment=testbed/main/wp-native"])
    cfg = compose(["experiment=testbed/selected/wp-native", f"hydra.searchpath=[file://{root}]"])
    assert base.model.optimizer.lr == 5e-4 and cfg.model.optimizer.lr == 0.001
    assert cfg.name == base.name == "testbed-wp-native"
    assert [t["score"] for t in cfg.report.selection.tried] == [0.61, 0.64]
    rest = {k: v for k, v in OmegaConf.to_container(cfg).items() if k not in ("model", "report")}
    assert rest == {k: v for k, v in OmegaConf.to_container(base).items() if k not in ("model", "report")}
    assert yaml.safe_load((root / "selection.json").read_text())["testbed-wp-native"]["score"] == 0.64


def _choice(arm: str, values: dict, score: float) -> Choice:
    return Choice(arm, values, score, ((values, score),))


def test_the_second_stage_replaces_a_choice_only_where_dev_scores_it_higher():
    lr = {"model.optimizer.lr": 0.0001}
    first = {"a": _choice("a", lr, 0.88), "b": _choice("b", lr, 0.84), "c": _choice("c", lr, 0.80)}
    off = {"apc.percentile": None}
    then = {"a": _choice("a", off, 0.89), "b": _choice("b", off, 0.83), "c": _choice("c", off, 0.80)}
    out = refine(first, then)
    assert out["a"].values == {**lr, **off} and out["a"].score == 0.89
    assert out["b"].values == lr and out["b"].score == 0.84
    assert out["c"].values == lr  # a tie keeps the grid's choice
    # every setting tried, the second stage's with the full values it ran at
    assert out["b"].tried == ((lr, 0.84), ({**lr, **off}, 0.83))
    with pytest.raises(ReportError, match="c have no job in the second stage"):
        refine(first, {"a": then["a"], "b": then["b"]})


def test_a_setting_of_null_is_written_as_null_and_composes_to_apc_switched_off(tmp_path, compose):
    assert override_text(None) == "null" and override_text(0.00025) == "0.00025"
    values = {"model.optimizer.lr": 0.0001, "apc.percentile": None}
    root = tmp_path / "selected"
    chosen = {"testbed-wp-native": _choice("testbed-wp-native", values, 0.89)}
    write_selected(chosen, {"testbed-wp-native": "testbed/main/wp-native"}, root, "testbed/selected")
    base = compose(["experiment=testbed/main/wp-native"])
    cfg = compose(["experiment=testbed/selected/wp-native", f"hydra.searchpath=[file://{root}]"])
    assert base.apc.percentile == 60 and cfg.apc.percentile is None and cfg.model.optimizer.lr == 0.0001
    rest = {k: v for k, v in OmegaConf.to_container(cfg).items() if k not in ("model", "report", "apc")}
    assert rest == {k: v for k, v in OmegaConf.to_container(base).items() if k not in ("model", "report", "apc")}


# the shared setting (mlm.steps) is chosen by the primary's two arms; the third arm would prefer the other value
SHARED_DEV = {
    "vt": {("0", "0.0005"): 0.60, ("0", "0.001"): 0.62, ("64", "0.0005"): 0.70, ("64", "0.001"): 0.66},
    "masked": {("0", "0.0005"): 0.71, ("0", "0.001"): 0.69, ("64", "0.0005"): 0.68, ("64", "0.001"): 0.67},
    "native": {("0", "0.0005"): 0.90, ("0", "0.001"): 0.50, ("64", "0.0005"): 0.40, ("64", "0.001"): 0.45},
}


def _shared_sweep(tmp_path: Path, name: str = "select", lrs: tuple[str, ...] = ("0.0005", "0.001")) -> Path:
    sweep = tmp_path / name
    arms = list(SHARED_DEV)
    write_multirun(sweep, [f"model.optimizer.lr={','.join(lrs)}", "mlm.steps=0,64", f"experiment={','.join(arms)}"])
    num = 0
    for lr in lrs:
        for steps in ("0", "64"):
            for arm in arms:
                score = SHARED_DEV[arm].get((steps, lr), 0.95 if arm == "vt" and steps == "64" else 0.3)
                write_job(
                    sweep,
                    num,
                    [f"model.optimizer.lr={lr}", f"mlm.steps={steps}", f"experiment={arm}", "seed=0"],
                    f"testbed-{arm}",
                    metrics={"boolq-clean-dev": {"nDCG@10": score}},
                )
                num += 1
    return sweep


def test_a_shared_setting_is_chosen_by_the_primary_arms_mean_and_each_arm_keeps_its_rate_at_it(tmp_path):
    from vtlab.report.selection import choose_shared

    by = ["testbed-vt", "testbed-masked"]
    sweep = _shared_sweep(tmp_path)
    pick = choose_shared(sweep, ["model.optimizer.lr"], ["mlm.steps"], by, "boolq-clean-dev", "nDCG@10")
    # steps 0: mean(0.62, 0.71) = 0.665; steps 64: mean(0.70, 0.68) = 0.69 -> 64, although native is best at 0
    assert pick.values == {"mlm.steps": 64}
    assert [(v, round(m, 4)) for v, m in pick.means] == [({"mlm.steps": 0}, 0.665), ({"mlm.steps": 64}, 0.69)]
    assert pick.choices["testbed-native"].values == {"mlm.steps": 64, "model.optimizer.lr": 0.001}
    assert pick.choices["testbed-native"].score == 0.45
    assert pick.choices["testbed-vt"].values == {"mlm.steps": 64, "model.optimizer.lr": 0.0005}


def test_an_edge_choice_is_found_and_the_extended_grid_is_chosen_over_both_sweeps(tmp_path):
    from vtlab.report.selection import at_edges, choose
    from vtlab.reproduce.selecting import extended

    first = _shared_sweep(tmp_path)
    chosen = choose(first, ["model.optimizer.lr"], "boolq-clean-dev", "nDCG@10", {"mlm.steps": 64})
    grid = [0.0005, 0.001]
    assert at_edges(chosen, "model.optimizer.lr", grid) == [0.0005, 0.001]  # vt/masked low, native high
    assert at_edges({"x": chosen["testbed-vt"]}, "model.optimizer.lr", [0.0001, 0.0005, 0.001]) == []  # inside
    assert extended(grid, [0.0005, 0.001], 2.0) == [0.00025, 0.002]
    second = _shared_sweep(tmp_path, "extend", ("0.00025",))  # vt scores 0.95 at 64 steps there, the others 0.3
    both = choose([first, second], ["model.optimizer.lr"], "boolq-clean-dev", "nDCG@10", {"mlm.steps": 64})
    assert both["testbed-vt"].values == {"mlm.steps": 64, "model.optimizer.lr": 0.00025}
    assert both["testbed-masked"].values == {"mlm.steps": 64, "model.optimizer.lr": 0.0005}
    assert len(both["testbed-vt"].tried) == 3  # the two rates at 64 steps and the extension, never the 0-step jobs


def test_a_shared_choice_without_per_arm_keys_reads_each_arm_at_the_picked_value(tmp_path):
    # one rate only: the shared choice with no per-arm keys is each arm's one score at the picked length
    from vtlab.report.selection import choose_shared

    sweep = _shared_sweep(tmp_path, lrs=("0.0005",))
    by = ["testbed-vt", "testbed-masked"]
    pick = choose_shared(sweep, [], ["mlm.steps"], by, "boolq-clean-dev", "nDCG@10")
    # steps 0: mean(0.60, 0.71) = 0.655; steps 64: mean(0.70, 0.68) = 0.69
    assert pick.values == {"mlm.steps": 64} and pick.choices["testbed-native"].score == 0.40
    assert pick.choices["testbed-vt"].values == {"mlm.steps": 64}
