"""`python -m vtlab [overrides]`: the Hydra entry point. Thin on purpose: all wiring is in conf/ and vtlab.pipeline."""
from __future__ import annotations

import hydra
from omegaconf import DictConfig

from vtlab.pipeline import run_or_exit


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    run_or_exit(cfg)


if __name__ == "__main__":
    main()
