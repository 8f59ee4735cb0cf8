"""Every way a run meets a disk that cannot take its writes ends the same honest way, on REAL small file systems (no
monkeypatching): one `vtlab: error:` line last on stderr naming the path and what failed, no traceback, a non-zero
exit, and status.json "failed" with that error wherever the run dir can be written at all.

The disks are tmpfs mounts with a size limit (read-only by `mount -o remount,ro`) in a private mount namespace
(`unshare -r -m`), so no root privilege outside the test is needed or used; a machine that does not permit that skips
these tests with the reason. The file-size limit is `ulimit -f`. `python -m vtlab` runs with tiny settings (splade-tiny,
a few steps, a small eval): each test takes 10-25 s on 2 CPU cores.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import ROOT, as_from_a_terminal, child_env, one_error_line, said

from vtlab.bench.tiny_runs import TINY_FINETUNE
from vtlab.runs.status import RESERVE, RESERVE_FILE

pytestmark = [pytest.mark.cli, pytest.mark.slow]

# a checkpoint every step: the disk is filled after the first one, the second one meets it
_TRAIN = [
    *TINY_FINETUNE,
    "stage=finetune",
    "trainer.max_steps=3",
    "trainer.val_check_interval=3",
    "callbacks.last_checkpoint.every_n_train_steps=1",
]
_EVAL = [
    "backbone=splade-tiny",
    "vocab=native",
    "apc=off",
    "baseline=false",
    "logger=none",
    "stage=evaluate",
    "+eval.collection.max_queries=20",
    "+eval.collection.max_docs=50",
]
# what every scenario's shell ends with: the exit code, and the run dir's status.json copied out of the namespace
# (the mount goes with it)
_COLLECT = """
echo "$rc" > "$OUT/rc"
if [ -f "$RUN/status.json" ]; then cp "$RUN/status.json" "$OUT/status.json"; fi
if [ -d "$RUN" ]; then ls -A "$RUN" > "$OUT/run_files"; fi
"""
ENOSPC = "cannot write: no space left on the device (ENOSPC)"
EROFS = "cannot write: the file system is read-only (EROFS)"
EFBIG = "cannot write: the file-size limit is reached (EFBIG)"


@dataclass
class Ended:
    rc: int
    stderr: str
    status: dict | None
    status_bytes: int  # the size of status.json (0: none)
    out: Path


@pytest.fixture(scope="module")
def namespace(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Skip (with why) unless a private mount namespace may mount a sized tmpfs and remount it read-only."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed: no private mount namespace for a small tmpfs")
    probe = tmp_path_factory.mktemp("probe")
    res = subprocess.run(
        ["unshare", "-r", "-m", "sh", "-c", f"mount -t tmpfs -o size=1m none {probe} && mount -o remount,ro {probe}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if res.returncode != 0:
        pytest.skip(f"this machine does not permit `unshare -r -m` + mount tmpfs: {res.stderr.strip()[:300]}")


def _ended(out: Path, res: subprocess.CompletedProcess) -> Ended:
    assert (out / "rc").is_file(), f"the scenario's shell failed: {res.stdout[-2000:]}{res.stderr[-2000:]}"
    status_file = out / "status.json"
    status = json.loads(status_file.read_text()) if status_file.is_file() else None
    return Ended(
        int((out / "rc").read_text()),
        (out / "err").read_text(),
        status,
        status_file.stat().st_size if status_file.is_file() else 0,
        out,
    )


def _scenario(tmp_path: Path, script: str, overrides: list[str], *, namespace: bool = True, **env: str) -> Ended:
    """Run `script` (bash; $MNT an empty mount point, $OUT a directory outside it, $RUN the run dir it sets, "$@" the
    overrides) in a private mount namespace, then read what it left in $OUT."""
    mnt, out = tmp_path / "mnt", tmp_path / "out"
    mnt.mkdir()
    out.mkdir()
    argv = ["unshare", "-r", "-m", "bash"] if namespace else ["bash"]
    res = subprocess.run(
        [*argv, "-uc", script + _COLLECT, "bash", *overrides],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        env=child_env(PY=sys.executable, MNT=str(mnt), OUT=str(out), **env),
        preexec_fn=as_from_a_terminal,  # the script's vtlab as from a terminal, whatever the suite was started with
    )
    return _ended(out, res)


def _failed_with(ended: Ended, *expected: str) -> str:
    """The run ended non-zero with one error line last (no traceback) holding each of `expected`; status.json, when
    there is one, says "failed" with the same error. Returns the line."""
    assert ended.rc == 2, (ended.rc, ended.stderr[-3000:])
    line = one_error_line(ended.stderr, expected)
    if ended.status is not None:
        assert ended.status["status"] == "failed", ended.status
        assert ended.status["error"] == line.removeprefix("vtlab: error: "), ended.status
    return line


def test_a_run_dir_that_fills_up_during_training(namespace, shared_cache, tmp_path: Path) -> None:
    """Room for the run at the start (the free-space check passes), filled by someone else after the first checkpoint:
    the next checkpoint is one line naming it, and status.json says "failed" although the disk has no free block left
    for a new file (it is written over the room status.json kept from the start)."""
    script = """
