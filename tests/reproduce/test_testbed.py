"""The testbed's design, checked on its composed configs: arms at equal compute and equal selection budget, one build
recipe for the two relocated models, VT against lowercasing at identical segmentation as the declared primary
contrast, no checkpoint selection, and tables whose contrasts name their own rows."""

import pytest
from helpers import CONF, compose_config
from omegaconf import OmegaConf

from vtlab.reproduce import main_rows, scales, sweeps, tables_of
from vtlab.stages.mlm import adaptation_seed

MAIN = main_rows("testbed")
SAME = [
    "mlm",
    "apc",
    "trainer.max_steps",
    "trainer.limit_val_batches",
    "data.batch_size",
    "data.num_negatives",
    "data.doc_max_length",
    "data.train",
    "regularizer.doc",
    "loss",
    "eval",
    "seed",
    "selection",
    "model.optimizer",
    "model.encoder.precision",
]


def _cfg(experiment: str, *overrides: str, hydra: bool = False):
    return compose_config([f"experiment={experiment}", *overrides], return_hydra_config=hydra)


def _at(cfg, key):
    value = OmegaConf.select(cfg, key)
    return OmegaConf.to_container(value, resolve=False) if OmegaConf.is_config(value) else value


def test_main_table_has_the_issue_arms_in_order():
    assert [r.rsplit("/", 1)[1] for r in MAIN] == [
        "wp-native",
        "unc-native",
        "bpe-native",
        "bpe-lowercase",
        "bpe-lowercase-masked",
        "bpe-vt-unc",
        "bpe-vt",
        "bpe-lowercase-inference-free",
        "bpe-vt-unc-inference-free",
    ]


@pytest.mark.slow
@pytest.mark.parametrize("key", SAME)
def test_every_main_arm_gets_the_same_compute_and_data(key):
    values = {row: _at(_cfg(row), key) for row in MAIN}
    first = values[MAIN[0]]
    assert first is not None
    assert all(v == first for v in values.values()), {r: v for r, v in values.items() if v != first}


@pytest.mark.slow
def test_every_arm_is_mlm_adapted_on_its_own_vocabulary_once_for_all_its_seeds():
    for row in MAIN:
        cfg = _cfg(row, "seed=2")
        assert cfg.mlm.steps > 0 and cfg.mlm.corpus._target_ == "vtlab.data.clean.clean_mlm_corpus"
        assert adaptation_seed(cfg) == 0  # shared by the arm's seeds and learning rates
    assert adaptation_seed(_cfg(MAIN[0], "seed=2", "mlm.seed=null")) == 2  # unset: the run's own seed
    lowercase = _cfg("testbed/main/bpe-lowercase").vocab.preprocess
    assert lowercase.lowercase and lowercase.blank_prefix  # adapts on the text it will read, first word as "Ġword"


def test_the_relocated_models_share_one_build_recipe_and_the_control_is_splade_tiny_itself():
    wp, bpe, unc = (_cfg(f"testbed/main/{r}").backbone for r in ("wp-native", "bpe-native", "unc-native"))
    assert OmegaConf.to_container(bpe.mlm) == OmegaConf.to_container(unc.mlm) and bpe.seed == unc.seed
    assert wp.name_or_path == "asset:splade-tiny" and "mlm" not in wp  # the control's start is SPLADE-tiny as is
    assert OmegaConf.to_container(wp) == OmegaConf.to_container(_cfg("testbed/references/splade-tiny").backbone)
    assert bpe.start.backbone.name_or_path == "asset:splade-tiny" == unc.start.backbone.name_or_path
    assert bpe.start.vocab.name == "modernbert-bpe" and unc.start.vocab.name == "olmo-lowercase"
    assert bpe.start.init.name == unc.start.init.name == "subword"
    assert OmegaConf.to_container(bpe.start.options) == OmegaConf.to_container(unc.start.options)


def test_the_primary_contrast_is_vt_against_lowercasing_at_one_segmentation():
    cfg = _cfg(MAIN[0])
    assert list(cfg.report.primary) == ["testbed-bpe-vt-unc", "testbed-bpe-lowercase"]
    assert [list(p) for p in cfg.report.contrasts][:4] == [
        ["testbed-bpe-vt-unc", "testbed-bpe-lowercase"],
        ["testbed-unc-native", "testbed-bpe-lowercase"],  # the case cost at identical segmentation, claimed A > B
        ["testbed-unc-native", "testbed-bpe-native"],
        ["testbed-bpe-vt", "testbed-bpe-vt-unc"],
    ]
    vt_unc, lowercase = _cfg("testbed/main/bpe-vt-unc"), _cfg("testbed/main/bpe-lowercase")
    assert OmegaConf.to_container(vt_unc.backbone) == OmegaConf.to_container(lowercase.backbone)  # both from M_bpe
    assert vt_unc.vocab.name == "olmo-lowercase" and lowercase.vocab.name == "blank-prefix-lower"


