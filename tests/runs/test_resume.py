"""Exact resume: a run restarted from its last checkpoint continues as if it had never stopped.

The fast tests drive Lightning with a toy module over the real TripletDataModule (batch order, sampled negatives,
dropout RNG across epoch boundaries and validations); the slow one SIGKILLs a real `python -m vtlab` training run and
compares the restarted run's final metrics and weights with an uninterrupted run's.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from helpers import (
    ROOT,
    TINY_RUN,
    compose_config,
    compose_run,
    prepare_run_dir,
    run_results,
    run_vtlab,
    said,
    start_vtlab,
)
from torch import nn

from vtlab.callbacks.checkpoints import SameDirCheckpointIO, load_checkpoint
from vtlab.callbacks.last_checkpoint import LastCheckpoint
from vtlab.callbacks.resume_state import ResumeState
from vtlab.callbacks.run_config import RunConfigLogger
from vtlab.core.atomic import atomic_dir
from vtlab.data.collections import Collection
from vtlab.data.datamodule import ResumableDataLoader, TripletDataModule
from vtlab.data.examples import TripletExample
from vtlab.runs.directory import LAST_CKPT
from vtlab.tracking.resumable_csv import ResumableCSVLogger

# ---- toy training: what the batches and the RNG look like across a restart --------------------------------------


class _Tok:
    """A stand-in tokenizer: each distinct text gets one id, so a batch tells which texts it holds."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def __call__(self, texts, **_: object) -> dict[str, torch.Tensor]:
        ids = torch.tensor([[self.ids.setdefault(t, len(self.ids))] for t in texts])
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


