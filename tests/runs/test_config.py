"""Every config group value composes and resolves; the CLI fails clearly on bad choices and missing keys."""

import pytest
from helpers import CONF, compose_config, run_vtlab
from hydra.utils import get_object, instantiate
from omegaconf import OmegaConf, open_dict

GROUPS = sorted(d.name for d in CONF.iterdir() if d.is_dir() and d.name not in ("hydra", "tables"))  # hydra/: Hydra's
# own groups; tables/: what vtlab.reproduce runs, read by it (not a group of the run's config)
# keys a user must fill for some choices (`???` in the YAML); everything else must resolve as composed
REQUIRED = {
    ("eval", "beir"): {"eval.path"},
    ("eval", "hf-beir"): {"eval.name"},
    ("eval", "mteb"): {"eval.name"},
    ("data", "jsonl"): {"data.train.path"},
}


def options(group: str) -> list[str]:
    return sorted(str(p.relative_to(CONF / group).with_suffix("")) for p in (CONF / group).rglob("*.yaml"))


CASES = [(g, o) for g in GROUPS for o in options(g) if g != "experiment"]


@pytest.mark.parametrize("group,option", CASES, ids=[f"{g}={o}" for g, o in CASES])
def test_group_value_composes(group, option, tmp_path):
    cfg = compose_config([f"{group}={option}", f"paths.run_dir={tmp_path}"])
    assert set(OmegaConf.missing_keys(cfg)) == REQUIRED.get((group, option), set())
    if not OmegaConf.missing_keys(cfg):
        OmegaConf.to_container(cfg, resolve=True)  # every interpolation resolves


def experiment_file(experiment: str) -> tuple[dict, list[str], dict[str, str]]:
    """(the file's own values, the experiments it includes, its `override /group: option` entries), as written."""
    raw = OmegaConf.to_container(OmegaConf.load(CONF / "experiment" / f"{experiment}.yaml"), resolve=False)
    includes, overrides = [], {}
    for entry in raw.pop("defaults", []):
        if isinstance(entry, str):
            includes.append(entry.removeprefix("/experiment/"))
        else:
            ((key, option),) = entry.items()
            overrides[key.removeprefix("override ").lstrip("/")] = option
    raw.pop("hydra", None)
    return raw, includes, overrides


def leaves(node, prefix: str = ""):
    """(dotted key, value) of every scalar or list a config file sets."""
    if isinstance(node, dict) and node:
        for key, value in node.items():
            yield from leaves(value, f"{prefix}.{key}" if prefix else str(key))
    elif prefix:
        yield prefix, node


def at(container: dict, dotted: str):
    for key in dotted.split("."):
        if not isinstance(container, dict) or key not in container:
            return "<absent>"
        container = container[key]
    return container


