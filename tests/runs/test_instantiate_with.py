"""Built objects handed to a config's target arrive as the objects they are (vtlab/core/instantiate.py). Hydra's own
`instantiate(cfg, **kwargs)` merges the keyword arguments into the config, and OmegaConf turns a dataclass instance —
an input `Normalizer` — into a DictConfig: every arm with a preprocess (lowercase, masked lowercase, blank prefix)
then failed at its first training batch with "'DictConfig' object is not callable"."""

import pytest
from helpers import TWO_STEP_FINETUNE, compose_config, run_vtlab
from hydra.utils import instantiate
from omegaconf import DictConfig

from vtlab.core.instantiate import instantiate_with
from vtlab.vocab.targets import Normalizer


def test_a_dataclass_argument_is_passed_through_not_turned_into_a_config():
    cfg = compose_config([*(a for a in TWO_STEP_FINETUNE if a != "vocab=native"), "vocab=lowercase"])
    lower = Normalizer(lowercase=True)
    assert isinstance(instantiate(cfg.data, preprocess=lower).preprocess, DictConfig)  # the hazard itself
    data = instantiate_with(cfg.data, preprocess=lower)
    assert data.preprocess is lower and data.preprocess("An Apple") == "an apple"


@pytest.mark.cli
def test_a_lowercased_arm_fine_tunes_through_the_stage(tmp_path):
    run = tmp_path / "run"
    args = [*(a for a in TWO_STEP_FINETUNE if a != "vocab=native"), "vocab=lowercase", f"hydra.run.dir={run}"]
    proc = run_vtlab(*args)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (run / "model").is_dir()