class _Toy(pl.LightningModule):
    """Records, per step, the query and document ids of its batch and one dropout-stream draw."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 1)
        self.drop = nn.Dropout(0.5)
        self.seen: list[tuple[int, list[int], list[int], float]] = []

    def training_step(self, batch, batch_idx):
        draw = float(torch.rand(()))  # the global torch stream, as dropout uses it
        self.seen.append(
            (
                self.global_step,
                batch["query"]["input_ids"][:, 0].tolist(),
                batch["docs"]["input_ids"][:, 0].tolist(),
                draw,
            )
        )
        self.log("draw", draw)  # a row per step in the CSV log (when there is one)
        return self.lin(self.drop(torch.ones(2, 4))).sum()

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        return None

    def on_validation_epoch_end(self) -> None:
        self.seen.append(("validation", self.global_step))  # a restart must neither skip nor repeat one
        self.log("validated_at", float(self.global_step))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class _Probe(pl.Callback):
    """Logs a row at step 0 when training (re)starts, as the preflight probe (vtlab.callbacks.preflight) does."""

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        for lg in trainer.loggers:
            lg.log_metrics({"probe": float(trainer.global_step)}, step=0)


def _examples(n: int = 10) -> list[TripletExample]:
    return [TripletExample(f"q{i}", f"p{i}", [f"n{i}-{j}" for j in range(4)]) for i in range(n)]


class _Killed(BaseException):
    """Stands for SIGKILL: nothing after it runs (no on_exception checkpoint: ModelCheckpoint saves none by default)."""


class _KillAfter(pl.Callback):
    """Dies at the first hook after step `step` finished — before a validation due at that step, or the next step."""

    def __init__(self, step: int) -> None:
        self.step = step

    def _maybe_die(self, trainer: pl.Trainer, *_: object) -> None:
        if trainer.global_step >= self.step:
            raise _Killed

    on_validation_start = on_train_batch_start = _maybe_die


def _fit(tmp: Path, tok: _Tok, kill_after: int | None = None, ckpt: Path | None = None, csv_log: bool = False) -> list:
    torch.manual_seed(123)  # the resumed run starts from another RNG state than the killed one had: must not matter
    if ckpt is not None:
        torch.rand(17)
    dev = Collection("dev", corpus={"d1": "doc one", "d2": "doc two"}, queries={"a": "query"}, qrels={"a": {"d1": 1}})
    dm = TripletDataModule(_examples(), dev=dev, tokenizer=tok, batch_size=4, num_negatives=2, seed=7)
    module = _Toy()
    trainer = pl.Trainer(
        max_steps=9,
        max_epochs=-1,
        accelerator="cpu",
        enable_progress_bar=False,
        log_every_n_steps=1,
        logger=ResumableCSVLogger(save_dir=str(tmp), name="csv", version="") if csv_log else False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        val_check_interval=2,
        check_val_every_n_epoch=None,
        default_root_dir=tmp,
        plugins=[SameDirCheckpointIO()],
        callbacks=[
            LastCheckpoint(str(tmp / "checkpoints"), every_n_train_steps=1),
            ResumeState(str(ckpt) if ckpt else None),
            *([_KillAfter(kill_after)] if kill_after else []),
            *([RunConfigLogger(), _Probe()] if csv_log else []),
        ],
    )
    try:
        trainer.fit(module, datamodule=dm, ckpt_path=str(ckpt) if ckpt else None)
    except _Killed:
        pass
    return module.seen


@pytest.mark.train
@pytest.mark.parametrize("kill_after", [1, 2, 3, 5, 6, 7])
def test_restart_replays_the_remaining_batches_negatives_and_dropout(tmp_path: Path, kill_after: int) -> None:
    """10 examples, batches of 4: epochs end after steps 3, 6, 9; validation every 2 steps; a checkpoint every step.
    Killed right after any step (mid-epoch, at an epoch's end, before a due validation) and restarted, the run goes on
    exactly as the uninterrupted one: same queries, same sampled negatives, same dropout draws, every validation
    once. At most the steps since the last checkpoint are done again."""
    tok = _Tok()
    reference = _fit(tmp_path / "ref", tok)
    steps = [s for s in reference if s[0] != "validation"]
    assert len(steps) == 9 and len({tuple(q) for _, q, _, _ in steps[:3]}) == 3
    assert [s for s in reference if s[0] == "validation"] == [("validation", k) for k in (2, 4, 6, 8)]
    killed = _fit(tmp_path / "run", tok, kill_after=kill_after)
    assert killed == reference[: len(killed)] and killed[-1][0] == kill_after - 1
    resumed = _fit(tmp_path / "run", tok, ckpt=tmp_path / "run" / LAST_CKPT)
    redone = len(killed) + len(resumed) - len(reference)
    assert 0 <= redone <= 2  # the step after the last checkpoint (and its validation), no more
    assert killed[: len(killed) - redone] + resumed == reference


def _csv_rows(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "csv" / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.train
@pytest.mark.parametrize("kill_after", [1, 2, 3, 5, 6, 7])
def test_csv_log_keeps_the_rows_from_before_the_interrupt(tmp_path: Path, kill_after: int) -> None:
    """Killed and resumed in the same run dir, the CSV log ends up as the uninterrupted run's: each step's and each
    validation's row once (the killed part's rows before the checkpoint kept, the replayed ones not doubled)."""
    tok = _Tok()
    _fit(tmp_path / "ref", tok, csv_log=True)
    reference = _csv_rows(tmp_path / "ref")
    assert [r["step"] for r in reference if r["draw"]] == [str(s) for s in range(9)]
    assert [r["probe"] for r in reference if r["probe"]] == ["0.0"]  # the resumed run's probe (at step 0) is a repeat
    assert [r["validated_at"] for r in reference if r["validated_at"]] == ["2.0", "4.0", "6.0", "8.0"]
    _fit(tmp_path / "run", tok, kill_after=kill_after, csv_log=True)
    before = _csv_rows(tmp_path / "run")
    assert 0 < len(before) < len(reference)  # (a column the killed part never logged is absent from its file)
    assert before == [{k: r[k] for k in before[0]} for r in reference[: len(before)]]
    _fit(tmp_path / "run", tok, ckpt=tmp_path / "run" / LAST_CKPT, csv_log=True)
    assert _csv_rows(tmp_path / "run") == reference
    assert [p.name for p in (tmp_path / "run" / "csv").iterdir()] == ["metrics.csv"]  # no temp file left


@pytest.mark.train
def test_csv_log_of_a_run_started_over_holds_only_the_new_rows(tmp_path: Path) -> None:
    """No checkpoint to resume from (or overwrite=true): the run starts at step 0 and the old rows all go."""
    (tmp_path / "csv").mkdir()
    (tmp_path / "csv" / "metrics.csv").write_text("draw,epoch,step\n0.5,0,0\n0.25,0,1\n0.125,0,40\n")
    _fit(tmp_path, _Tok(), csv_log=True)
    reference_dir = tmp_path / "ref"
    _fit(reference_dir, _Tok(), csv_log=True)
    assert _csv_rows(tmp_path) == _csv_rows(reference_dir)


def test_csv_log_without_run_config_logger_takes_up_at_the_first_step_logged(tmp_path: Path) -> None:
    """A plain Lightning Trainer (no RunConfigLogger to say where training starts): the first row logged tells."""
    (tmp_path / "csv").mkdir()
    (tmp_path / "csv" / "metrics.csv").write_text("loss,step\n0.5,0\n0.25,1\n0.125,2\n0.0625,3\n")
    logger = ResumableCSVLogger(save_dir=str(tmp_path), name="csv", version="")
    for step in (2, 3):
        logger.log_metrics({"loss": 1.0 / (step + 1), "extra": 7.0}, step=step)
        logger.save()
    assert _csv_rows(tmp_path) == [
        {"extra": "", "loss": "0.5", "step": "0"},
        {"extra": "", "loss": "0.25", "step": "1"},
        {"extra": "7.0", "loss": str(1 / 3), "step": "2"},
        {"extra": "7.0", "loss": "0.25", "step": "3"},
    ]


def test_loader_state_skips_served_batches_and_rolls_over_at_epoch_end() -> None:
    tok = _Tok()
    dm = TripletDataModule(_examples(), tokenizer=tok, batch_size=4, num_negatives=1, seed=1)
    loader = dm.train_dataloader()
    assert isinstance(loader, ResumableDataLoader) and len(loader) == 3
    full = [b["query"]["input_ids"][:, 0].tolist() for b in loader]
    it = iter(loader)
    next(it)
    assert loader.state_dict() == {"epoch": 0, "batches": 1}
    again = TripletDataModule(_examples(), tokenizer=tok, batch_size=4, num_negatives=1, seed=1).train_dataloader()
    again.load_state_dict({"epoch": 0, "batches": 1})
    assert [b["query"]["input_ids"][:, 0].tolist() for b in again] == full[1:]
    assert again.state_dict() == {"epoch": 0, "batches": 3}
    again.load_state_dict({"epoch": 0, "batches": 3})  # saved after the epoch's last batch: next epoch, from its start
    assert again.sampler.epoch == 1 and len(list(again)) == 3


# ---- where a restart finds its run -----------------------------------------------------------------------------


def test_interrupted_run_dir_is_resumed_and_a_fresh_one_is_not(tmp_path: Path) -> None:
    assert prepare_run_dir(compose_run(tmp_path)) is None
    # killed before its first checkpoint: what it left (APC report, logs) is made again, the same command starts over
    (tmp_path / "apc_report.json").write_text("{}")
    (tmp_path / "csv").mkdir()
    assert prepare_run_dir(compose_run(tmp_path)) is None
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / LAST_CKPT).write_bytes(b"x")
    (tmp_path / "checkpoints" / "best-step4.ckpt").write_bytes(b"x")
    assert prepare_run_dir(compose_run(tmp_path)) == tmp_path / LAST_CKPT
    assert prepare_run_dir(compose_run(tmp_path, "resume=true")) == tmp_path / LAST_CKPT


def test_overwrite_removes_old_checkpoints_so_they_are_not_resumed(tmp_path: Path) -> None:
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / LAST_CKPT).write_bytes(b"x")
    (tmp_path / "eval" / "boolq").mkdir(parents=True)
    (tmp_path / "eval" / "boolq" / "metrics.json").write_text("{}")
    assert prepare_run_dir(compose_run(tmp_path, "overwrite=true")) is None
    assert not (tmp_path / "checkpoints").exists()


# ---- writes a crash cannot leave half done ---------------------------------------------------------------------


def test_atomic_dir_replaces_whole_or_not_at_all(tmp_path: Path) -> None:
    out = tmp_path / "model"
    with atomic_dir(out) as tmp:
        (tmp / "config.json").write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_dir(out) as tmp:
            (tmp / "config.json").write_text("new, half")
            raise RuntimeError("killed while saving")
    assert (out / "config.json").read_text() == "old"
    with atomic_dir(out) as tmp:
        (tmp / "weights").write_text("new")
    assert sorted(p.name for p in out.iterdir()) == ["weights"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no temp or old directories left behind


def test_checkpoint_write_failure_keeps_the_previous_last_ckpt(tmp_path: Path, monkeypatch) -> None:
    io, path = SameDirCheckpointIO(), tmp_path / "checkpoints" / "last.ckpt"
    io.save_checkpoint({"global_step": 3}, path)

    def dies(*args, **kwargs):
        raise KeyboardInterrupt  # interrupted halfway through serializing

    monkeypatch.setattr(torch, "save", dies)
    with pytest.raises(KeyboardInterrupt):
        io.save_checkpoint({"global_step": 6}, path)
    monkeypatch.undo()
    assert torch.load(path, weights_only=True) == {"global_step": 3}
    assert [p.name for p in path.parent.iterdir()] == ["last.ckpt"]


def test_apc_histogram_is_renamed_into_place(tmp_path: Path) -> None:
    from vtlab.apc.calibration import save_histogram

    out = save_histogram(torch.randn(500), 0.3, tmp_path / "apc_hist.png")
    assert out.read_bytes().startswith(b"\x89PNG") and [p.name for p in tmp_path.iterdir()] == ["apc_hist.png"]


@pytest.mark.train
def test_refused_run_writes_nothing_and_never_starts(tmp_path: Path) -> None:
    from vtlab.core.errors import RunDirError
    from vtlab.stages.pipeline import run

    (tmp_path / "eval" / "boolq").mkdir(parents=True)
    (tmp_path / "eval" / "boolq" / "metrics.json").write_text("{}")
    started = []
    with pytest.raises(RunDirError, match="is finished"):
        run(compose_run(tmp_path), on_start=lambda: started.append(True))
    assert started == []


# ---- a real run, SIGKILLed mid-training -----------------------------------------------------------------------

_RUN = [
    *TINY_RUN,
    "trainer.max_steps=12",
    "trainer.val_check_interval=6",
    "callbacks.last_checkpoint.every_n_train_steps=3",
]


# the SIGKILL test also checks the CSV log: a row every second step (and each validation's)
_LOGGED = ["logger=csv", "trainer.log_every_n_steps=2"]


def _vtlab(run_dir: Path, log: Path) -> subprocess.Popen:
    # output to a file: a pipe nobody drains while the other run goes on could fill up and stall the process
    with open(log, "a") as f:
        return start_vtlab(*_RUN, *_LOGGED, f"hydra.run.dir={run_dir}", stdout=f, stderr=subprocess.STDOUT)


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:]


def _ckpt_step(path: Path) -> int:
    return int(torch.load(path, map_location="cpu", weights_only=False)["global_step"])


def _training_state(path: Path) -> dict[str, torch.Tensor]:
    """A checkpoint's weights and optimizer moments, by name."""
    ckpt = load_checkpoint(path)
    state = {f"weights/{k}": v for k, v in ckpt["state_dict"].items()}
    for i, opt in enumerate(ckpt["optimizer_states"]):
        for param, moments in opt["state"].items():
            state.update({f"optimizer{i}/{param}/{k}": torch.as_tensor(v) for k, v in moments.items()})
    return state


