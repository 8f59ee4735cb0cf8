"""Every `python -m vtlab ...` line of README.md composes (as `python -m vtlab` would compose it: the same overrides,
a sweep's values one job at a time), and what its comment says it runs holds of the composed config: the quickstart
is `make demo`, a line named the paper's run names the paper's experiment, a ModernBERT line that is not the paper's
run says so and reads the quickstart's data and budget, and so on."""

from __future__ import annotations

import itertools
import re
import shlex
from pathlib import Path

import pytest
from helpers import compose_config
from omegaconf import DictConfig, OmegaConf

from vtlab.core.paths import CONF_DIR
from vtlab.runs.overrides import bad_override

ROOT = Path(CONF_DIR).parent
README = ROOT / "README.md"
PAPER_RUN = "paper/main/modernbert-vt"  # docs/paper-scale.md's VT row
PLACEHOLDERS = {"<run dir>": "/runs/r", "$DATA": "/data/mine", "/my/splade": "/models/my-splade"}


def readme_commands() -> list[tuple[str, list[str], str]]:
    """(the line, its arguments after `python -m vtlab`, its comment) for every such line in README.md's bash blocks."""
    found = []
    for block in re.findall(r"```bash\n(.*?)```", README.read_text(), re.S):
        comment = ""
        for line in block.splitlines():
            if line.lstrip().startswith("#"):
                comment = line.lstrip("# ")  # a comment line describes the command under it
                continue
            if not line.startswith("python -m vtlab "):
                comment = ""
                continue
            command, _, trailing = line.partition("  # ")
            raw = command
            for placeholder, value in PLACEHOLDERS.items():
                raw = raw.replace(placeholder, value)
            found.append((line, shlex.split(raw)[3:], trailing.strip() or comment))
            comment = ""
    return found


COMMANDS = readme_commands()


def _jobs(args: list[str]) -> list[list[str]]:
    """The overrides of each job `args` runs: one, or a sweep's (`-m`, comma-separated values outside brackets)."""
    if "-m" not in args:
        return [args]
    choices = [
        [f"{a.split('=', 1)[0]}={v}" for v in a.split("=", 1)[1].split(",")] if "=" in a and "[" not in a else [a]
        for a in args
        if a != "-m"
    ]
    return [list(job) for job in itertools.product(*choices)]


def _compose(overrides: list[str]) -> DictConfig:
    return compose_config([*overrides, "paths.run_dir=/runs/composed"])


QUICKSTART = _compose([])


def _same(cfg: DictConfig, keys: tuple[str, ...], reference: DictConfig = QUICKSTART) -> list[str]:
    def plain(c: DictConfig, key: str) -> object:
        node = OmegaConf.select(c, key)
        return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node

    return [k for k in keys if plain(cfg, k) != plain(reference, k)]


QUICKSTART_DATA = ("data", "eval", "trainer.max_steps", "trainer.val_check_interval")


def test_the_readme_has_its_commands() -> None:
    assert len(COMMANDS) >= 10, COMMANDS
    assert any(args == [] for _, args, _ in COMMANDS)  # the quickstart


@pytest.mark.parametrize("line,args,comment", COMMANDS, ids=[c[0][16:70] for c in COMMANDS])
def test_each_command_composes_and_does_what_its_comment_says(line, args, comment) -> None:
    assert bad_override(args, CONF_DIR) is None, line
    jobs = [_compose(job) for job in _jobs(args)]
    cfg = jobs[0]
    experiment = next((a.split("=", 1)[1] for a in args if a.startswith("experiment=")), None)
    said = comment.lower()
    if "= make demo" in said:
        makefile = (ROOT / "Makefile").read_text()
        assert re.search(r"^demo:.*\n\t\$\(PY\) -m vtlab\n", makefile, re.M), "make demo runs another command"
        assert not args and not _same(
            cfg, ("backbone", "vocab", "apc", *QUICKSTART_DATA), _compose(["experiment=quickstart"])
        )
    if "paper" in said and "not the paper" not in said:
        assert experiment is not None and experiment.startswith("paper/"), f"named the paper's run: {line}"
        assert cfg.name == f"paper-{experiment.rsplit('/', 1)[1]}" and _same(cfg, ("data", "eval", "trainer.max_steps"))
    if "modernbert" in [a.split("=", 1)[1] for a in args if a.startswith("backbone=")] and experiment is None:
        assert "not the paper's run" in said, f"a ModernBERT line that is not the paper's run must say so: {line}"
    if "not the paper's run" in said or "quickstart" in said and "= make demo" not in said:
        assert experiment is None and not _same(cfg, QUICKSTART_DATA), f"not the quickstart's data and budget: {line}"
        assert not _same(cfg, ("apc", "mlm.steps")) or "control" in said
    if "modernbert" in said:
        assert cfg.backbone.name_or_path == "answerdotai/ModernBERT-base"
    if "plain splade" in said:
        assert cfg.vocab.name == "native" and cfg.apc.name == "off" and cfg.model._target_.endswith("SpladeModule")
    if "inference-free" in said:
        assert cfg.model._target_ == "vtlab.models.inference_free.InferenceFreeModule"
    if "sweep of three" in said:
        assert len(jobs) == 3 and len({OmegaConf.to_yaml(j) for j in jobs}) == 3
    if "your splade model" in said:
        assert cfg.stage.name == "evaluate" and cfg.backbone.name_or_path == PLACEHOLDERS["/my/splade"]
    if "express my data" in said:
        assert {j.stage.name for j in jobs} == {"diagnose"} and len(jobs) > 1
    if "sparseencoder" in said:
        assert cfg.stage.name == "export" and cfg.run_dir == PLACEHOLDERS["<run dir>"]


def test_the_paper_run_named_in_the_readme_is_the_one_paper_scale_describes() -> None:
    paper = [line for line, _, comment in COMMANDS if "paper's vt run" in comment.lower()]
    assert len(paper) == 1 and f"experiment={PAPER_RUN}" in paper[0], paper
    assert f"experiment={PAPER_RUN}" in (ROOT / "docs" / "paper-scale.md").read_text()
    cfg = _compose([f"experiment={PAPER_RUN}"])
    assert cfg.backbone.name_or_path == "answerdotai/ModernBERT-base"
    assert cfg.vocab.tokenizer == cfg.vocab.embedding_model == "bert-base-uncased"  # the real one, from the hub
    assert cfg.data.train._target_ == "vtlab.data.hf.st_msmarco_ce_pool" and cfg.eval.name == "beir13"
    assert (cfg.trainer.devices, cfg.mlm.steps, cfg.apc.name) == (8, 20000, "p60")