def test_every_arm_has_the_same_selection_grid_scored_on_dev_only():
    spec = _cfg(MAIN[0]).selection
    assert spec.eval == "testbed-dev" and list(spec.grid.model.optimizer.lr) == [1e-4, 2.5e-4]
    dev = _cfg(MAIN[0], "eval=testbed-dev").eval.evaluations
    assert list(dev) == ["boolq-clean-dev", "squad-dev", "sciriff-dev"] and spec.dataset is None  # their mean
    assert dev["boolq-clean-dev"].collection.split == "dev"
    assert (
        dev["squad-dev"].collection._target_
        == dev["sciriff-dev"].collection.load._target_
        == "vtlab.data.splits.held_out"
    )
    for table in ("ablation-init", "ablation-apc", "ablation-target"):
        assert _cfg(f"testbed/{table}").selection.arm == "testbed-bpe-vt"


def test_vt_uses_an_independent_target_space_and_the_privileged_one_is_an_ablation():
    vt = _cfg("testbed/main/bpe-vt")
    assert vt.vocab.embedding_model == "asset:minilm" and vt.init.name == "semantic-pmi"
    assert vt.transfer.bias == "init"  # MiniLM's MLM bias is untrained: no z-map
    target = _cfg("testbed/ablation-target", hydra=True).hydra.sweeper.params.vocab.split(",")
    assert target == ["minilm-bert-uncased", "bert-uncased"]


@pytest.mark.slow
def test_every_arm_is_encoded_in_the_precision_the_cpu_flags_give():
    # not auto: its per-model timing probe can encode one arm in int8 and the next in bf16
    assert {_cfg(row).model.encoder.precision for row in MAIN} == {"native"}


def test_no_checkpoint_selection_and_no_evaluation_set_as_dev():
    cfg = _cfg("testbed/main/bpe-vt")
    assert cfg.trainer.limit_val_batches == 0
    assert cfg.data.dev._target_ == "vtlab.data.clean.boolq_clean_collection" and cfg.data.dev.split == "dev"


def test_seeds_per_table_and_ablations_reuse_the_main_table(tmp_path):
    planned = sweeps("testbed", None, list(tables_of("testbed")), tmp_path)
    assert "seed=0,1,2,3,4" in planned["main"] and "seed=0" in planned["references"]
    for table in ("ablation-init", "ablation-apc", "ablation-target"):
        assert "seed=0,1" in planned[table] and any(o.startswith("reuse_runs=") for o in planned[table])


@pytest.mark.parametrize("table", ["ablation-init", "ablation-apc", "ablation-target"])
def test_each_ablation_names_contrasts_of_its_own_rows_and_includes_the_main_value(table):
    cfg = _cfg(f"testbed/{table}", hydra=True)
    ((key, values),) = cfg.hydra.sweeper.params.items()
    labels = {f"{key}={v}" for v in str(values).split(",")}
    assert {a for pair in cfg.report.contrasts for a in pair} <= labels
    main = _cfg("testbed/main/bpe-vt")
    assert f"{key}={OmegaConf.select(main, key + '.name') or main[key].name}" in labels  # reused from the main table


@pytest.mark.slow
def test_main_contrasts_name_main_rows():
    names = {_cfg(r).name for r in MAIN}
    assert {a for pair in _cfg(MAIN[0]).report.contrasts for a in pair} <= names


def test_the_default_run_selects_on_dev_before_the_main_table_and_runs_jobs_side_by_side(tmp_path, capsys):
    from vtlab.reproduce import main

    assert main(["--dry-run", "--out", str(tmp_path)]) == 0
    commands = [line for line in capsys.readouterr().out.splitlines() if line.startswith("+ ")]
    assert [c.split("hydra.sweep.dir=")[1].split()[0].rsplit("/", 1)[1] for c in commands] == [
        "references",
        "select-main",
        "main",
    ]  # the ablations are outside the 60-minute default
    select, main_table = commands[1], commands[2]
    assert "model.optimizer.lr=0.0001,0.00025" in select and "eval=testbed-dev" in select and " seed=0 " in select
    assert "experiment=testbed/selected-main/wp-native," in main_table and "seed=0,1,2,3,4" in main_table
    # seed 0 reuses the selection's training at the chosen setting (vtlab.runs.reuse.reuse_training)
    assert f"reuse_runs=['{tmp_path.resolve()}/select-main']" in main_table
    assert f"hydra.searchpath=['file://{tmp_path.resolve()}/selected-main']" in main_table
    assert all("hydra/launcher=parallel" in c for c in commands)