def _logged(run_dir: Path) -> list[dict[str, str]]:
    """The CSV log's rows without timings (the evaluation's *_s, *_ms_per_query columns)."""
    return [{k: v for k, v in row.items() if not k.endswith(("_s", "_ms_per_query"))} for row in _csv_rows(run_dir)]


@pytest.mark.cli
@pytest.mark.slow
def test_sigkilled_training_resumes_to_the_same_metrics_and_weights(tmp_path: Path) -> None:
    ref_dir, run_dir = tmp_path / "uninterrupted", tmp_path / "killed"
    ref_log, run_log = tmp_path / "uninterrupted.log", tmp_path / "killed.log"
    reference = _vtlab(ref_dir, ref_log)
    killed = _vtlab(run_dir, run_log)
    last = run_dir / LAST_CKPT
    deadline = time.monotonic() + 300
    # kill once last.ckpt holds step 6 or later (written after the step-6 validation): in the middle of training
    while killed.poll() is None and time.monotonic() < deadline:
        if last.is_file() and _ckpt_step(last) >= 6:
            break
        time.sleep(0.2)
    assert killed.poll() is None, f"the run ended before it could be killed: {_tail(run_log)}"
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait()
    killed_at = _ckpt_step(last)
    assert killed.returncode == -signal.SIGKILL and 6 <= killed_at < 12
    assert not (run_dir / "eval").exists() and not (run_dir / "model").exists()
    logged_before = _logged(run_dir)
    assert len(logged_before) >= 3  # steps 0, 2, 4 and the step-6 validation at least

    resumed = _vtlab(run_dir, run_log)  # the same command: resume=auto finds checkpoints/last.ckpt
    assert resumed.wait(timeout=600) == 0, _tail(run_log)
    assert reference.wait(timeout=600) == 0, _tail(ref_log)
    assert _ckpt_step(last) == 12
    # the CSV log holds the rows from before the kill, and each step's once: the uninterrupted run's log (compared
    # first: a difference names the first step where the resumed training left the uninterrupted one)
    reference_log, got_log = _logged(ref_dir), _logged(run_dir)
    assert got_log == reference_log, _first_difference(reference_log, got_log)
    assert len(got_log) > len(logged_before)
    assert [{k: r[k] for k in logged_before[0]} for r in got_log[: len(logged_before)]] == logged_before
    ref_metrics, ref_weights = run_results(ref_dir)
    got_metrics, got_weights = run_results(run_dir)
    assert got_metrics == ref_metrics  # exactly: CPU training is deterministic here
    trec = Path("eval") / "boolq-clean" / "run.trec"
    assert (run_dir / trec).read_bytes() == (ref_dir / trec).read_bytes()  # every score of every ranked document
    assert ref_weights.keys() == got_weights.keys()
    for name, tensor in ref_weights.items():
        assert torch.equal(tensor, got_weights[name]), name
    # the evaluated weights may be a best checkpoint from before the kill: the last one holds the training after it
    ref_last, got_last = (_training_state(d / LAST_CKPT) for d in (ref_dir, run_dir))
    assert ref_last.keys() == got_last.keys()
    for name, tensor in ref_last.items():
        assert torch.equal(tensor, got_last[name]), name