RUN="$MNT/run"
mount -t tmpfs -o size=330m none "$MNT"
"$PY" -m vtlab "$@" hydra.run.dir="$RUN" 2>"$OUT/err" >/dev/null &
pid=$!
while [ ! -e "$RUN/checkpoints/last.ckpt" ] && kill -0 $pid 2>/dev/null; do sleep 0.05; done
kill -STOP $pid  # frozen while the disk is filled: its next write meets a full disk, whichever it is
dd if=/dev/zero of="$MNT/filler" bs=1M 2>/dev/null
kill -CONT $pid
wait $pid; rc=$?
df -B1 --output=avail "$MNT" | tail -1 > "$OUT/avail"
ls -A "$RUN/checkpoints" > "$OUT/checkpoints"
"""
    ended = _scenario(tmp_path, script, _TRAIN)
    run = tmp_path / "mnt" / "run"
    line = _failed_with(ended, ENOSPC, str(run))
    assert line.startswith(f"vtlab: error: {run}/checkpoints/"), line
    assert ended.status is not None, ended.stderr[-3000:]
    assert int((ended.out / "avail").read_text()) <= RESERVE  # still full when status.json was written ...
    assert RESERVE_FILE not in (ended.out / "run_files").read_text().split()  # ... in the room its reserve kept
    assert (ended.out / "checkpoints").read_text().split() == ["last.ckpt"]  # no temp file left


def test_a_full_cache(namespace, tmp_path: Path) -> None:
    """A 20 MB cache: building tiny-roberta there meets a full disk inside safetensors (SafetensorError "No space left
    on device (os error 28)", which names no file): one line placing it in the cache."""
    script = """
RUN="$OUT/run"
mount -t tmpfs -o size=20m none "$MNT"
VTLAB_CACHE="$MNT/cache" "$PY" -m vtlab "$@" hydra.run.dir="$RUN" 2>"$OUT/err" >/dev/null; rc=$?
"""
    ended = _scenario(tmp_path, script, [*_EVAL, "backbone=tiny-roberta"])
    _failed_with(ended, ENOSPC, str(tmp_path / "mnt" / "cache"))
    assert ended.status is not None, ended.stderr[-3000:]


def test_a_read_only_run_dir(namespace, tmp_path: Path) -> None:
    """Refused before Hydra makes the directory or opens its job log there: one line, nothing else on stderr."""
    script = """
RUN="$MNT/run"
mount -t tmpfs -o size=1m none "$MNT" && mount -o remount,ro "$MNT"
"$PY" -m vtlab "$@" hydra.run.dir="$RUN" 2>"$OUT/err" >/dev/null; rc=$?
"""
    ended = _scenario(tmp_path, script, _EVAL)
    line = _failed_with(ended, EROFS)
    assert line.startswith(f"vtlab: error: {tmp_path / 'mnt' / 'run'}: "), line
    assert said(ended.stderr) == [line]
    assert ended.status is None  # nothing could be written: the line is the record


def test_a_run_dir_already_full(namespace, tmp_path: Path) -> None:
    """A 32 KB disk: not even Hydra's record of the run (.hydra/, the job log) fits; refused before it is tried."""
    script = """
RUN="$MNT/run"
mount -t tmpfs -o size=32k none "$MNT"
"$PY" -m vtlab "$@" hydra.run.dir="$RUN" 2>"$OUT/err" >/dev/null; rc=$?
"""
    ended = _scenario(tmp_path, script, _EVAL)
    line = _failed_with(ended, ENOSPC)
    assert line.startswith(f"vtlab: error: {tmp_path / 'mnt' / 'run'}: "), line
    assert said(ended.stderr) == [line] and ended.status is None


def test_a_read_only_cold_cache(namespace, tmp_path: Path) -> None:
    """An empty cache on a read-only file system: the directory it cannot make is named, not a missing one."""
    script = """
RUN="$OUT/run"
mount -t tmpfs -o size=1m none "$MNT" && mount -o remount,ro "$MNT"
VTLAB_CACHE="$MNT/cache" "$PY" -m vtlab "$@" hydra.run.dir="$RUN" 2>"$OUT/err" >/dev/null; rc=$?
"""
    ended = _scenario(tmp_path, script, _EVAL)
    _failed_with(ended, EROFS, str(tmp_path / "mnt" / "cache"))
    assert ended.status is not None, ended.stderr[-3000:]


def test_a_file_size_limit(shared_cache, tmp_path: Path) -> None:
    """`ulimit -f` 20 MB: the first larger file (a checkpoint, or a cold cache's triplets) fails with EFBIG instead of
    SIGXFSZ killing the process, one line naming it."""
    script = """
RUN="$OUT/run"
ulimit -f 20000
"$PY" -m vtlab "$@" hydra.run.dir="$RUN" 2>"$OUT/err" >/dev/null; rc=$?
"""
    ended = _scenario(tmp_path, script, _TRAIN, namespace=False)
    _failed_with(ended, EFBIG)
    assert ended.status is not None, ended.stderr[-3000:]