@pytest.mark.parametrize("scale", scales())
def test_every_row_file_is_in_its_table_and_every_table_has_its_configs(scale):
    # conf/tables/<scale>.yaml is the one place a table is defined: a row file it does not list would never run
    assert scales() == ["paper", "testbed"]
    for table, spec in tables_of(scale).items():
        if "rows" in spec:
            files = {p.stem for p in (CONF / "experiment" / scale / table).glob("*.yaml")}
            assert sorted(spec["rows"]) == sorted(files) and len(set(spec["rows"])) == len(spec["rows"])
        else:
            assert (CONF / "experiment" / scale / f"{table}.yaml").is_file()
        assert isinstance(spec["seeds"], int) and spec["seeds"] >= 1


def test_an_unknown_table_names_the_tables_file(capsys):
    from vtlab.reproduce import main

    assert main(["--dry-run", "--tables", "main,ablation-nothing"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("vtlab: error: --tables: ['ablation-nothing']") and "conf/tables/testbed.yaml" in err


def test_the_real_case_table_runs_with_its_references_and_selects_on_dev_first(tmp_path, capsys):
    from vtlab.reproduce import main

    assert main(["--dry-run", "--tables", "real-case", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    commands = [line for line in out.splitlines() if line.startswith("+ ")]
    assert [c.split("hydra.sweep.dir=")[1].split()[0].rsplit("/", 1)[1] for c in commands] == [
        "references",
        "mlm-rate-real-case",  # the MLM rate rule: e5-vt's adaptation at each rate, its held-out loss read
        "pilot-real-case",  # the pilot: the gate arms' selection, their extra seeds, BM25 on dev
        "pilot-real-case-seeds",
        "pilot-real-case-bm25",
        "select-real-case",
        "real-case",
    ]
    rate, pilot, seeds, _, select, table = commands[1:]
    assert "mlm.lr=0.0003,0.001 stage=mlm experiment=testbed/real-case/e5-vt" in rate
    # every arm at every rate (equal selection budget), on dev only, at the rate the rule chose
    assert "model.optimizer.lr=3e-05,6e-05" in select and "eval=testbed-dev" in select
    assert all("mlm.lr=<chosen>" in c for c in (pilot, seeds, select, table))
    assert "experiment=testbed/selected-real-case/e5-vt,testbed/selected-real-case/e5-lowercase-masked " in seeds
    assert "seed=1,2 eval=testbed-dev" in seeds
    assert "experiment=testbed/selected-real-case/e5-native," in table
    assert "seeds: real-case: seeds planned by its pilot" in out
    assert f"reuse_runs=['{tmp_path.resolve()}/select-real-case','{tmp_path.resolve()}/pilot-real-case-seeds']" in table


@pytest.mark.slow
def test_the_teacher_sensitivity_reruns_the_contrasts_arms_under_the_ensemble_when_asked(tmp_path, capsys):
    from vtlab.reproduce import main

    assert main(["--dry-run", "--out", str(tmp_path)]) == 0
    assert "main-teacher-ensemble" not in capsys.readouterr().out  # not in the 60-minute default
    assert main(["--dry-run", "--sensitivity", "--out", str(tmp_path)]) == 0
    (command,) = [c for c in capsys.readouterr().out.splitlines() if "main-teacher-ensemble" in c]
    assert "teacher=ensemble seed=0,1,2,3,4 " in command and "testbed/selected-main/wp-native" not in command
    assert "[testbed-bpe-vt,testbed-bpe-vt-unc]" in command and "[testbed-unc-native,testbed-bpe-native]" in command
    assert "report.primary=[testbed-bpe-vt-unc,testbed-bpe-lowercase]" in command


def test_the_pilot_runs_the_gate_arms_on_dev_only(tmp_path, capsys):
    from vtlab.reproduce import main

    assert main(["--dry-run", "--pilot", "--tables", "real-case", "--out", str(tmp_path)]) == 0
    commands = [line for line in capsys.readouterr().out.splitlines() if line.startswith("+ ")]
    assert [c.split("hydra.sweep.dir=")[1].split()[0].rsplit("/", 1)[1] for c in commands] == [
        "mlm-rate-real-case",
        "pilot-real-case",
        "pilot-real-case-seeds",
        "pilot-real-case-bm25",
    ]
    rows = "testbed/real-case/e5-vt,testbed/real-case/e5-lowercase-masked,testbed/real-case/e5-native"
    assert f"experiment={rows} seed=0 eval=testbed-dev " in commands[1]
    assert not any("eval=testbed " in c or "eval=" not in c for c in commands[1:])  # dev only
    assert main(["--dry-run", "--pilot", "--tables", "main", "--out", str(tmp_path)]) == 2  # no learning gate


def test_real_case_arms_start_from_the_same_e5_and_get_the_same_compute():
    rows = [f"testbed/real-case/{r}" for r in tables_of("testbed")["real-case"]["rows"]]
    cfgs = [_cfg(r) for r in rows]
    same = ("backbone", "mlm", "apc", "trainer", "data", "loss", "regularizer", "selection", "model.optimizer")
    for key in same:
        values = {str(OmegaConf.select(c, key)) for c in cfgs}
        assert len(values) == 1, (key, values)
    assert cfgs[0].backbone._target_ == "vtlab.backbones.E5Small" and cfgs[0].mlm.head_fit is not None
    # the body frozen: the vocabulary rows, the head's transform and the output bias adapt, for every arm
    assert list(cfgs[0].mlm.trainable) == ["word_embeddings", r"cls\.predictions\.transform", r"cls\.predictions\.bias"]
    assert cfgs[0].mlm.steps == 256 and cfgs[0].mlm.held_out.share > 0  # fixed a priori; the rate rule's held-out
    assert (
        OmegaConf.select(cfgs[0], "data.teacher") is None and cfgs[0].loss._target_ == "vtlab.losses.InfoNCE"
    )  # favours no vocabulary
    primary = cfgs[0].report.primary
    names = {c.name for c in cfgs}
    assert list(primary) == ["testbed-e5-vt", "testbed-e5-lowercase-masked"]
    assert [list(p) for p in cfgs[0].report.contrasts] == [list(primary)]  # the family is the primary alone
    assert {a for pair in cfgs[0].report.checks for a in pair} <= names  # the others are descriptions
    assert "shared" not in cfgs[0].selection  # the MLM length is no grid point (0 steps: --tables real-case-mlm)
    assert (
        "testbed-e5-vt-lower" not in names
    )  # the masked arm by construction (tests/method/test_vt_lower_equals_masked.py)


def test_an_ablation_takes_its_arms_choice_except_of_what_it_varies():
    from vtlab.report.selection import Choice
    from vtlab.reproduce import _chosen_for

    values = {"model.optimizer.lr": 0.0001, "apc.percentile": None}
    chosen = {"testbed-bpe-vt": Choice("testbed-bpe-vt", values, 0.8, ((values, 0.8),))}
    assert _chosen_for("ablation-init", "testbed", chosen) == ["model.optimizer.lr=0.0001", "apc.percentile=null"]
    # ablation-apc varies APC itself: the arm's choice to switch it off would turn every row of it off
    assert _chosen_for("ablation-apc", "testbed", chosen) == ["model.optimizer.lr=0.0001"]


def test_a_second_selection_stage_runs_each_arms_choice_with_its_settings_and_reuses_both(tmp_path):
    # selection.then (the APC sensitivity check of docs/testbed.md): each arm's chosen config, with the setting
    import vtlab.reproduce as reproduce

    spec = {
        "grid": {"model": {"optimizer": {"lr": [1e-4, 2.5e-4]}}},
        "then": {"apc": {"percentile": [None]}},
        "eval": "testbed-dev",
        "dataset": "boolq-clean-dev",
        "measure": "nDCG@10",
        "seed": 0,
    }
    runs = []
    overrides, _ = reproduce.select_settings(spec, "testbed", "main", tmp_path, lambda o, d: runs.append((o, d)), True)
    (grid, first), (then, second) = runs
    assert first.name == "select-main" and second.name == "select-main-then"
    assert grid[0] == "model.optimizer.lr=0.0001,0.00025" and then[0] == "apc.percentile=null"
    assert then[1].startswith("experiment=testbed/selected-main/wp-native,") and "eval=testbed-dev" in then
    assert any(o.startswith("hydra.searchpath=") for o in then)
    assert overrides[-1] == f"reuse_runs=['{first.resolve()}','{second.resolve()}']"


@pytest.mark.slow
def test_the_sensitivity_overrides_compose_onto_an_arm():
    # the overrides a sensitivity job runs with are accepted by Hydra: a multirun first composes them without the swept
    # experiment, where report.* does not exist yet, so they must add or replace it (++), not override it
    from vtlab.reproduce import _sensitivity_overrides

    table = ["experiment=" + ",".join(f"testbed/main/{r}" for r in tables_of("testbed")["main"]["rows"])]
    overrides = _sensitivity_overrides("testbed", "main", "ensemble", table)
    one = [o for o in overrides if not o.startswith(("experiment=", "seed="))]
    assert compose_config(one).data.teacher is not None  # as the multirun's first composition sees them
    cfg = compose_config(["experiment=testbed/main/bpe-vt", "seed=0", *one])
    assert cfg.data.teacher._target_ == "vtlab.data.teacher_ensemble.ensemble_scored"
    assert [list(p) for p in cfg.report.contrasts][1] == ["testbed-bpe-vt", "testbed-bpe-vt-unc"]
    assert list(cfg.report.primary) == ["testbed-bpe-vt-unc", "testbed-bpe-lowercase"]