def _first_difference(reference: list[dict[str, str]], got: list[dict[str, str]]) -> str:
    """Where two CSV logs first part: the row's step and each value that differs."""
    for i, (a, b) in enumerate(zip(reference, got)):
        if a != b:
            diff = {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}
            return f"row {i} (step {a.get('step')}): (uninterrupted, resumed) {diff}"
    return f"{len(reference)} rows uninterrupted, {len(got)} resumed"


# ---- one writer per run directory; a resume continues the same config ------------------------------------------


@pytest.mark.train
def test_a_second_writer_of_a_run_directory_is_refused(tmp_path: Path) -> None:
    from vtlab.core.errors import RunDirError
    from vtlab.runs.directory import run_dir_lock
    from vtlab.stages.pipeline import run

    started = []
    with run_dir_lock(tmp_path):  # another process's run (flock: a second open of the directory conflicts too)
        with pytest.raises(RunDirError) as ei:
            run(compose_run(tmp_path), on_start=lambda: started.append(True))
    assert str(ei.value) == (
        f"run directory {tmp_path} is in use by another vtlab process (it holds the directory's "
        "lock); wait for it to end, or choose another hydra.run.dir"
    )
    assert started == [] and list(tmp_path.iterdir()) == []
    with run_dir_lock(tmp_path):  # released when the first run ends
        pass


