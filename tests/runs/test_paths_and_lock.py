"""Paths the user controls stay inside their roots and never replace an input (vtlab/runs/paths.py), and the run
directory is locked before anything is written into it, Hydra's `.hydra/` included (vtlab/runs/directory.py).

The config checks are called directly (fast); the CLI cases run `python -m vtlab` with a cheap stage (stage=evaluate
eval=none: no model is loaded). The lock race pauses a run after Hydra has written its `.hydra/` (tests/run_pause.py)
— the moment a second process could slip in without the lock — so every trial meets the worst timing."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import ROOT, TESTS, child_env, compose_config, one_error_line, run_vtlab_together, start_vtlab
from omegaconf import OmegaConf

from vtlab.core.errors import ConfigError, RunDirError
from vtlab.export.sentence_transformers import MANIFEST, check_target
from vtlab.runs.checks import check_config
from vtlab.runs.directory import hold_run_dir_lock, run_dir_lock

pytestmark = pytest.mark.usefixtures("shared_cache")
CHEAP = ["stage=evaluate", "eval=none", "logger=none", "baseline=false", "vocab=native", "apc=off"]


def _snapshot(root: Path) -> dict[str, tuple[bytes, int] | None]:
    """Every file (bytes, mtime) and directory under `root`."""
    return {
        str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns) if p.is_file() else None
        for p in sorted(root.rglob("*"))
    }


def _run_dir(path: Path, seed: int = 0) -> Path:
    """A directory an earlier run wrote: its recorded config and status.json."""
    (path / ".hydra").mkdir(parents=True)
    (path / ".hydra" / "config.yaml").write_text(f"seed: {seed}\n")
    (path / "status.json").write_text('{"status": "done"}\n')
    return path


# ---- names: one path component ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "override,key",
    [
        ("name=../../escape", "name"),
        ("name=../../../../../../escape", "name"),
        ("name=/tmp/abs", "name"),
        ("name=a/b", "name"),
        ("name=..", "name"),
        ("eval.name=../elsewhere", "eval.name"),
        ("vocab.name=../../x", "vocab.name"),
        ("backbone.name=../b", "backbone.name"),
        ("apc.name=../../apc", "apc.name"),  # a cache entry's name
        # eval/mteb/<model>/<revision>/<task>.json
        ("eval=beir +eval.mteb_task=../../../../other/eval/x/metrics", "eval.mteb_task"),
    ],
)
def test_a_name_that_would_leave_its_directory_is_refused_naming_the_key(override: str, key: str) -> None:
    with pytest.raises(ConfigError) as ei:
        check_config(compose_config(override.split(" ")))
    value = override.split(" ")[-1].split("=", 1)[1]
    assert str(ei.value).startswith(f"{key}={value!r}: expected a plain name (no '/', not empty, '.' or '..')")
    assert ei.value.key == key


def test_suite_members_become_directory_names_and_are_checked_too() -> None:
    check_config(OmegaConf.create({"name": "run", "eval": {"evaluations": {"scifact": {}, "nq": {}}}}))
    with pytest.raises(ConfigError, match=r"^eval\.evaluations\.\.\.='\.\.': expected a plain name"):
        check_config(OmegaConf.create({"name": "run", "eval": {"evaluations": {"ok": {}, "..": {}}}}))


def test_a_suite_member_s_mteb_task_is_checked_too() -> None:
    with pytest.raises(ConfigError, match=r"^eval\.evaluations\.ok\.mteb_task='\.\./x': expected a plain name"):
        check_config(OmegaConf.create({"name": "run", "eval": {"evaluations": {"ok": {"mteb_task": "../x"}}}}))


@pytest.mark.parametrize("part", ["..", ".", "", "../x", "a/b", "/abs", "a\0b"])
def test_where_a_value_is_joined_into_a_path_it_stays_one_entry(tmp_path: Path, part: str) -> None:
    """The rule at the join itself (vtlab.core.paths.child), for values the config checks cannot see (a name read
    from a dataset, a task an evaluation reports): the MTEB copy of a result never lands in another run."""
    from vtlab.core.paths import child
    from vtlab.evaluation.mteb_results import write_mteb_results

    assert child(tmp_path, "a..b", "k") == tmp_path / "a..b"
    with pytest.raises(ConfigError, match=r"^k: .* would become a path under"):
        child(tmp_path, part, "k")

    class Task:
        mteb_task = part + "/../../victim" if part else "../victim"

    with pytest.raises(ConfigError) as ei:
        write_mteb_results(tmp_path / "mteb", Task(), "set", {"nDCG@10": 0.5}, "vtlab/run", "rev")
    assert ei.value.key == "eval.mteb_task" and not list(tmp_path.rglob("*.json"))


def test_plain_names_and_the_defaults_pass() -> None:
    check_config(compose_config(["name=my-run_2.b"]))
    check_config(compose_config(["stage=export"]))  # no run dir known outside Hydra: only what is given is checked


# ---- export outputs: never an input, never another run ----------------------------------------------------------
@pytest.fixture()
def layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """P/ (a folder of runs): runA (exported), runB, notes.txt; Q: another run elsewhere; this: the export's own run
    directory (as RunDirInside puts it: runA/exports/<time>); the cache."""
    p = tmp_path / "P"
    run_a, run_b = _run_dir(p / "runA"), _run_dir(p / "runB")
    (p / "notes.txt").write_text("notes\n")
    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setenv("VTLAB_CACHE", str(cache))
    return {
        "P": p,
        "R": run_a,
        "runB": run_b,
        "Q": _run_dir(tmp_path / "Q"),
        "this": run_a / "exports" / "t",
        "cache": cache,
        "tmp": tmp_path,
    }


def _export_cfg(lay: dict[str, Path], *overrides: str):
    return compose_config(["stage=export", f"run_dir={lay['R']}", f"paths.run_dir={lay['this']}", *overrides])


REFUSED = [  # (override template, key, reason)
    ("export.out={P}", "export.out", "holds the run being exported"),
    ("export.out={R}", "export.out", "is the run being exported"),
    ("export.out={R}/model-copy", "export.out", "is inside the run being exported"),
    ("export.out={Q}", "export.out", "is a run directory"),
    ("export.out={Q}/st", "export.out", "is inside the run directory"),
    ("export.out={runB}/st", "export.out", "is inside the run directory"),
    ("export.out={cache}", "export.out", "is the cache"),
    ("export.out={cache}/st", "export.out", "is inside the cache"),
    ("export.out={tmp}", "export.out", "holds the cache"),
    ("export.vectors.dir={R}", "export.vectors.dir", "is the run being exported"),
    ("export.vectors.dir={P}", "export.vectors.dir", "holds the run being exported"),
    ("export.vectors.dir={Q}/vectors", "export.vectors.dir", "is inside the run directory"),
    ("export.vectors.dir={cache}/v", "export.vectors.dir", "is inside the cache"),
]


@pytest.mark.parametrize("template,key,reason", REFUSED, ids=[r[0] for r in REFUSED])
def test_an_export_output_that_is_or_holds_an_input_is_refused_before_any_work(layout, template, key, reason):
    override = template.format(**layout)
    extra = ["export.vectors.formats=[anserini]"] if key == "export.vectors.dir" else []
    with pytest.raises(ConfigError) as ei:
        check_config(_export_cfg(layout, override, "export.overwrite=true", *extra))
    msg = str(ei.value)
    assert msg.startswith(f"{override}: {reason}") and msg.endswith("choose a new directory"), msg
    assert ei.value.key == key


def test_a_folder_of_runs_is_never_an_export_target(layout) -> None:
    folder = layout["tmp"] / "runs"
    _run_dir(folder / "r1")
    with pytest.raises(ConfigError, match=r"holds the run directory .*r1"):
        check_config(_export_cfg(layout, f"export.out={folder}", "export.overwrite=true"))


@pytest.mark.parametrize(
    "overrides",
    [
        [],  # the defaults: <R>/sparse-encoder (and <R>/vectors)
        ["export.vectors.formats=[anserini]"],
        ["export.out={tmp}/new"],
        ["export.out={this}/st"],
        ["export.vectors.formats=[anserini]", "export.vectors.dir={tmp}/vectors"],
    ],
)
def test_the_usual_targets_pass(layout, overrides) -> None:
    check_config(_export_cfg(layout, *(o.format(**layout) for o in overrides)))


@pytest.mark.parametrize("planted", ["vectors", "sparse-encoder"])
def test_a_link_planted_at_a_default_output_is_refused_and_nothing_is_written_through_it(layout, planted) -> None:
    # round three: `ln -s <elsewhere> R/vectors`, then an export with the defaults wrote <elsewhere>/anserini/
    elsewhere = layout["tmp"] / "elsewhere"
    elsewhere.mkdir()
    (layout["R"] / planted).symlink_to(elsewhere, target_is_directory=True)
    key = {"vectors": "export.vectors.dir", "sparse-encoder": "export.out"}[planted]
    with pytest.raises(ConfigError) as ei:
        check_config(_export_cfg(layout, "export.vectors.formats=[anserini]", "export.overwrite=true"))
    msg = str(ei.value)
    assert msg.startswith(f"{key}={layout['R'] / planted}: goes through the link {layout['R'] / planted} (to "), msg
    assert f"out of the run directory {layout['R']}" in msg and ei.value.key == key
    assert list(elsewhere.iterdir()) == []


def test_a_link_inside_the_run_that_stays_inside_it_is_fine(layout) -> None:
    (layout["R"] / "real-vectors").mkdir()
    (layout["R"] / "vectors").symlink_to(layout["R"] / "real-vectors", target_is_directory=True)
    check_config(_export_cfg(layout, "export.vectors.formats=[anserini]"))


def test_a_lock_file_is_never_opened_through_a_link_nor_truncated(tmp_path: Path) -> None:
    from vtlab.core.atomic import file_lock
    from vtlab.core.errors import LinkError

    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    lock = tmp_path / "cache" / "entry.lock"
    lock.parent.mkdir()
    lock.symlink_to(victim)
    with pytest.raises(LinkError, match=r"entry\.lock: is a link, and a lock file is never opened through one"):
        with file_lock(lock):
            pass
    assert victim.read_text() == "precious\n"
    own = tmp_path / "cache" / "own.lock"
    own.write_text("left by an earlier build")
    with file_lock(own):
        pass
    assert own.read_text() == "left by an earlier build"  # not truncated: a lock's bytes are not its point


def test_overwrite_replaces_only_an_earlier_export_or_an_empty_directory(tmp_path: Path) -> None:
    """What export_sentence_transformers checks before and right before replacing `export.out`."""
    empty, export, other, file = tmp_path / "empty", tmp_path / "export", tmp_path / "data", tmp_path / "f"
    empty.mkdir()
    export.mkdir()
    (export / MANIFEST).write_text('{"encoder": {}}')  # what an export records: its encoder
    other.mkdir()
    (other / "corpus.jsonl").write_text("{}\n")
    file.write_text("x")
    assert check_target(empty, True, "export.out") is False
    assert check_target(tmp_path / "new", True, "export.out") is False
    assert check_target(export, True, "export.out") is True
    with pytest.raises(ConfigError, match=r"exists and is not empty \(set export.overwrite=true to replace it\)"):
        check_target(export, False, "export.out")
    with pytest.raises(ConfigError) as ei:
        check_target(other, True, "export.out")
    assert str(ei.value) == (
        f"export.out={other}: export.overwrite=true replaces only an earlier export (a directory "
        f"holding {MANIFEST}) or an empty directory, and this one holds corpus.jsonl: "
        "choose a new or empty directory"
    )
    with pytest.raises(ConfigError, match="no earlier export"):
        check_target(other, False, "export.out")
    with pytest.raises(ConfigError, match="exists and is not a directory"):
        check_target(file, True, "export.out")


# ---- run directory paths, and the lock this process holds --------------------------------------------------------
@pytest.mark.train
def test_a_run_dir_that_is_a_file_is_one_line_in_process(tmp_path: Path) -> None:
    from vtlab.stages.pipeline import run

    (tmp_path / "f").write_text("keep")
    with pytest.raises(RunDirError) as ei:
        run(compose_config([*CHEAP, f"paths.run_dir={tmp_path / 'f'}"]))
    assert str(ei.value) == (
        f"paths.run_dir={tmp_path / 'f'}: exists and is not a directory; a run directory is a "
        "new directory or an earlier run's: choose another paths.run_dir"
    )
    assert (tmp_path / "f").read_text() == "keep"


@pytest.mark.cli
def test_the_pipeline_runs_under_the_lock_the_guard_holds_and_others_stay_out(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    held = hold_run_dir_lock(run_dir)  # as RunDirGuard does before Hydra writes .hydra/
    with run_dir_lock(run_dir, held=held):  # the pipeline's: this process's own lock, not a conflict
        pass
    with run_dir_lock(run_dir, held=held):  # still held after the pipeline's block (until the process ends)
        pass
    probe = (
        "import sys\nfrom pathlib import Path\nfrom vtlab.core.errors import RunDirError\n"
        "from vtlab.runs.directory import run_dir_lock\n"
        f"try:\n    with run_dir_lock(Path({str(run_dir)!r})):\n        sys.exit(0)\n"
        "except RunDirError:\n    sys.exit(3)\n"
    )
    assert subprocess.run([sys.executable, "-c", probe], cwd=ROOT, timeout=120).returncode == 3


# ---- through the CLI: refused with one line, nothing created or changed -----------------------------------------
def _model_run(run_a: Path) -> None:
    """runA as a trained run leaves it (a model/ export can load): what the old code went on to delete."""
    from vtlab.backbones import Backbone

    backbone = Backbone("asset:splade-tiny")
    backbone.load_model().save_pretrained(run_a / "model")
    backbone.load_tokenizer().save_pretrained(run_a / "model")
    OmegaConf.save(
        compose_config(["backbone=splade-tiny", "vocab=native", "apc=off", "logger=none"]),
        run_a / ".hydra" / "config.yaml",
    )


@pytest.fixture(scope="module")
def cli_cases(tmp_path_factory) -> dict[str, tuple[subprocess.CompletedProcess, Path, dict]]:
    """All CLI refusals at once (in parallel: each is mostly interpreter start-up); each case's root is snapshotted
    before and compared after."""
    tmp = tmp_path_factory.mktemp("cli")
    p = tmp / "export" / "P"
    run_a = _run_dir(p / "runA")
    _model_run(run_a)
    _run_dir(p / "runB")
    (p / "notes.txt").write_text("notes\n")
    for case in ("escape_deep", "escape_short"):
        (tmp / case / "work").mkdir(parents=True)
    cases: dict[str, tuple[list[str], Path, Path]] = {  # name → (overrides, cwd, root that must stay as it was)
        "export_around_run": (
            ["stage=export", f"run_dir={run_a}", f"export.out={p}", "export.overwrite=true", "logger=none"],
            ROOT,
            tmp / "export",
        ),
        # 5 `..` past outputs/runs/<date>/<time>-.. : the old code made <root>/escape, outside the working directory
        "escape_deep": ([*CHEAP, "name=../../../../../escape"], tmp / "escape_deep" / "work", tmp / "escape_deep"),
        "escape_short": ([*CHEAP, "name=../../escape"], tmp / "escape_short" / "work", tmp / "escape_short"),
    }
    before = {name: _snapshot(root) for name, (_, _, root) in cases.items()}
    done = run_vtlab_together(
        {name: overrides for name, (overrides, _, _) in cases.items()},
        cwd={name: cwd for name, (_, cwd, _) in cases.items()},
        env=child_env(TESTS),
        timeout=600,
    )
    return {name: (done[name], root, before[name]) for name, (_, _, root) in cases.items()}


CLI_EXPECTED = {
    "export_around_run": ["export.out=", "/export/P: holds the run being exported (run_dir=", "choose a new directory"],
    "escape_deep": ["name='../../../../../escape': expected a plain name"],
    "escape_short": ["name='../../escape': expected a plain name"],
}


@pytest.mark.cli
@pytest.mark.parametrize("name", sorted(CLI_EXPECTED))
def test_cli_refuses_in_one_line_and_creates_or_changes_nothing(cli_cases, name: str) -> None:
    res, root, before = cli_cases[name]
    assert res.returncode == 2, res.stderr[-3000:]
    one_error_line(res.stderr, CLI_EXPECTED[name])
    assert _snapshot(root) == before  # P's runA, runB, notes.txt; no outputs/ and no escape/ made anywhere


def test_the_guard_refuses_a_hydra_run_dir_that_is_a_file_in_one_line(tmp_path: Path) -> None:
    """RunDirGuard.check, the admission's first step in `python -m vtlab` (before Hydra makes the directory), on the
    Hydra config the CLI composes: the line it prints (exit 2), the file and its folder as they were."""
    from vtlab.core.errors import one_line
    from vtlab.runs.guard import RunDirGuard

    (tmp_path / "file").mkdir()
    (tmp_path / "file" / "run").write_text("a file, not a directory\n")
    before = _snapshot(tmp_path / "file")
    cfg = compose_config([*CHEAP, f"hydra.run.dir={tmp_path / 'file' / 'run'}"], return_hydra_config=True)
    with pytest.raises(RunDirError) as ei:
        RunDirGuard().check(cfg)
    one_error_line(one_line(ei.value), [f"hydra.run.dir={tmp_path}/file/run: exists and is not a directory"])
    assert _snapshot(tmp_path / "file") == before


# ---- the lock race: a refused run never writes, not even Hydra's record of itself --------------------------------
def _start(run_dir: Path, seed: int, go: Path, log: Path) -> subprocess.Popen:
    with open(log, "w") as f:  # a file, not a pipe nobody drains while the other run waits
        return start_vtlab(
            *CHEAP,
            f"seed={seed}",
            f"hydra.run.dir={run_dir}",
            "+hydra.callbacks.pause._target_=run_pause.WaitForFile",
            f"+hydra.callbacks.pause.path={go}",
            env=child_env(TESTS),  # tests/ on the path for run_pause
            stdout=subprocess.DEVNULL,
            stderr=f,
        )


def _wait(done: Callable[[], bool], what: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _paused_or_ended(proc: subprocess.Popen, go: Path) -> Callable[[], bool]:
    return lambda: proc.poll() is not None or Path(f"{go}.reached").exists()


def _recorded_seed(run_dir: Path) -> int:
    return int(OmegaConf.load(run_dir / ".hydra" / "config.yaml").seed)


def _check_one_winner(
    run_dir: Path, seeds: list[int], procs: dict[int, subprocess.Popen], logs: dict[int, Path], trial: str
) -> None:
    codes = {seed: procs[seed].returncode for seed in seeds}
    losers = [s for s in seeds if codes[s] == 2]
    winners = [s for s in seeds if codes[s] == 0]
    assert len(losers) == 1 and len(winners) == 1, (trial, codes, {s: logs[s].read_text()[-2000:] for s in seeds})
    one_error_line(logs[losers[0]].read_text(), [f"run directory {run_dir} is in use by another vtlab process"])
    assert _recorded_seed(run_dir) == winners[0], trial  # the winner's config, not the refused run's
    status = json.loads((run_dir / "status.json").read_text())
    assert status["status"] == "done" and f"seed={winners[0]}" in status["overrides"], (trial, status)


@pytest.mark.cli
def test_a_run_arriving_while_the_first_is_between_hydra_and_the_pipeline_is_refused_unwritten(tmp_path: Path) -> None:
    """The first run stops right after Hydra wrote its `.hydra/` (before the pipeline): the second arrives exactly
    then. It must be refused before Hydra writes anything for it; the first then runs to the end."""
    run_dir = tmp_path / "run"
    go = {s: tmp_path / f"go-{s}" for s in (1, 2)}
    logs = {s: tmp_path / f"{s}.log" for s in (1, 2)}
    procs = {1: _start(run_dir, 1, go[1], logs[1])}
    try:
        _wait(_paused_or_ended(procs[1], go[1]), "the first run to pause")
        assert procs[1].poll() is None and _recorded_seed(run_dir) == 1, logs[1].read_text()[-3000:]
        procs[2] = _start(run_dir, 2, go[2], logs[2])
        _wait(_paused_or_ended(procs[2], go[2]), "the second run to be refused (or to pause)")
        assert _recorded_seed(run_dir) == 1  # while the first still waits: nothing of the second's written
        go[1].touch()
        procs[1].wait(timeout=300)
        go[2].touch()
        procs[2].wait(timeout=300)
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()
    assert procs[2].returncode == 2  # refused, not run after the first ended: it arrived while the first ran
    _check_one_winner(run_dir, [1, 2], procs, logs, "staggered")


@pytest.mark.cli
@pytest.mark.slow
@pytest.mark.parametrize("trial", range(3))
def test_two_runs_started_together_into_one_directory_leave_one_record(tmp_path: Path, trial: int) -> None:
    """Two runs started at the same moment, each pausing after Hydra's write (if it gets that far): exactly one is
    refused, in one line, and the directory records the other's config (seed) and status."""
    run_dir = tmp_path / "run"
    seeds = [10 + 2 * trial, 11 + 2 * trial]
    go = {s: tmp_path / f"go-{s}" for s in seeds}
    logs = {s: tmp_path / f"{s}.log" for s in seeds}
    procs = {s: _start(run_dir, s, go[s], logs[s]) for s in seeds}
    try:
        arrived: list[int] = []  # in the order they paused (or ended)

        def both_arrived() -> bool:
            arrived.extend(s for s in seeds if s not in arrived and _paused_or_ended(procs[s], go[s])())
            return len(arrived) == len(seeds)

        _wait(both_arrived, "both runs to pause or end")
        for s in arrived:  # the first to pause goes on first, to its end: a second run must not have replaced its
            go[s].touch()  # record meanwhile (nor run after it: it was there while the first ran)
            procs[s].wait(timeout=300)
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()
    _check_one_winner(run_dir, seeds, procs, logs, f"trial {trial}")


@pytest.mark.parametrize("missing", ["qrels", "queries.jsonl", "corpus.jsonl"])
@pytest.mark.parametrize("key", ["eval.path", "data.dev_path"])
def test_a_beir_folder_missing_a_part_is_answered_before_torch_naming_the_layout(
    tmp_path: Path, missing: str, key: str
) -> None:
    beir = tmp_path / "mybeir"
    (beir / "qrels").mkdir(parents=True)
    for name in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv"):
        (beir / name).write_text("{}\n")
    target = beir / missing
    if target.is_dir():
        for f in target.iterdir():
            f.unlink()
        target.rmdir()
    else:
        target.unlink()
    overrides = ["eval=beir", f"eval.path={beir}"] if key == "eval.path" else ["data=jsonl", f"data.dev_path={beir}"]
    with pytest.raises(ConfigError) as ei:
        check_config(compose_config(overrides))
    layout = "expected a BEIR directory (corpus.jsonl, queries.jsonl and qrels/"
    assert str(ei.value).startswith(f"{key}='{beir}': {layout}")
