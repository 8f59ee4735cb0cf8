"""Backbones MLM-trained by vtlab's own MLM stage: a `start` backbone (pretrained, e.g. SPLADE-tiny, or random init)
after masked-LM training with one recipe — the testbed's M_unc / M_bpe (conf/backbone/testbed-*.yaml, recipe
conf/mlm/testbed-build.yaml).

Training runs once per (start, recipe, seed) through `vtlab.models.mlm.train_cached` and is shared by every row
and every job of a sweep that names the same backbone.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hydra.utils import instantiate
from omegaconf import OmegaConf

from vtlab.backbones import Backbone
from vtlab.models.mlm import cache_key as mlm_key
from vtlab.models.mlm import train_cached


class MLMPretrained(Backbone):
    """`start` (e.g. SPLADE-tiny) after `mlm.steps` of masked-LM pretraining with recipe `mlm`."""

    def __init__(
        self,
        start: Backbone | Mapping[str, Any],
        mlm: Mapping[str, Any],
        name: str,
        seed: int = 0,
        precision: str = "32-true",
    ) -> None:
        self.start = start if isinstance(start, Backbone) else instantiate(start)  # config `_recursive_: false`
        self.mlm = OmegaConf.to_container(mlm, resolve=True) if OmegaConf.is_config(mlm) else dict(mlm)
        self.seed = int(seed)
        self.precision = precision
        super().__init__(name_or_path=f"pretrained:{name}", family=self.start.family, name=name)

    def cache_key(self) -> str:
        """The key of the model `materialize` trains (vtlab.models.mlm.cache_key)."""
        return f"mlm-pretrained:{mlm_key(self.start, self.mlm, None, self.seed, self.precision)}"

    def _source(self, tokenizer: bool) -> tuple[str, str]:
        return str(self.materialize()), "backbone"

    def materialize(self) -> Path:
        """Pretrain into the cache if absent (other jobs wait on its lock); return the model directory."""
        out, _ = train_cached(
            self.start,
            self.mlm,
            self.seed,
            trainer_cfg={"precision": self.precision, "accelerator": "auto", "devices": 1},
        )
        self.name_or_path = str(out)
        return out