@pytest.mark.cli
def test_a_second_writer_through_the_cli_gets_one_line_and_writes_nothing(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nfrom pathlib import Path\n"
            "from vtlab.runs.directory import run_dir_lock\n"
            f"with run_dir_lock(Path({str(tmp_path)!r})):\n    print('locked', flush=True)\n"
            "    time.sleep(120)",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        res = run_vtlab(*_RUN, f"hydra.run.dir={tmp_path}", timeout=300)
    finally:
        holder.kill()
        holder.wait()
    assert res.returncode == 2, res.stderr[-3000:]
    assert said(res.stderr) == [
        f"vtlab: error: run directory {tmp_path} is in use by another vtlab "
        "process (it holds the directory's lock); wait for it to end, or "
        "choose another hydra.run.dir"
    ]
    assert list(tmp_path.iterdir()) == []  # not even Hydra's .hydra/ and log


def _checkpoint_recording(path: Path, configs: list) -> str:
    """A checkpoint as fine-tuning writes it, with ResumeState's record of the run's config (real Lightning save)."""
    from vtlab.callbacks.resume_state import ResumeState

    class Toy(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            return self.lin(batch[0]).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.ones(2, 2)), batch_size=1)
    trainer = pl.Trainer(
        max_steps=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[ResumeState(None, configs)],
    )
    trainer.fit(Toy(), data)
    trainer.save_checkpoint(path)
    return str(path)


