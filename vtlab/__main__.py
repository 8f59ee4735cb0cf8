"""`python -m vtlab [overrides]`: the Hydra entry point. Thin on purpose: all wiring is in conf/ and vtlab.pipeline."""
from __future__ import annotations

import logging

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from vtlab.pipeline import run_or_exit
from vtlab.status import RunStatus, describe
from vtlab.tracking import set_run_config

log = logging.getLogger("vtlab")


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    hc = HydraConfig.get()
    status = RunStatus(cfg.paths.run_dir, name=cfg.name, overrides=list(hc.overrides.task))
    started = []

    def start() -> None:  # only once the run dir is accepted: a refused run never touches an earlier run's status
        status.start()
        started.append(True)

    try:
        set_run_config(cfg)
        run_or_exit(cfg, on_start=start)
    except (Exception, SystemExit) as exc:
        if started:
            status.fail(exc)
        if hc.mode == RunMode.MULTIRUN:
            # one failed job must not end the sweep: the table shows it as failed (vtlab.report)
            log.error("job %s failed: %s", hc.job.num, describe(exc))
            return
        raise
    status.done()


if __name__ == "__main__":
    main()
