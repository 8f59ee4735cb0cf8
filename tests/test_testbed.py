"""The testbed's design, checked on its composed configs: arms at equal compute, one build recipe for both pretrained
models, an independent VT target, no checkpoint selection, and tables whose contrasts name their own rows."""
import pytest
from omegaconf import OmegaConf

from vtlab.reproduce import TABLES, main_rows, sweeps
from helpers import compose_cfg

MAIN = main_rows("testbed")
SAME = ["mlm", "apc", "trainer.max_steps", "trainer.limit_val_batches", "data.batch_size", "data.num_negatives",
        "data.doc_max_length", "data.train", "regularizer.doc", "loss", "eval", "seed"]


def _cfg(experiment: str, *overrides: str, hydra: bool = False):
    return compose_cfg([f"experiment={experiment}", *overrides], hydra=hydra)


def _at(cfg, key):
    value = OmegaConf.select(cfg, key)
    return OmegaConf.to_container(value, resolve=False) if OmegaConf.is_config(value) else value


def test_main_table_has_the_issue_arms_in_order():
    assert [r.rsplit("/", 1)[1] for r in MAIN] == [
        "wp-native", "bpe-native", "bpe-lowercase", "bpe-vt",
        "wp-inference-free", "bpe-inference-free", "bpe-lowercase-inference-free", "bpe-vt-inference-free"]


@pytest.mark.parametrize("key", SAME)
def test_every_main_arm_gets_the_same_compute_and_data(key):
    values = {row: _at(_cfg(row), key) for row in MAIN}
    first = values[MAIN[0]]
    assert first is not None
    assert all(v == first for v in values.values()), {r: v for r, v in values.items() if v != first}


def test_every_arm_is_mlm_adapted_on_its_own_vocabulary_and_seeded_by_the_run():
    for row in MAIN:
        cfg = _cfg(row, "seed=2")
        assert cfg.mlm.steps > 0 and cfg.mlm.corpus._target_ == "vtlab.data.clean.clean_mlm_corpus"
    assert _cfg(MAIN[2]).vocab.preprocess.lowercase  # the lowercase arm adapts on the text it will read


def test_both_pretrained_models_share_one_build_recipe_and_differ_only_in_vocabulary():
    wp, bpe = _cfg("testbed/main/wp-native").backbone, _cfg("testbed/main/bpe-native").backbone
    assert OmegaConf.to_container(wp.mlm) == OmegaConf.to_container(bpe.mlm) and wp.seed == bpe.seed
    assert wp.start.name_or_path == "asset:splade-tiny" == bpe.start.backbone.name_or_path
    assert bpe.start.vocab.name == "modernbert-bpe" and bpe.start.init.name == "subword"


def test_vt_uses_an_independent_target_space_and_the_privileged_one_is_an_ablation():
    vt = _cfg("testbed/main/bpe-vt")
    assert vt.vocab.embedding_model == "asset:minilm" and vt.init.name == "semantic-pmi"
    assert vt.transfer.bias == "init"  # MiniLM's MLM bias is untrained: no z-map
    target = _cfg("testbed/ablation-target", hydra=True).hydra.sweeper.params.vocab.split(",")
    assert target == ["minilm-bert-uncased", "bert-uncased"]


def test_no_checkpoint_selection_and_no_evaluation_set_as_dev():
    cfg = _cfg("testbed/main/bpe-vt")
    assert cfg.trainer.limit_val_batches == 0
    assert cfg.data.dev._target_ == "vtlab.data.clean.boolq_clean_collection" and cfg.data.dev.split == "dev"


def test_seeds_per_table_and_ablations_reuse_the_main_table(tmp_path):
    planned = sweeps("testbed", None, list(TABLES["testbed"]), tmp_path)
    assert "seed=0,1,2" in planned["main"] and "seed=0" in planned["references"]
    for table in ("ablation-init", "ablation-apc", "ablation-target"):
        assert "seed=0,1" in planned[table] and any(o.startswith("reuse_runs=") for o in planned[table])


@pytest.mark.parametrize("table", ["ablation-init", "ablation-apc", "ablation-target"])
def test_each_ablation_names_contrasts_of_its_own_rows_and_includes_the_main_value(table):
    cfg = _cfg(f"testbed/{table}", hydra=True)
    (key, values), = cfg.hydra.sweeper.params.items()
    labels = {f"{key}={v}" for v in str(values).split(",")}
    assert {a for pair in cfg.report.contrasts for a in pair} <= labels
    main = _cfg("testbed/main/bpe-vt")
    assert f"{key}={OmegaConf.select(main, key + '.name') or main[key].name}" in labels  # reused from the main table


def test_main_contrasts_name_main_rows():
    names = {_cfg(r).name for r in MAIN}
    assert {a for pair in _cfg(MAIN[0]).report.contrasts for a in pair} <= names