@pytest.mark.train
def test_resume_refuses_a_changed_config_unless_asked(tmp_path: Path) -> None:
    from vtlab.callbacks.resume_state import resume_configs
    from vtlab.core.errors import RunDirError
    from vtlab.runs.resume import run_config

    first = compose_run(tmp_path / "a")
    ckpt = _checkpoint_recording(tmp_path / "last.ckpt", [run_config(first)])
    # the same command (another run dir, name, logger: run-local) resumes; the recorded config stays the only one
    same = compose_run(tmp_path / "b", "name=other", "logger=none", "resume=true")
    assert resume_configs(same, ckpt) == [run_config(first)]
    changed = compose_run(tmp_path / "a", "model.optimizer.lr=1e-3", "data.batch_size=7")
    with pytest.raises(RunDirError) as ei:
        resume_configs(changed, ckpt)
    assert str(ei.value) == (
        f"{ckpt}: cannot resume: the config differs from the interrupted run's (data.batch_size: "
        f"{first.data.batch_size!r} -> 7; model.optimizer.lr: {first.model.optimizer.lr!r} -> "
        "0.001); rerun with its settings, pass resume_with_changes=true to continue with these "
        "(both are recorded in the checkpoint), or overwrite=true to start over"
    )
    asked = compose_run(tmp_path / "a", "model.optimizer.lr=1e-3", "data.batch_size=7", "resume_with_changes=true")
    assert resume_configs(asked, ckpt) == [run_config(first), run_config(asked)]  # both recorded from now on
    assert run_config(asked)["model"]["optimizer"]["lr"] == 1e-3


# ---- a refused resume changes nothing in the interrupted run's directory ---------------------------------------
_FIRST = ["backbone=splade-tiny", "vocab=native", "apc=off", "logger=none"]


def _interrupted_run(run_dir: Path) -> dict[str, tuple[bytes, int]]:
    """An interrupted run's directory: its checkpoint (recording the config of _FIRST), Hydra's record, status.json
    and log; returns every file's bytes and mtime."""
    from vtlab.runs.resume import run_config

    (run_dir / "checkpoints").mkdir(parents=True)
    _checkpoint_recording(run_dir / LAST_CKPT, [run_config(compose_config(_FIRST))])
    (run_dir / ".hydra").mkdir()
    (run_dir / ".hydra" / "config.yaml").write_text("seed: 0\nrecorded: by the interrupted run\n")
    (run_dir / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in _FIRST))
    (run_dir / "status.json").write_text('{"status": "interrupted", "signal": "SIGKILL"}\n')
    (run_dir / "__main__.log").write_text("the interrupted run's log\n")
    return _files(run_dir)


