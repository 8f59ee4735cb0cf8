"""`python -m vtlab.reproduce --tables real-case --preset gpu`: the real-case table's recipe for one GPU (a longer
fine-tune, the same for every arm) and the time its plan is estimated to take there, printed before it starts."""

from pathlib import Path

import pytest
from helpers import compose_config

from vtlab.reproduce import main, presets
from vtlab.reproduce.tables import selection_spec, tables_of
from vtlab.runtime.precision import trainer_precision

GPU = presets.PRESETS["gpu"]
ROWS = [f"testbed/real-case/{r}" for r in tables_of("testbed")["real-case"]["rows"]]
# by hand: e5-small's 21.4M encoder parameters, hidden 384; e5's 47,284 output rows (native, lowercase and masked
# arms) or bert-base-uncased's 30,522 (e5-vt); 32 triplets of a 32-token query and two 128-token documents per step
E5, VT = 6 * (21.4e6 + 384 * 47284), 6 * (21.4e6 + 384 * 30522)
STEP_TOKENS, STEPS, MLM_TOKENS = 32 * (32 + 2 * 128), 400, 256 * 16 * 128
H100 = 0.35 * 989e12


@pytest.fixture(scope="module")
def arms() -> dict:
    return {r: compose_config([f"experiment={r}", *GPU.overrides]) for r in ROWS}


def test_the_preset_trains_every_arm_on_one_gpu_in_bf16_for_the_same_longer_fine_tune(arms):
    for cfg in arms.values():
        assert cfg.trainer.accelerator == "gpu" and cfg.trainer.devices == 1
        assert trainer_precision(cfg.trainer.precision, cfg.trainer.accelerator) == "bf16-mixed"
    budgets = {
        (
            c.trainer.max_steps,
            c.data.batch_size,
            c.model.scheduler.num_warmup_steps,
            c.regularizer.doc.warmup_steps,
            c.regularizer.query.warmup_steps,
            c.backbone.attn_implementation,
        )
        for c in arms.values()
    }
    assert budgets == {(400, 32, 40, 133, 133, "sdpa")}  # equal compute: one fine-tune for every arm
    cpu = compose_config([f"experiment={ROWS[0]}"])
    assert cpu.trainer.max_steps * cpu.data.batch_size * 10 < 400 * 32  # over ten times the CPU recipe's triplets


def test_the_estimate_is_the_plans_flops_at_the_assumed_rate():
    spec = selection_spec("testbed", "real-case")
    est = presets.estimate(GPU, "testbed", "real-case", spec, 12, [])
    # per arm: 2 rates at seed 0 (the grid is not extended), seeds 1-11; one 256-step MLM per arm, e5-vt's once per rate
    # of the MLM rate rule's grid (2)
    per_arm = 2 + 11
    flops = (3 * E5 + VT) * per_arm * STEPS * STEP_TOKENS + (3 * E5 + 2 * VT) * MLM_TOKENS
    assert (est.jobs, est.mlm) == (4 * per_arm, 5)
    assert est.flops == pytest.approx(flops, rel=1e-9)
    assert est.seconds == pytest.approx(flops / H100) and est.pessimistic_seconds == pytest.approx(10 * flops / H100)
    assert est.pessimistic_seconds <= 30 * 60  # the plan fits half an hour even at the pessimistic factor
    pilot = presets.estimate(GPU, "testbed", "real-case", spec, 12, [], pilot=True)
    # the gate arms (vt, masked, native) at the grid's 2 rates; vt and masked at seeds 1 and 2
    assert (pilot.jobs, pilot.mlm) == (3 * 2 + 2 * 2, 4)
    tunes = (2 * E5 + VT) * 2 + (E5 + VT) * 2
    assert pilot.flops == pytest.approx(tunes * STEPS * STEP_TOKENS + (2 * E5 + 2 * VT) * MLM_TOKENS, rel=1e-9)


def test_a_users_override_wins_and_only_the_tables_rows_take_the_preset():
    assert presets.with_extra(GPU, ["trainer=cpu"]) == [o for o in GPU.overrides if o != "trainer=gpu"] + [
        "trainer=cpu"
    ]
    assert presets.applies(GPU, "testbed", ["model.optimizer.lr=1,2", f"experiment={','.join(ROWS)}"])
    assert presets.applies(GPU, "testbed", ["experiment=testbed/selected-real-case/e5-vt", "seed=0,1"])
    assert not presets.applies(GPU, "testbed", ["experiment=testbed/references/bm25", "eval=testbed-dev"])


def test_the_preset_refuses_a_table_it_was_not_written_for(capsys):
    assert main(["--dry-run", "--tables", "main", "--preset", "gpu"]) == 2
    assert "--preset gpu: written for --tables real-case" in capsys.readouterr().err


def _commands(out: str) -> list[list[str]]:
    return [line[2:].split(" ") for line in out.splitlines() if line.startswith("+ ")]


@pytest.mark.slow
@pytest.mark.parametrize("pilot", [False, True])
def test_the_table_and_its_pilot_plan_with_the_preset_on_cpu_and_compose(tmp_path: Path, capsys, pilot: bool):
    """The table (and its pilot) through vtlab.reproduce's own path with the preset, its trainer switched to the CPU:
    the estimate printed first, every sweep of the table's rows with the preset's fine-tune, the references without it,
    and each sweep's first job composes."""
    args = ["--dry-run", "--tables", "real-case", "--preset", "gpu", "--out", str(tmp_path), "trainer=cpu"]
    assert main(args + (["--pilot"] if pilot else [])) == 0
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert first.startswith(f"preset gpu: the real-case {'pilot' if pilot else 'table'}: ")
    assert "not a measurement" in first and "min on one H100 SXM at 35% of its 989 TFLOP/s" in first
    commands = _commands(out)
    assert commands
    for cmd in commands:
        overrides = cmd[cmd.index("-m", 2) + 1 :]
        if presets.applies(GPU, "testbed", overrides):
            assert "trainer=cpu" in overrides and "trainer=gpu" not in overrides
            assert {"trainer.max_steps=400", "data.batch_size=32"} <= set(overrides)
            if "hydra.searchpath" not in " ".join(overrides):  # the chosen configs are written by the selection
                point = [o.split(",")[0] if "," in o and "[" not in o else o for o in overrides]
                # the rate rule's choice is unknown in a dry run: the printed command names it `<chosen>`
                point = [o for o in point if not o.startswith(("hydra", "reuse_runs=")) and "<chosen>" not in o]
                cfg = compose_config(point)
                assert (cfg.trainer.accelerator, cfg.trainer.max_steps, cfg.data.batch_size) == ("cpu", 400, 32)
        else:
            assert not set(GPU.overrides) & set(overrides) and "trainer=cpu" in overrides  # the user's alone
    assert any(presets.applies(GPU, "testbed", c) for c in commands)
