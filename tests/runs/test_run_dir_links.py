"""A run (or sweep) directory is admitted before anything writes into it: Hydra writes `.hydra/` and its job log there
before the job runs, so a link on the way to those files that leads out (`R/.hydra` -> elsewhere, `R/__main__.log` ->
a file elsewhere) is refused with one line and exit 2 by RunDirWritable (vtlab/runs/writable.py), nothing written
through it or into the directory. The rule is guard_write's (vtlab/core/atomic.py `link_leaving`): a link under the
directory may lead into it or into the cache, nowhere else; the directory itself may be a link, and a link Hydra does
not write through (wandb's offline run links its debug log into ~/.cache/wandb) is left to vtlab's writers.

The CLI cases are refused at Hydra's on_run_start / on_multirun_start, so each is mostly interpreter start-up; they run
in parallel. The control (links that stay inside) is a cheap run that goes through (stage=evaluate eval=none)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import one_error_line, run_vtlab, run_vtlab_together

from vtlab.core.atomic import guard_write, link_leaving
from vtlab.core.errors import LinkError, note_write_roots

pytestmark = pytest.mark.usefixtures("shared_cache")
CHEAP = ["stage=evaluate", "eval=none", "logger=none", "baseline=false", "vocab=native"]


def snapshot(root: Path) -> dict[str, object]:
    """Every entry under `root`, links as links (their target, never followed), files with their bytes."""
    out: dict[str, object] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            key = str(p.relative_to(root))
            out[key] = ("link", os.readlink(p)) if p.is_symlink() else p.read_bytes() if p.is_file() else "dir"
    return out


def outside(tmp: Path) -> Path:
    """A directory outside every run: what a planted link points at, with a file a write would replace."""
    out = tmp / "outside"
    out.mkdir()
    (out / "config.yaml").write_text("precious: true\n")
    (out / "victim.log").write_text("someone else's log\n")
    return out


def link(at: Path, to: Path) -> Path:
    """`at` made a link to `to` (its parent made first)."""
    at.parent.mkdir(parents=True, exist_ok=True)
    at.symlink_to(to, target_is_directory=to.is_dir())
    return at


def with_model(run: Path) -> Path:
    """`run` given what a training run leaves for export to find (model/config.json), so export reaches its writes."""
    (run / "model").mkdir(parents=True)
    (run / "model" / "config.json").write_text("{}")
    return run


# name → plant(run or sweep dir, outside dir) → (the command, the planted link)
CASES = {
    "hydra_dir": lambda run, out: ([*CHEAP, f"hydra.run.dir={run}"], link(run / ".hydra", out)),
    "job_log": lambda run, out: ([*CHEAP, f"hydra.run.dir={run}"], link(run / "__main__.log", out / "victim.log")),
    "sweep_job_hydra_dir": lambda run, out: (
        ["-m", *CHEAP, "seed=0", f"hydra.sweep.dir={run}"],
        link(run / "0" / ".hydra", out),
    ),
    # stage=export run_dir=R (R holds a model: model/config.json) records itself in R/exports/<time>
    "export_subdir": lambda run, out: (
        ["stage=export", f"run_dir={run}", "logger=none"],
        with_model(run) and link(run / "exports", out),
    ),
}


def hard_link(at: Path, to: Path) -> Path:
    """`at` made a second name of the file `to` (its parent made first)."""
    at.parent.mkdir(parents=True, exist_ok=True)
    os.link(to, at)
    return at


# a file vtlab itself writes in the run directory: refused by its own writer, one line, no traceback after it
OWNED_CASES = {
    "status_json": lambda run, out: ([*CHEAP, f"hydra.run.dir={run}"], link(run / "status.json", out / "victim.log"))
}


# a hard link is not seen on the way down: the file itself has another name, and a write in place (Lightning's
# checkpoint and CSV log, Hydra's job log) would change it there
HARD_CASES = {
    "hard_checkpoint": lambda run, out: (
        [*CHEAP, f"hydra.run.dir={run}"],
        hard_link(run / "checkpoints" / "last.ckpt", out / "victim.log"),
    ),
    "hard_sweep_job_log": lambda run, out: (
        ["-m", *CHEAP, "seed=0", f"hydra.sweep.dir={run}"],
        hard_link(run / "0" / "__main__.log", out / "victim.log"),
    ),
}


@pytest.fixture(scope="module")
def cli_cases(tmp_path_factory) -> dict[str, tuple]:
    """name → (the finished command, its link, the outside dir, the run dir, their snapshots before); run at once."""
    planted = {}
    for name, plant in {**CASES, **HARD_CASES, **OWNED_CASES}.items():
        tmp = tmp_path_factory.mktemp(name)
        out, run = outside(tmp), tmp / "run"
        run.mkdir()
        overrides, planted_link = plant(run, out)
        planted[name] = (overrides, planted_link, out, run, snapshot(run), snapshot(out))
    done = run_vtlab_together({name: case[0] for name, case in planted.items()}, timeout=600)
    return {name: (done[name], *case[1:]) for name, case in planted.items()}


@pytest.mark.cli
@pytest.mark.parametrize("name", CASES)
def test_a_link_out_of_the_run_dir_is_refused_before_hydra_writes(cli_cases, name: str) -> None:
    res, planted, out, run, run_before, out_before = cli_cases[name]
    assert res.returncode == 2, res.stderr[-3000:]
    line = one_error_line(res.stderr, [f"{planted}: a link to {out.resolve()}", "remove the link"])
    assert "out of the " in line
    assert snapshot(out) == out_before  # config.yaml, victim.log as they were; no hydra.yaml, no overrides.yaml
    assert snapshot(run) == run_before  # nothing new in the run (or sweep) directory


@pytest.mark.cli
@pytest.mark.parametrize("name", OWNED_CASES)
def test_a_link_at_a_file_vtlab_writes_is_one_line_and_exit_2(cli_cases, name: str) -> None:
    res, planted, out, _, _, out_before = cli_cases[name]
    assert res.returncode == 2, res.stderr[-3000:]
    one_error_line(res.stderr, [f"{planted}: goes through the link {planted}", "remove the link"])
    assert snapshot(out) == out_before


@pytest.mark.cli
@pytest.mark.parametrize("name", HARD_CASES)
def test_a_hard_linked_file_in_the_run_dir_is_refused_before_anything_writes(cli_cases, name: str) -> None:
    res, planted, out, run, run_before, out_before = cli_cases[name]
    assert res.returncode == 2, res.stderr[-3000:]
    one_error_line(res.stderr, [f"{planted}: a hard link (the same file has 1 other name)", "replace it by a copy"])
    assert snapshot(out) == out_before and snapshot(run) == run_before


@pytest.mark.cli
def test_links_that_stay_in_the_run_dir_or_the_cache_and_a_run_dir_that_is_a_link_are_fine(tmp_path: Path) -> None:
    disk = tmp_path / "other-disk" / "run"
    (disk / "sub").mkdir(parents=True)
    (disk / "inside").symlink_to(disk / "sub", target_is_directory=True)
    cache = Path(os.environ["VTLAB_CACHE"])
    cache.mkdir(parents=True, exist_ok=True)
    (disk / "cached").symlink_to(cache, target_is_directory=True)
    link(disk / "wandb" / "offline-run-1" / "logs" / "debug-core.log", outside(tmp_path) / "victim.log")
    run = tmp_path / "run"
    run.symlink_to(disk, target_is_directory=True)  # runs kept on another disk
    proc = run_vtlab(*CHEAP, f"hydra.run.dir={run}", timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (disk / ".hydra" / "config.yaml").is_file() and (disk / "status.json").is_file()


# ---- the rule itself, in process: one function for guard_write and Hydra's writes --------------------------------
def test_hydra_s_writes_and_guard_write_meet_the_same_rule(tmp_path: Path) -> None:
    run, cache, out = tmp_path / "run", tmp_path / "cache", outside(tmp_path)
    (run / "sub").mkdir(parents=True)
    cache.mkdir()
    link(run / "to-sub", run / "sub")  # inside: fine
    link(run / "to-cache", cache)  # into the cache: fine
    link(run / ".hydra", out)  # out
    link(run / "sub" / "job.log", out / "victim.log")  # out, a file
    link(run / "dangling.log", out / "not-yet")  # out, to nothing yet: a write would create it
    link(run / "hop.log", run / "sub" / "job.log")  # inside, then through a link that leaves
    refused = {
        run / ".hydra" / "config.yaml": run / ".hydra",
        run / "sub" / "job.log": run / "sub" / "job.log",
        run / "dangling.log": run / "dangling.log",
        run / "hop.log": run / "hop.log",
    }
    allowed = [run / "to-sub" / "x.yaml", run / "to-cache" / "entry", run / "new" / "x.yaml", tmp_path / "elsewhere"]
    for path, planted in refused.items():
        assert link_leaving(path, [run, cache]) == (planted, run)
    assert [link_leaving(path, [run, cache]) for path in allowed] == [None] * len(allowed)
    assert link_leaving(run / "to-cache" / "entry", [run]) == (run / "to-cache", run)  # the cache is a root to allow
    note_write_roots(run, cache)
    try:
        for path in refused:
            with pytest.raises(LinkError):
                guard_write(path)
        for path in allowed:
            guard_write(path)
    finally:
        note_write_roots()


def test_guard_write_refuses_a_hard_linked_file_and_an_atomic_write_leaves_its_other_name_alone(tmp_path: Path) -> None:
    from vtlab.core.atomic import atomic_write_text, other_names

    run, out = tmp_path / "run", outside(tmp_path)
    shared = hard_link(run / "metrics.json", out / "victim.log")
    assert (other_names(shared), other_names(out / "config.yaml"), other_names(run / "none")) == (1, 0, 0)
    hard_link(run / "third.json", out / "victim.log")
    assert other_names(shared) == 2
    note_write_roots(run)
    try:
        with pytest.raises(LinkError, match=r"metrics.json: a hard link \(the same file has 2 other names\)"):
            atomic_write_text(shared, ["overwritten\n"])
        guard_write(out / "victim.log")  # outside every write root: not this rule's
        (run / "third.json").unlink()
        shared.unlink()
        atomic_write_text(shared, ["mine\n"])  # a fresh file: fine
    finally:
        note_write_roots()
    assert (out / "victim.log").read_text() == "someone else's log\n"
