"""The answer in a second: a `python -m vtlab` command line is composed and its config checked before torch, Lightning
or any model is imported, so a mistake is one `vtlab: error:` line (exit 2) and an accepted run says at once what
it will do and where it writes.

Found here: a misspelt key or choice (vtlab.runs.overrides), `+key=` on a key the config has, any other composition
error, `--cfg` with a sweep (`-m`), each value, name and output path vtlab.runs.checks refuses (a sweep: each
swept value, the others at their first value), but trainer.precision, whose choices are Lightning's, a GPU count that
does not divide the paper's global batches, and a launch torch or Lightning would refuse inside the run (a SLURM
launcher's tasks against trainer.devices, a GPU accelerator with the CPU build of torch, read from torch's version.py
as text), `stage=export run_dir=R` where R saved no model and its record does not compose the model it evaluated
(vtlab.runs.export_source: a crafted record, or the command that exports a model that is gone), and a single run's
directory that refuses it (a finished run there: vtlab.runs.directory.check_run_dir, which reads and writes
nothing). trainer.precision, the process's GPUs and SLURM allocation, the directory's lock and what needs the data or
a resume's record, are the run's admission's (vtlab.stages.admission), seconds later.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig, open_dict
from omegaconf.errors import OmegaConfBaseException

from vtlab.core.errors import VtlabError, one_line
from vtlab.runs.checks import CHECKS, Deferred, check_config
from vtlab.runs.directory import check_run_dir
from vtlab.runs.export_source import check_export_source, export_banner
from vtlab.runs.guard import moved_run_dir
from vtlab.runs.launch import check_launch
from vtlab.runs.overrides import bad_override, command_line_overrides
from vtlab.runs.ranks import later_rank
from vtlab.runs.steps import configured_size, step_names

MULTIRUN = {"-m", "--multirun"}
CFG = {"--cfg", "-c"}
HYDRA_RUN_DIR = "${hydra:runtime.output_dir}"  # conf/paths/default.yaml: the run writes into Hydra's directory
_APPEND = re.compile(r"An item is already at '([^']+)'")
# every rule but those whose choices come from a library slow to import (trainer.precision: Lightning's; the admission
# checks it, after the imports)
QUICK_CHECKS = {key: rule for key, rule in CHECKS.items() if not isinstance(rule, Deferred)}


def _jobs(overrides: list[str], multirun: bool) -> Iterator[list[str]]:
    """The override lists to compose: the command's own; for a sweep, each swept value in turn with the other sweeps
    at their first value (every value is composed once, not every combination)."""
    if not multirun:
        yield overrides
        return
    parsed = OverridesParser.create().parse_overrides(overrides)
    first = [
        f"{o.get_key_element()}={next(iter(o.sweep_string_iterator()))}" if o.is_sweep_override() else o.input_line
        for o in parsed
    ]
    yield first
    for i, o in enumerate(parsed):
        if o.is_sweep_override():
            for value in list(o.sweep_string_iterator())[1:]:
                yield [*first[:i], f"{o.get_key_element()}={value}", *first[i + 1 :]]


def _composition_line(err: Exception) -> str:
    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    m = _APPEND.search(str(err))
    if m:
        return f"+{m.group(1)}=...: {m.group(1)} is already in the config; set it without the leading + to change it"
    return text


def run_dir_of(cfg: DictConfig) -> str:
    """Where the run writes: paths.run_dir, or Hydra's run directory when paths.run_dir is Hydra's (as composed)."""
    node = cfg.paths._get_node("run_dir")  # noqa: SLF001 - the unresolved value
    return str(cfg.hydra.run.dir) if node is not None and node._value() == HYDRA_RUN_DIR else str(cfg.paths.run_dir)  # noqa: SLF001


def checked(argv: Sequence[str], conf_dir: Path) -> tuple[str | None, DictConfig | None]:
    """(one line for the first mistake in the command line `argv`, or None; the composed config of a run, or of a
    sweep's first job; None for --cfg, help and information, which run nothing)."""
    args = list(argv)
    multirun = any(a in MULTIRUN for a in args)
    if multirun and any(a in CFG or a.split("=", 1)[0] in CFG for a in args):  # Hydra: a traceback
        return "--cfg shows one job's config, not a sweep's: drop -m (and give each swept key one value)", None
    problem = bad_override(args, conf_dir)
    if problem is not None:
        return problem, None
    overrides = command_line_overrides(args)
    if overrides is None or "--experimental-rerun" in args:
        return None, None  # Hydra answers help, info and rerun itself
    composed = None
    try:
        with initialize_config_dir(str(conf_dir), version_base="1.3"):
            for job in _jobs(overrides, multirun):
                cfg = compose("config", overrides=job, return_hydra_config=True)
                with open_dict(cfg):
                    if (moved := moved_run_dir(cfg)) is not None:  # stage=export: the first line names where
                        cfg.hydra.run.dir = str(moved[0])
                    cfg.paths.run_dir = run_dir_of(cfg)
                check_config(cfg, QUICK_CHECKS)
                check_export_source(cfg)
                check_launch(cfg)
                if not multirun and not later_rank():  # a finished run there: refused now, not after torch loads
                    check_run_dir(Path(cfg.paths.run_dir), cfg.get("resume", "auto"), cfg.get("overwrite", False))
                composed = composed or cfg
    except VtlabError as err:
        return one_line(err).removeprefix("vtlab: error: "), None
    except (HydraException, OmegaConfBaseException) as err:
        return _composition_line(err), None
    shows_config = any(a in CFG or a.split("=", 1)[0] in CFG for a in args)  # --cfg: Hydra prints it, nothing runs
    return None, None if shows_config else composed


def sweep_size(argv: Sequence[str]) -> int:
    """How many jobs a sweep's command line makes: the product of its swept values' counts."""
    size = 1
    for o in OverridesParser.create().parse_overrides(command_line_overrides(argv) or []):
        size *= len(list(o.sweep_string_iterator())) if o.is_sweep_override() else 1
    return size


def first_line(cfg: DictConfig, jobs: int | None = None) -> str:
    """What an accepted run will do and where it writes: its name, its stage's steps, the run directory; for a sweep
    of `jobs` jobs (`cfg`: its first job's config), the sweep directory."""
    steps = step_names(cfg)
    if jobs is None:
        size = configured_size(cfg)
        done = f"{' → '.join(steps) or 'no stage'}{f' ({size})' if size else ''}"
        return f"vtlab: {export_banner(cfg)}: {done}; writing to {cfg.paths.run_dir}"
    return f"vtlab: a sweep of {jobs} jobs ({' → '.join(steps) or 'no stage'}); writing to {cfg.hydra.sweep.dir}"