def targets(node, path: str = ""):
    """(config path, `_target_`) of every node that Hydra would instantiate."""
    if isinstance(node, dict):
        if "_target_" in node:
            yield path, node["_target_"]
        for key, value in node.items():
            yield from targets(value, f"{path}.{key}" if path else str(key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from targets(value, f"{path}[{i}]")


EXPERIMENTS = options("experiment")
INCLUDED = {inc for e in EXPERIMENTS for inc in experiment_file(e)[1]}  # mixins (base, vt, inference-free)


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_experiment_composes(experiment, tmp_path):
    """What a broken experiment file would get wrong: its name, an override or value that does not land (typo'd
    group, missing `# @package _global_`), a sweep over a key or option that does not exist, a ??? left unfilled,
    an interpolation or a `_target_` that does not resolve."""
    cfg = compose_config([f"experiment={experiment}", f"paths.run_dir={tmp_path}"], return_hydra_config=True)
    choices = cfg.hydra.runtime.choices
    sweep = OmegaConf.to_container(cfg.hydra.sweeper.get("params") or OmegaConf.create())
    with open_dict(cfg):
        del cfg["hydra"]
    own, _, overrides = experiment_file(experiment)
    assert "experiment" not in cfg, "the file's values landed under `experiment.`: is `# @package _global_` missing?"

    # a table row is named after its file (paper/main/bert-native → paper-bert-native); a mixin must be included
    parts = experiment.split("/")
    if "name" in own:
        assert cfg.name == own["name"] == "-".join(dict.fromkeys([parts[0], parts[-1]]))
    else:
        assert experiment in INCLUDED, (
            f"{experiment} sets no name (it would run as {cfg.name!r}) and nothing includes it"
        )
    # a table's rows share its wandb group (elsewhere `group` may stay null: one group per sweep)
    if len(parts) > 1 and experiment not in INCLUDED:
        assert isinstance(cfg.group, str) and cfg.group

    # every `override /group: option` it writes is the group's final choice, every value it sets is in the config
    assert {g: choices[g] for g in overrides} == overrides
    composed = OmegaConf.to_container(cfg, resolve=False)
    wrong = {k: (v, at(composed, k)) for k, v in leaves(own) if at(composed, k) != v}
    assert not wrong, f"values the file sets but the composed config does not have (file, composed): {wrong}"

    # a sweep names real keys, and real options of a config group
    for key, values in sweep.items():
        key = key.lstrip("+~")
        if (CONF / key).is_dir():
            bad = [v for v in str(values).split(",") if not (CONF / key / f"{v}.yaml").is_file()]
            assert not bad, f"hydra.sweeper.params.{key}: no such option(s) {bad}"
        else:
            assert at(composed, key) != "<absent>", f"hydra.sweeper.params sweeps {key}, which is not in the config"

    # ??? only where a chosen option asks the user for it (e.g. data=jsonl: data.train.path)
    allowed = set().union(*(REQUIRED.get((g, c), set()) for g, c in choices.items()))
    assert set(OmegaConf.missing_keys(cfg)) <= allowed
    resolved = OmegaConf.to_container(cfg, resolve=True)  # every interpolation resolves
    unresolvable = []
    for path, target in targets(resolved):
        try:
            get_object(target)
        except Exception as exc:  # ImportError, AttributeError, or whatever the module raises on import
            unresolvable.append(f"{path}._target_={target}: {type(exc).__name__}: {exc}")
    assert not unresolvable, "\n".join(unresolvable)


def test_default_is_offline_quickstart(tmp_path):
    cfg = compose_config([f"paths.run_dir={tmp_path}"])
    assert cfg.backbone.name_or_path.startswith("asset:")
    assert cfg.trainer.accelerator == "cpu"
    assert cfg.logger.online is False
    # wandb is built offline unless logger.online=true; `online` itself is a setting, not a logger
    from pytorch_lightning.loggers import WandbLogger

    from vtlab.tracking.loggers import configured_loggers
    from vtlab.tracking.resumable_csv import ResumableCSVLogger

    for online in (False, True):
        cfg.logger.online = online
        loggers = configured_loggers(cfg)
        assert [type(lg) for lg in loggers] == [ResumableCSVLogger, WandbLogger]
        assert loggers[1]._offline is (not online)
    # cheap nodes instantiate into the real objects
    from vtlab.losses import InfoNCE
    from vtlab.regularizers import Flops

    assert isinstance(instantiate(cfg.loss), InfoNCE)
    reg = instantiate(cfg.regularizer.doc)
    assert isinstance(reg, Flops) and reg.weight == cfg.regularizer.doc.weight


@pytest.mark.cli
def test_cli_unknown_group_value_lists_options(tmp_path):
    res = run_vtlab("backbone=no-such-model", f"hydra.run.dir={tmp_path}", timeout=120)
    assert res.returncode == 2 and res.stderr.strip().splitlines() == [res.stderr.strip()]
    assert res.stderr.startswith("vtlab: error: backbone=no-such-model: no such choice in conf/backbone/ (choices: ")
    assert "splade-tiny" in res.stderr


@pytest.mark.cli
def test_cli_missing_required_key_names_it(tmp_path):
    res = run_vtlab("stage=evaluate", "eval=beir", "logger=none", f"hydra.run.dir={tmp_path}", timeout=120)
    assert res.returncode == 2
    line = res.stderr.strip().splitlines()[-1]
    assert "eval.path" in line


def test_a_hub_backbone_offline_is_refused_at_admission_naming_the_hub_id(tmp_path, monkeypatch):
    """The run's admission (vtlab.stages.admission) refuses it before any data is built: the line the CLI prints."""
    from vtlab.core.errors import AssetError, config_key, one_line
    from vtlab.stages.admission import admit

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = compose_config(["backbone=modernbert", "vocab=native", "stage=evaluate", f"paths.run_dir={tmp_path / 'run'}"])
    started = []
    with pytest.raises(AssetError) as ei, admit(cfg, on_start=lambda: started.append(True)):
        pass
    line = one_line(ei.value, config_key(ei.value, cfg))  # what pipeline.run_or_exit prints
    assert line.startswith("vtlab: error: backbone.name_or_path='answerdotai/ModernBERT-base' must be downloaded")
    assert "offline" in line and "\n" not in line
    assert started == [] and list((tmp_path / "run").iterdir()) == []
