"""A cold and a warm cache give bit-identical models: building a cached start (a pretrained replica, a vocabulary
transfer) consumes the global RNG, and must happen before the run seeds itself (issue: cold-cache nondeterminism)."""

import shutil

import pytest
import torch
from safetensors.torch import load_file

from vtlab.backbones import TinyBert
from vtlab.core.assets import cache_dir
from vtlab.models.mlm import train_cached
from vtlab.models.mlm_pretrained import MLMPretrained

pytestmark = pytest.mark.train


def _recipe(steps: int) -> dict:
    return {
        "steps": steps,
        "mlm_probability": 0.3,
        "max_length": 32,
        "batch_size": 4,
        "lr": 1e-3,
        "scheduler": None,
        "warmup_steps": 0,
        "weight_decay": 0.0,
        "log_every_n_steps": 1,
        "corpus": {"_target_": "vtlab.data.corpora.boolq_passages", "_partial_": True, "max_docs": 40},
    }


def _adapted_weights(tmp_path, name: str) -> dict[str, torch.Tensor]:
    """Adapt (3 MLM steps, seed 7) a start that is itself MLM-pretrained (2 steps) on first use."""
    start = MLMPretrained(
        TinyBert(hidden_size=32, num_hidden_layers=1, intermediate_size=64), _recipe(2), name="tiny-pretrained", seed=0
    )
    out, _ = train_cached(start, _recipe(3), seed=7, log_dir=tmp_path / name)
    weights = load_file(str(out / "model.safetensors"))
    shutil.rmtree(out)  # the adaptation itself is recomputed next time; the start stays cached
    return weights


def test_cold_and_warm_cache_train_bit_identical_models(tmp_path, monkeypatch):
    monkeypatch.setenv("VTLAB_CACHE", str(tmp_path / "cache"))
    torch.manual_seed(123)
    cold = _adapted_weights(tmp_path, "cold")  # builds the pretrained start in-process first
    assert any(p.name.startswith("tiny-pretrained") for p in cache_dir("mlm").iterdir())
    torch.manual_seed(123)
    warm = _adapted_weights(tmp_path, "warm")  # the start is cached now
    assert cold.keys() == warm.keys()
    differing = [k for k in cold if not torch.equal(cold[k], warm[k])]
    assert not differing, f"cold and warm cache differ in {differing[:5]}"