def _files(root: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(root.rglob("*")) if p.is_file()
    }


@pytest.mark.train
def test_a_refused_resume_is_refused_before_on_start_writes_anything(tmp_path: Path) -> None:
    from vtlab.core.errors import RunDirError
    from vtlab.stages.pipeline import run

    before = _interrupted_run(tmp_path)
    started = []
    with pytest.raises(RunDirError, match="cannot resume: the config differs from the interrupted run's"):
        run(compose_run(tmp_path, *_FIRST, "model.optimizer.lr=0.001"), on_start=lambda: started.append(True))
    assert started == [] and _files(tmp_path) == before  # status.json is written by on_start: never reached


@pytest.mark.cli
@pytest.mark.train
def test_a_refused_resume_through_the_cli_leaves_the_record_and_status_byte_identical(tmp_path: Path) -> None:
    """RunDirGuard checks the resume before Hydra rewrites `.hydra/` (what export and reuse read back) and before
    status.json: a refused `python -m vtlab` changes no byte (and no mtime) of the interrupted run."""
    before = _interrupted_run(tmp_path)
    first_lr = compose_config(_FIRST).model.optimizer.lr
    res = run_vtlab(*_FIRST, "model.optimizer.lr=0.001", f"hydra.run.dir={tmp_path}", timeout=600)
    assert res.returncode == 2, res.stderr[-3000:]
    assert said(res.stderr) == [
        f"vtlab: error: {tmp_path / LAST_CKPT}: cannot resume: the config differs from the interrupted run's "
        f"(model.optimizer.lr: {first_lr!r} -> 0.001); rerun with its settings, pass resume_with_changes=true to "
        "continue with these (both are recorded in the checkpoint), or overwrite=true to start over"
    ]
    assert _files(tmp_path) == before


@pytest.mark.train
def test_a_resume_refused_for_changed_inputs_changes_nothing(tmp_path: Path) -> None:
    """The same config, but the training file changed since the interrupted run recorded it (.hydra/inputs.json):
    refused by the admission's resume check (vtlab.runs.inputs, RunDirGuard's in the CLI) before anything there is
    written; the line is the one the CLI prints."""
    from vtlab.core.errors import RunDirError, config_key, one_line
    from vtlab.runs.inputs import fingerprints, record
    from vtlab.runs.plan import run_plan
    from vtlab.runs.resume import run_config
    from vtlab.stages.admission import admit

    train = tmp_path / "train.jsonl"
    train.write_text(json.dumps({"query": "q", "positive": "p", "negatives": ["n"]}) + "\n")
    first = [*_FIRST, "data=jsonl", f"data.train.path={train}"]
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    _checkpoint_recording(run_dir / LAST_CKPT, [run_config(compose_config(first))])
    record(run_dir, fingerprints(run_plan(compose_config(first), run_dir).inputs))  # writes .hydra/inputs.json
    (run_dir / ".hydra" / "config.yaml").write_text("recorded: by the interrupted run\n")
    (run_dir / "status.json").write_text('{"status": "interrupted"}\n')
    before = _files(run_dir)
    train.write_text(json.dumps({"query": "q2", "positive": "p2", "negatives": ["n2"]}) + "\n")
    cfg = compose_config([*first, f"paths.run_dir={run_dir}"])
    started = []
    with pytest.raises(RunDirError) as ei, admit(cfg, on_start=lambda: started.append(True)):
        pass
    line = one_line(ei.value, config_key(ei.value, cfg))  # what pipeline.run_or_exit prints
    assert "\n" not in line and line.startswith(f"vtlab: error: {train} (data.train.path) changed"), line
    assert started == [] and _files(run_dir) == before
